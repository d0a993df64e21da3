"""`imagegen new-op` skeletons for real: the CPU one compiles just in time, passes its self-test
through ``python -m op_builder selftest`` and its own tests under pytest, as written; built with
this torch (>= 2.10) it is a stable-ABI module, ahead of time an ``.abi3.so`` in the wheel, and its
one binding source also builds as an ATen + pybind11 module (what a torch older than 2.10 gets).
The CUDA one's device code and binding (both ABIs) compile with nvcc for the builder's flags
(skipped without nvcc). An in-tree CPU family (``--in-tree``, in a copy of the checkout) does the
same as one of ours, and passes the repository's mypy --strict."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import zipfile
from importlib.metadata import version
from pathlib import Path

import pytest
from typer.testing import CliRunner

from imagegen.building.build_inputs import copy_build_inputs
from imagegen.cli import app
from op_builder.cross import native_platform
from op_builder.stable_abi import stable_target
from tests.loader.both_abis import both_ways
from tests.op_package_files import unique
from tests.unit.imagegen.commands.test_new_op_in_tree import checkout_copy

REPO = Path(__file__).resolve().parents[2]
HAS_NVCC = shutil.which("nvcc") is not None or Path("/usr/local/cuda/bin/nvcc").exists()
# Whether this torch builds the skeletons' stable-ABI modules (2.10 or newer), for CPU and CUDA.
STABLE_HERE = stable_target("2.10", version("torch"), "cpu", native_platform())
STABLE_CUDA_HERE = stable_target("2.10", version("torch"), "cuda", native_platform())
needs_stable_torch = pytest.mark.skipif(
    STABLE_HERE is None, reason="this torch is older than 2.10 (or not linux/amd64): no stable ABI to build"
)


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
    # What a build here makes of it: one module for every torch from 2.10 on.
    command = [sys.executable, "-m", "op_builder", "report", "--op-source", str(root), "--json"]
    (entry,) = [o for o in json.loads(_run(command, cache, root.parent).stdout)["ops"] if o["name"] == op]
    assert entry["abi"]["kind"] == ("stable" if STABLE_HERE else "torch")
    if STABLE_HERE:
        assert entry["abi"]["torch"] == ">=2.10"


def test_cpu_skeleton_tests_pass_under_pytest(cpu_skeleton: tuple[Path, str, Path]) -> None:
    root, _, cache = cpu_skeleton
    # From the package's own folder, as a user runs them; no cache folder left in the package.
    command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests"]
    done = _run(command, cache, root)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "4 passed" in done.stdout


# The skeleton's op built both ways from its one source in one process: as the builder declares it
# (stable here), and as a module for this torch alone (stable_abi None: ATen + pybind11, what a
# torch older than 2.10 builds), under a name of its own (a process keeps one module per op name).
BOTH_WAYS = """
import json, sys, torch
from pathlib import Path
from op_builder.registry import registry_for

builder = registry_for([Path(sys.argv[1])]).ops[sys.argv[2]]
kind = type(builder)
per_torch = type("PerTorch", (kind,), {
    "name": builder.name + "_per_torch", "source_root": builder.source_dir(), "stable_abi": None,
})()
x, y = torch.randn(4099, dtype=torch.float64), torch.randn(4099, dtype=torch.float64)
expected, eps = torch.add(x, y, alpha=-1.5), torch.finfo(torch.float64).eps
result = {}
for label, b in (("declared", builder), ("per_torch", per_torch)):
    module = b.load()
    out = module.forward(x, y, -1.5)
    try:
        module.forward(x, y[:-1], 1.0)
        refused = None
    except Exception as exc:
        refused = [type(exc).__name__, str(exc)]
    result[label] = {
        "stable": isinstance(getattr(module, "op_namespace", None), str),
        "file": module.__file__,
        "ulps": ((out - expected).abs().max() / (eps * expected.abs().max())).item(),
        "refused": refused,
    }
print(json.dumps(result))
"""


@needs_stable_torch
def test_cpu_skeleton_binding_builds_for_both_abis_from_one_source(
    cpu_skeleton: tuple[Path, str, Path],
) -> None:
    root, op, cache = cpu_skeleton
    done = _run([sys.executable, "-c", BOTH_WAYS, str(root), op], cache, root.parent)
    result = both_ways(done)
    for build in result.values():
        assert build["ulps"] <= 4  # the kernel may fuse the multiply-add, torch may round twice
        # A direct call with bad shapes: the binding's check, a RuntimeError in either ABI (the
        # front raises ValueError before it gets there).
        assert (
            build["refused"][0] == "RuntimeError"
            and f"{op}: x has shape [4099], y [4098]" in build["refused"][1]
        )


@needs_stable_torch
def test_cpu_skeleton_builds_ahead_of_time_as_one_stable_module(
    cpu_skeleton: tuple[Path, str, Path], tmp_path: Path
) -> None:
    """Into the wheel with DS_BUILD_<OP>=1: ``<op>.abi3.so``, its manifest entry stable from torch
    2.10 on, the shared headers beside it. Installed, it loads with JIT disabled and passes verify
    (self-test and stable-ABI symbol check); a new skeleton compiles just in time against the
    installed wheel's headers, as it would from an image's or a user's installed imagegen."""
    root, op, _ = cpu_skeleton
    src = copy_build_inputs(REPO, tmp_path / "src")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DS_", "PYTHONPATH"))}
    build = {"DS_BUILD_OPS": "0", "DS_OP_SOURCES": str(root), f"DS_BUILD_{op.upper()}": "1", "MAX_JOBS": "2"}
    pip = [sys.executable, "-m", "pip"]
    done = subprocess.run(
        [*pip, "wheel", "--no-build-isolation", "--no-deps", "-w", str(tmp_path), "."],
        cwd=src,
        env={**env, **build},
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    (wheel_path,) = tmp_path.glob("imagegen-*.whl")
    with zipfile.ZipFile(wheel_path) as wheel:
        names = wheel.namelist()
        data = json.loads(wheel.read("kernels/_ops/manifest.json"))
    assert sorted(n for n in names if n.endswith(".so")) == [f"kernels/_ops/{op}.abi3.so"]
    assert data["ops"][op]["stable_abi"] == "2.10"
    assert {f"kernels/includes/{h}" for h in ("op_abi.h", "op_tensors.h", "shape_text.h")} <= set(names)

    site = tmp_path / "site"
    done = subprocess.run(
        [*pip, "install", "-q", "--no-deps", "--no-index", "--target", str(site), str(wheel_path)],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    installed = {**env, "PYTHONPATH": str(site), "TORCH_EXTENSIONS_DIR": str(tmp_path / "jit")}
    verify = [sys.executable, "-m", "op_builder", "verify", op, "--op-source", str(root), "--json"]
    done = subprocess.run(
        verify, cwd=tmp_path, env={**installed, "DS_DISABLE_JIT": "1"}, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    (result,) = json.loads(done.stdout)["ops"]
    assert (result["source"], result["ok"], result["selftest"]["ok"]) == ("aot", True, True)

    later = unique("built_later")
    fresh = _new_op(tmp_path / f"{later}_ops", later)
    flags = [sys.executable, "-m", "op_builder", "flags", later, "--op-source", str(fresh), "--json"]
    done = subprocess.run(flags, cwd=tmp_path, env=installed, capture_output=True, text=True)
    assert json.loads(done.stdout)["include_dirs"] == [str(site / "kernels" / "includes")], done.stderr
    selftest = [sys.executable, "-m", "op_builder", "selftest", later, "--op-source", str(fresh), "--json"]
    done = subprocess.run(selftest, cwd=tmp_path, env=installed, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "compiling" in done.stderr and json.loads(done.stdout)["ok"] is True


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
    compiled = {(Path(r["source"]).name, r["variant"]) for r in report["results"] if r["ok"]}
    # The binding from one source: the stable module (its symbols held to torch 2.10's C shim and
    # CPython's limited API) and the ATen + pybind11 build that older torch and ROCm get.
    bindings = {"stable ABI 2.10", "ATen + pybind11"} if STABLE_CUDA_HERE else {""}
    expected = {(f"{op}.cu", ""), *((f"{op}_binding.cpp", variant) for variant in bindings)}
    assert report["ok"] is True and compiled == expected


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
