"""`imagegen new-op`: the skeleton it writes, the names and targets it refuses, and that it
writes the package whole or not at all.

Nothing compiles here: tests/loader/test_new_op_build.py builds the skeletons and runs their
self-tests and tests. Each test names its package uniquely, since a process imports a package
once.
"""

from __future__ import annotations

import errno
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from imagegen.commands import new_op
from op_builder import SHARED_INCLUDE_DIR
from op_builder.registry import registry_for
from tests.op_package_files import unique
from tests.unit.contract import assert_json_error, assert_reported, invoke

REPO = Path(__file__).resolve().parents[4]
COMMON_FILES = [
    ".dockerignore",
    "README.md",
    "__init__.py",
    "builders.py",
    "front.py",
    "selftest.py",
    "tests/__init__.py",
]


def _files(root: Path) -> list[str]:
    return sorted(p.relative_to(root).as_posix() for p in root.rglob("*") if p.is_file())


def _new(root: Path, op: str, *extra: str) -> dict[str, object]:
    result = invoke(["new-op", op, "-o", str(root), "--json", *extra])
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    assert isinstance(doc, dict)
    return doc


def test_cpu_skeleton_is_a_valid_op_package(tmp_path: Path) -> None:
    root, op = tmp_path / unique("skel_cpu_pkg"), unique("skel_cpu")
    doc = _new(root, op)
    expected = sorted([*COMMON_FILES, f"csrc/{op}.cpp", f"tests/test_{op}.py"])
    assert doc["package"] == root.name and doc["op"] == op and doc["target"] == "cpu"
    assert doc["files"] == expected == _files(root)
    assert doc["path"] == str(root.resolve())
    assert f"python -m op_builder selftest {op} --op-source {root}" in doc["next"]  # type: ignore[operator]
    assert list(tmp_path.iterdir()) == [root]  # no staging folder left beside it
    # As op_builder sees it: discovered, valid as declared, its sources where they should be.
    registry = registry_for([root])
    builder = registry.ops[op]
    assert registry.origins[op].package == root.name
    assert builder.target == "cpu" and builder.build_variable == f"DS_BUILD_{op.upper()}"
    assert builder.selftest == f"{root.name}.selftest:run"
    assert builder.all_runtime_packages() == ("libgomp1",)
    assert all(Path(p).is_file() for p in builder.source_paths())
    # A stable-ABI op, its binding written against op_abi.h from the headers op_builder ships
    # (the package has no includes/ of its own: that entry is skipped).
    assert builder.stable_abi == "2.10"
    assert builder.include_paths() == (SHARED_INCLUDE_DIR,)
    assert (Path(SHARED_INCLUDE_DIR) / "op_abi.h").is_file()
    source = (root / "csrc" / f"{op}.cpp").read_text()
    assert '#include "op_abi.h"' in source and "OP_LIBRARY(m)" in source and "PYBIND11_MODULE" in source


def test_cuda_skeleton_has_device_code_launcher_and_binding(tmp_path: Path) -> None:
    root, op = tmp_path / unique("skel_gpu_pkg"), unique("skel_gpu")
    doc = _new(root, op, "--cuda")
    device = [f"csrc/{op}.cu", f"csrc/{op}_binding.cpp", f"includes/{op}.h", f"tests/test_{op}.py"]
    assert doc["target"] == "gpu" and doc["files"] == sorted([*COMMON_FILES, *device]) == _files(root)
    builder = registry_for([root]).ops[op]
    assert builder.target == "gpu"
    assert builder.include_paths() == (str(root.resolve() / "includes"), SHARED_INCLUDE_DIR)
    assert builder.stable_abi == "2.10"
    # Device code includes no torch header: cuda-check compiles it without torch's CUDA build.
    assert "torch" not in (root / "csrc" / f"{op}.cu").read_text()
    # The binding alone sees torch, through the shared headers, for both ABIs.
    binding = (root / "csrc" / f"{op}_binding.cpp").read_text()
    assert '#include "gpu_bindings.h"' in binding and "OP_LIBRARY_IMPL(CUDA, m)" in binding
    assert "torch/extension.h" not in binding and "c10/cuda" not in binding


def test_default_folder_and_text_report(workdir: Path) -> None:
    op = unique("skel_txt")
    result = invoke(["new-op", op])
    assert result.exit_code == 0, result.output
    root = workdir / f"{op}_ops"
    assert (root / "builders.py").is_file()
    assert f"wrote the op package {op}_ops (CPU op {op})" in result.stdout
    assert f"  csrc/{op}.cpp" in result.stdout.splitlines()
    assert f"imagegen build --op-source {op}_ops --ops {op} --cpu" in result.stdout


def test_skeletons_are_lint_clean_python(tmp_path: Path) -> None:
    """With ruff's defaults (88 columns, a fresh project's config), as a user's repository runs it."""
    _new(tmp_path / unique("lint_cpu_pkg"), unique("lint_cpu"))
    _new(tmp_path / unique("lint_gpu_pkg"), unique("lint_gpu"), "--cuda")
    ruff = [sys.executable, "-m", "ruff"]
    for args in (
        ["check", "--isolated", "--target-version", "py39", "--select", "E,F,W,I,B,UP,SIM", "."],
        ["format", "--isolated", "--check", "."],
    ):
        done = subprocess.run([*ruff, *args], cwd=tmp_path, capture_output=True, text=True, check=False)
        assert done.returncode == 0, done.stdout + done.stderr


@pytest.mark.parametrize(
    ("name", "fragment"),
    [
        ("MyOp", "not a valid op name"),
        ("1op", "not a valid op name"),
        ("my-op", "not a valid op name"),
        ("class", "not a valid op name"),  # the front's function is named after the op
        ("cpu_adam", "exists already (from op_builder)"),
    ],
)
def test_bad_names_exit_2_writing_nothing(tmp_path: Path, name: str, fragment: str) -> None:
    assert_reported(invoke(["new-op", name, "-o", str(tmp_path / "pkg")]), 2, fragment)
    assert list(tmp_path.iterdir()) == []


def test_bad_name_with_json_is_one_error_document(tmp_path: Path) -> None:
    assert_json_error(
        invoke(["new-op", "cpu_adam", "-o", str(tmp_path / "pkg"), "--json"]), 2, "exists already"
    )
    assert list(tmp_path.iterdir()) == []


def test_an_op_of_a_listed_package_is_taken_too(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DS_OP_SOURCES", str(REPO / "examples" / "acme_ops"))
    result = invoke(["new-op", "acme_rmsnorm", "-o", str(tmp_path / "pkg")])
    assert_reported(result, 2, "exists already (from directory")
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(
    ("folder", "fragment"),
    [
        ("my-ops", "cannot be a Python package's name"),
        ("json", "importable already"),  # would shadow (or be shadowed by) the standard library's
    ],
)
def test_bad_package_folders_exit_2(tmp_path: Path, folder: str, fragment: str) -> None:
    assert_reported(invoke(["new-op", unique("skel_bad"), "-o", str(tmp_path / folder)]), 2, fragment)
    assert list(tmp_path.iterdir()) == []


def test_a_non_empty_folder_is_never_overwritten(tmp_path: Path) -> None:
    root = tmp_path / "mine"
    root.mkdir()
    (root / "notes.txt").write_text("keep me\n")
    assert_reported(invoke(["new-op", unique("skel_full"), "-o", str(root)]), 2, "is not empty")
    assert _files(root) == ["notes.txt"] and (root / "notes.txt").read_text() == "keep me\n"
    assert list(tmp_path.iterdir()) == [root]


def test_a_file_in_the_way_exits_2(tmp_path: Path) -> None:
    (tmp_path / "pkg").write_text("")
    assert_reported(invoke(["new-op", unique("skel_file"), "-o", str(tmp_path / "pkg")]), 2, "not a folder")


def test_an_empty_folder_is_filled(tmp_path: Path) -> None:
    root = tmp_path / unique("skel_empty_pkg")
    root.mkdir()
    op = unique("skel_empty")
    _new(root, op)
    assert f"csrc/{op}.cpp" in _files(root)


def test_a_failed_write_leaves_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def full_disk(src: object, dst: object) -> None:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(new_op.os, "replace", full_disk)
    result = invoke(["new-op", unique("skel_nospace"), "-o", str(tmp_path / "pkg")])
    assert_reported(result, 2, "nothing was written")
    assert list(tmp_path.iterdir()) == []  # the staging folder is gone too
