"""`imagegen new-op NAME --in-tree`: a family of ours in kernels/, with its test in tests/kernels/,
that the registry (and so `python -m op_builder list`, plans, images) finds with no other file
edited; the folders and files it refuses, writing nothing.

Nothing compiles here: tests/loader/test_new_op_build.py builds an in-tree family and runs its
self-test and test file.
"""

from __future__ import annotations

import errno
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from imagegen.commands import new_op
from op_builder.registry import families_in
from tests.op_package_files import unique
from tests.unit.contract import assert_json_error, assert_reported, invoke

REPO = Path(__file__).resolve().parents[4]
FAMILY_FILES = ["__init__.py", "builders.py", "front.py", "selftest.py"]


def checkout_copy(dest: Path, *extra: str) -> Path:
    """What of this checkout an in-tree family needs, copied to ``dest`` (kernels/ under its own
    name, op_builder/, pyproject.toml, and the files ``extra`` names): imported from there (it goes
    first on PYTHONPATH), it is the checkout new-op writes into, and the repository stays as it is."""
    ignore = shutil.ignore_patterns("__pycache__", "*.so", "manifest.json")
    for folder in ("kernels", "op_builder"):
        shutil.copytree(REPO / folder, dest / folder, ignore=ignore)
    for name in ("pyproject.toml", *extra):
        (dest / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(REPO / name, dest / name)
    return dest


def _python(checkout: Path, *args: str, **extra_env: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DS_", "PYTHONPATH", "IMAGEGEN_"))}
    env.update(PYTHONPATH=str(checkout), **extra_env)
    return subprocess.run(
        [sys.executable, *args], cwd=checkout, env=env, capture_output=True, text=True, timeout=120
    )


@pytest.fixture(scope="module")
def checkout(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return checkout_copy(tmp_path_factory.mktemp("checkout"))


def test_a_family_written_in_tree_is_listed_and_planned_with_no_other_edit(checkout: Path) -> None:
    cpu, gpu = unique("tree_cpu"), unique("tree_gpu")
    made = _python(checkout, "-m", "imagegen", "new-op", cpu, "--in-tree", "--json")
    assert made.returncode == 0, made.stderr
    doc = json.loads(made.stdout)
    family = checkout / "kernels" / cpu
    assert doc["package"] == f"kernels.{cpu}" and doc["path"] == str(family) and doc["target"] == "cpu"
    assert doc["files"] == sorted([*FAMILY_FILES, f"csrc/{cpu}.cpp"])
    assert doc["test"] == str(checkout / "tests" / "kernels" / f"test_{cpu}.py")
    assert doc["next"] == [
        f"python -m op_builder selftest {cpu}",
        f"python -m pytest {doc['test']}",
        f"imagegen build --ops {cpu} --cpu",
    ]
    assert "FAMILY_RANK = 50\n" in (family / "builders.py").read_text()  # after optim's 10 ... 40
    assert _python(checkout, "-m", "imagegen", "new-op", gpu, "--in-tree", "--cuda").returncode == 0
    assert "FAMILY_RANK = 60\n" in (checkout / "kernels" / gpu / "builders.py").read_text()

    listed = _python(checkout, "-m", "op_builder", "list")
    assert listed.returncode == 0, listed.stderr
    # Each after ours of its target, in the order of the ranks new-op gave them.
    assert listed.stdout.split() == [
        *("cpu_adam", "cpu_adagrad", "cpu_lion", "async_io", cpu),
        *("fused_adam", "fused_lamb", "fused_lion", "transformer", "quantizer", "fp_quantizer", gpu),
    ]
    plan = _python(checkout, "-m", "op_builder", "plan", "--json", **{f"DS_BUILD_{cpu.upper()}": "1"})
    assert plan.returncode == 0, plan.stdout + plan.stderr
    assert [op["name"] for op in json.loads(plan.stdout)["ops"]] == [cpu]

    # Lint-clean under the repository's own configuration (make lint runs ruff over kernels/).
    written = [
        str(family),
        str(checkout / "kernels" / gpu),
        *(str(p) for p in (checkout / "tests").rglob("*.py")),
    ]
    for command in (["check", *written], ["format", "--check", *written]):
        done = subprocess.run(
            [sys.executable, "-m", "ruff", *command],
            cwd=checkout,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert done.returncode == 0, done.stdout + done.stderr


# ------------------------------------------------------------------ in this process


@pytest.fixture
def tree(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A checkout whose family package has a name of its own (a process imports ``kernels`` once),
    on sys.path and handed to new-op as the folder our families are in."""
    checkout = tmp_path / "checkout"
    kernels = checkout / unique("tree_kernels")
    kernels.mkdir(parents=True)
    (checkout / "pyproject.toml").write_text("")
    (kernels / "__init__.py").write_text("")
    for helper in ("_build_common.py", "_lazy.py", "_op_load.py"):
        shutil.copy2(REPO / "kernels" / helper, kernels / helper)
    monkeypatch.syspath_prepend(str(checkout))
    monkeypatch.setattr(new_op, "kernels_folder", lambda: kernels)
    monkeypatch.setattr(new_op, "our_families", lambda: families_in(kernels.name))
    return kernels


def _files(root: Path) -> list[str]:
    return sorted(p.relative_to(root).as_posix() for p in root.rglob("*") if p.is_file())


def test_the_registry_finds_the_family_as_written(tree: Path) -> None:
    op = unique("tree_op")
    result = invoke(["new-op", op, "--in-tree"])
    assert result.exit_code == 0, result.output
    assert f"wrote the op family {tree.name}.{op} (CPU op {op}) in {tree / op}:" in result.stdout
    test_file = tree.parent / "tests" / "kernels" / f"test_{op}.py"
    assert f"and its test: {test_file}" in result.stdout
    assert _files(tree / op) == sorted([*FAMILY_FILES, f"csrc/{op}.cpp"]) and test_file.is_file()
    (family,) = families_in(tree.name)
    (builder,) = family.builders
    assert family.package == f"{tree.name}.{op}" and family.rank == 10  # the first ranked family
    assert builder.name == op and builder.target == "cpu"
    assert builder.selftest == f"{tree.name}.{op}.selftest:run"
    assert builder.all_runtime_packages() == ("libgomp1",)
    assert builder.stable_abi == "2.10"  # its binding is written against op_abi.h
    assert all(Path(p).is_file() for p in builder.source_paths())
    assert f"from {tree.name}.{op}.front import {op}" in test_file.read_text()


def test_a_cuda_family_in_a_folder_of_another_name(tree: Path) -> None:
    op = unique("tree_gpu")
    doc = json.loads(
        invoke(["new-op", op, "--in-tree", "--cuda", "-o", str(tree / "norms"), "--json"]).stdout
    )
    assert doc["package"] == f"{tree.name}.norms" and doc["target"] == "gpu"
    assert doc["files"] == sorted(
        [*FAMILY_FILES, f"csrc/{op}.cu", f"csrc/{op}_binding.cpp", f"includes/{op}.h"]
    )
    (family,) = families_in(tree.name)
    builder = family.builders[0]
    assert builder.target == "gpu" and builder.selftest == f"{tree.name}.norms.selftest:run"
    # The family's own includes/ first, then the headers our families share (op_abi.h: stable ABI).
    assert builder.include_dirs == ("includes", "../includes")
    assert builder.stable_abi == "2.10"


def test_refusals_write_nothing(tree: Path) -> None:
    checkout = tree.parent
    before = _files(checkout)
    op = unique("tree_refused")
    cases = [
        (["-o", str(checkout / "elsewhere")], f"is not a folder of {tree}"),
        (["-o", str(tree / "my-ops")], "cannot be a Python package's name"),
        (["-o", str(tree / "_lazy")], f"{tree.name}._lazy is a module already"),
        (["-o", str(tree / "_lazy.py")], "exists and is not a folder"),
    ]
    for extra, fragment in cases:
        assert_reported(invoke(["new-op", op, "--in-tree", *extra]), 2, fragment)
    assert_reported(invoke(["new-op", "cpu_adam", "--in-tree"]), 2, "exists already (from op_builder)")
    assert_json_error(invoke(["new-op", "cpu_adam", "--in-tree", "--json"]), 2, "exists already")
    assert _files(checkout) == before


def test_a_test_file_in_the_way_stops_it(tree: Path) -> None:
    op = unique("tree_taken")
    test_file = tree.parent / "tests" / "kernels" / f"test_{op}.py"
    test_file.parent.mkdir(parents=True)
    test_file.write_text("keep me\n")
    assert_reported(invoke(["new-op", op, "--in-tree"]), 2, f"{test_file} exists")
    assert test_file.read_text() == "keep me\n" and not (tree / op).exists()


def test_outside_a_source_checkout_it_refuses(tree: Path) -> None:
    (tree.parent / "pyproject.toml").unlink()  # as kernels/ installed in site-packages
    op = unique("tree_installed")
    assert_reported(invoke(["new-op", op, "--in-tree"]), 2, "is not in a source checkout")
    assert not (tree / op).exists() and not (tree.parent / "tests").exists()


def test_a_failed_write_removes_the_test_file_too(tree: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def full_disk(src: object, dst: object) -> None:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(new_op.os, "replace", full_disk)
    op = unique("tree_nospace")
    assert_reported(invoke(["new-op", op, "--in-tree"]), 2, "nothing was written")
    assert _files(tree.parent / "tests") == []  # written first, removed again
    assert sorted(p.name for p in tree.iterdir()) == [
        "__init__.py",
        "_build_common.py",
        "_lazy.py",
        "_op_load.py",
    ]
