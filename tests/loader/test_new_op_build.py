"""`imagegen new-op` skeletons for real: the CPU one compiles just in time, passes its self-test
through ``python -m op_builder selftest`` and its own tests under pytest, as written; the CUDA
one's device code and binding compile with nvcc for the builder's flags (skipped without nvcc).
An in-tree CPU family (``--in-tree``, in a copy of the checkout) does the same as one of ours, and
passes the repository's mypy --strict."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from imagegen.cli import app
from tests.op_package_files import unique
from tests.unit.imagegen.commands.test_new_op_in_tree import checkout_copy

REPO = Path(__file__).resolve().parents[2]
HAS_NVCC = shutil.which("nvcc") is not None or Path("/usr/local/cuda/bin/nvcc").exists()


def _env(cache: Path, root: Path = REPO) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DS_", "PYTHONPATH"))}
    env.update(TORCH_EXTENSIONS_DIR=str(cache), PYTHONPATH=str(root))
    return env


def _new_op(root: Path, op: str, *extra: str) -> Path:
    result = CliRunner().invoke(app, ["new-op", op, "-o", str(root), *extra])
    assert result.exit_code == 0, result.output
    return root


def _run(command: list[str], cache: Path, cwd: Path, root: Path = REPO) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        command, cwd=cwd, env=_env(cache, root), capture_output=True, text=True, timeout=600
    )


@pytest.fixture(scope="module")
def cpu_skeleton(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str, Path]:
    """A fresh CPU skeleton, and the JIT cache its tests share (the op compiles once)."""
    base = tmp_path_factory.mktemp("new_op")
    op = unique("built_cpu")
    return _new_op(base / f"{op}_ops", op), op, base / "cache"


def test_cpu_skeleton_passes_its_selftest(cpu_skeleton: tuple[Path, str, Path]) -> None:
    root, op, cache = cpu_skeleton
    command = [sys.executable, "-m", "op_builder", "selftest", op, "--op-source", str(root), "--json"]
    done = _run(command, cache, root.parent)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    report = json.loads(done.stdout)
    assert report["ok"] is True
    (result,) = report["ops"]
    assert result["name"] == op and result["ok"] is True and result["error"] is None
    assert result["max_abs_err"] <= result["tolerance"]


def test_cpu_skeleton_tests_pass_under_pytest(cpu_skeleton: tuple[Path, str, Path]) -> None:
    root, _, cache = cpu_skeleton
    # From the package's own folder, as a user runs them; no cache folder left in the package.
    command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests"]
    done = _run(command, cache, root)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "4 passed" in done.stdout


@pytest.mark.skipif(not HAS_NVCC, reason="no CUDA toolkit (nvcc) on this machine")
def test_cuda_skeleton_compiles_for_the_builders_flags(tmp_path: Path) -> None:
    op = unique("built_gpu")
    root = _new_op(tmp_path / f"{op}_ops", op, "--cuda")
    command = [
        sys.executable,
        str(REPO / "scripts" / "cuda_check.py"),
        *("--op-source", str(root), "--ops", op, "--bindings", "--json"),
    ]
    done = _run(command, tmp_path / "cache", REPO)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
    report = json.loads(done.stdout)
    compiled = sorted(Path(r["source"]).name for r in report["results"] if r["ok"])
    assert report["ok"] is True and compiled == [f"{op}.cu", f"{op}_binding.cpp"]


@pytest.fixture(scope="module")
def in_tree(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str, Path]:
    """A copy of the checkout with a fresh CPU family of ours, and the JIT cache its tests share."""
    base = tmp_path_factory.mktemp("in_tree")
    checkout = checkout_copy(
        base / "checkout", "tests/__init__.py", "tests/conftest.py", "tests/kernels/conftest.py"
    )
    op, cache = unique("built_tree"), base / "cache"
    done = _run([sys.executable, "-m", "imagegen", "new-op", op, "--in-tree"], cache, checkout, checkout)
    assert done.returncode == 0, done.stdout + done.stderr
    return checkout, op, cache


def test_in_tree_family_passes_its_selftest(in_tree: tuple[Path, str, Path]) -> None:
    checkout, op, cache = in_tree
    done = _run([sys.executable, "-m", "op_builder", "selftest", op, "--json"], cache, checkout, checkout)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    (result,) = json.loads(done.stdout)["ops"]
    assert result["name"] == op and result["ok"] is True and result["max_abs_err"] <= result["tolerance"]


def test_in_tree_family_test_passes_under_pytest(in_tree: tuple[Path, str, Path]) -> None:
    checkout, op, cache = in_tree
    command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", f"tests/kernels/test_{op}.py"]
    done = _run(command, cache, checkout, checkout)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "4 passed" in done.stdout


def test_in_tree_family_passes_mypy_strict(in_tree: tuple[Path, str, Path]) -> None:
    """make lint runs mypy --strict over kernels/: the family must not be the file that fails it."""
    checkout, op, cache = in_tree
    done = _run([sys.executable, "-m", "mypy", f"kernels/{op}"], cache, checkout, checkout)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "Success: no issues found in 4 source files" in done.stdout
