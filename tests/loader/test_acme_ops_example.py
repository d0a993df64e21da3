"""The example op package, examples/acme_ops: both ops register as stable-ABI ops, the CPU op
compiles just in time and passes its self-test, its one source builds both ways (the stable module
and the ATen + pybind11 one an older torch gets) and both compute torch's own RMSNorm, the front's
fallback matches it too, and the CUDA op's device code and binding (both ABIs) compile with nvcc
(skipped without nvcc)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import warnings
from collections.abc import Iterator
from importlib.metadata import version
from pathlib import Path
from types import ModuleType

import pytest
import torch
import torch.nn.functional as F

from op_builder import SHARED_INCLUDE_DIR
from op_builder.cross import native_platform
from op_builder.registry import registry_for
from op_builder.stable_abi import stable_target
from tests.loader.both_abis import both_ways

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "examples" / "acme_ops"
HAS_NVCC = shutil.which("nvcc") is not None or Path("/usr/local/cuda/bin/nvcc").exists()
# Whether this torch builds stable-ABI modules (2.10 or newer, linux/amd64), for CPU and CUDA.
STABLE_HERE = stable_target("2.10", version("torch"), "cpu", native_platform()) is not None
STABLE_CUDA_HERE = stable_target("2.10", version("torch"), "cuda", native_platform()) is not None


def _env(cache: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DS_", "PYTHONPATH"))}
    env.update(TORCH_EXTENSIONS_DIR=str(cache), PYTHONPATH=str(REPO))
    return env


@pytest.fixture
def front(monkeypatch: pytest.MonkeyPatch) -> Iterator[ModuleType]:
    monkeypatch.syspath_prepend(str(EXAMPLE.parent))
    from acme_ops import rmsnorm

    monkeypatch.setattr(rmsnorm, "_warned", set())  # each test sees the first warning of a reason
    yield rmsnorm


def test_both_ops_register_with_their_targets_and_selftests() -> None:
    registry = registry_for([EXAMPLE])
    cpu, gpu = registry.ops["acme_rmsnorm"], registry.ops["acme_rmsnorm_cuda"]
    assert (cpu.target, gpu.target) == ("cpu", "gpu")
    assert cpu.selftest == "acme_ops.selftest:run_cpu" and gpu.selftest == "acme_ops.selftest:run_cuda"
    assert cpu.all_runtime_packages() == ("libgomp1",)
    assert registry.origins["acme_rmsnorm"].root == EXAMPLE
    # Bindings written against op_abi.h, from the headers op_builder ships: stable-ABI ops.
    for builder in (cpu, gpu):
        assert builder.stable_abi == "2.10"
        assert builder.include_paths() == (str(EXAMPLE / "includes"), SHARED_INCLUDE_DIR)


def test_installed_as_a_distribution_its_entry_point_registers_the_ops(tmp_path: Path) -> None:
    site = tmp_path / "site"
    source = shutil.copytree(EXAMPLE.parent, tmp_path / "src")  # the build writes beside its sources
    pip = [sys.executable, "-m", "pip", "install", "-q", "--no-build-isolation", "--no-deps", "--no-index"]
    done = subprocess.run(
        [*pip, "--target", str(site), str(source)], capture_output=True, text=True, timeout=600, check=False
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    env = {**_env(tmp_path / "cache"), "PYTHONPATH": os.pathsep.join([str(REPO), str(site)])}
    report = subprocess.run(
        [sys.executable, "-m", "op_builder", "report", "--json"],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert report.returncode == 0, report.stderr[-3000:]
    origins = {op["name"]: op["origin"] for op in json.loads(report.stdout)["ops"]}
    for name in ("acme_rmsnorm", "acme_rmsnorm_cuda"):
        assert origins[name]["kind"] == "entry point" and origins[name]["package"] == "acme_ops"
        assert origins[name]["root"] == str(site / "acme_ops")
    assert (site / "acme_ops" / "csrc" / "rmsnorm_cuda.cu").is_file()  # the sources ship


def test_cpu_op_compiles_and_passes_its_selftest(tmp_path: Path) -> None:
    command = [sys.executable, "-m", "op_builder", "selftest", "acme_rmsnorm", "--op-source", str(EXAMPLE)]
    done = subprocess.run(
        [*command, "--json"], env=_env(tmp_path), capture_output=True, text=True, timeout=600, check=False
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    (result,) = json.loads(done.stdout)["ops"]
    assert result["name"] == "acme_rmsnorm" and result["ok"] is True
    assert result["max_abs_err"] <= result["tolerance"]


# acme_rmsnorm built both ways from its one source in one process: as its builder declares it
# (stable here), and as a module for this torch alone (stable_abi None: ATen + pybind11, what a
# torch older than 2.10 builds), under a name of its own (a process keeps one module per op name).
BOTH_WAYS = """
import json, sys, torch
import torch.nn.functional as F
from acme_ops.builders import RMSNormBuilder

class PerTorch(RMSNormBuilder):
    name = "acme_rmsnorm_per_torch"
    source_root = RMSNormBuilder().source_dir()
    stable_abi = None

torch.manual_seed(0)
result = {}
for label, builder in (("declared", RMSNormBuilder()), ("per_torch", PerTorch())):
    module = builder.load()
    errors = {}
    for dtype in (torch.float32, torch.float64, torch.float16, torch.bfloat16):
        x = (torch.randn(37, 4097, dtype=torch.float64) * 3 + 0.5).to(dtype)
        weight = torch.randn(4097, dtype=torch.float64).to(dtype)
        math = torch.float64 if dtype == torch.float64 else torch.float32
        y = module.rms_norm(x, weight, 1e-6)
        expected = F.rms_norm(x.to(math), (4097,), weight.to(math), 1e-6)
        ulp = torch.finfo(dtype).eps * expected.abs().max().item()
        errors[str(dtype)] = [y.dtype == dtype, (y.to(math) - expected).abs().max().item() / ulp]
    try:
        module.rms_norm(torch.zeros(2, 3), torch.ones(4), 1e-6)
        refused = None
    except Exception as exc:
        refused = [type(exc).__name__, str(exc)]
    stable = isinstance(getattr(module, "op_namespace", None), str)
    result[label] = {"stable": stable, "file": module.__file__, "errors": errors, "refused": refused}
print(json.dumps(result))
"""


# Slow (an ATen compile, ~40 s of CPU): the skeleton's own both-ways test
# (tests/loader/test_new_op_build.py) holds the same for the binding users start from.
@pytest.mark.slow
@pytest.mark.skipif(not STABLE_HERE, reason="this torch is older than 2.10: no stable ABI to build")
@pytest.mark.skipif(not hasattr(F, "rms_norm"), reason="torch.nn.functional.rms_norm needs torch >= 2.4")
def test_cpu_op_builds_for_both_abis_from_one_source_and_matches_torch(tmp_path: Path) -> None:
    env = {**_env(tmp_path), "PYTHONPATH": os.pathsep.join([str(REPO), str(EXAMPLE.parent)])}
    done = subprocess.run(
        [sys.executable, "-c", BOTH_WAYS], env=env, capture_output=True, text=True, timeout=600, check=False
    )
    result = both_ways(done)
    for build in result.values():
        for dtype, (same_dtype, ulps) in build["errors"].items():
            # In ulps of the largest output. fp32 / fp64: the sum of 4097 squares in another order
            # (seen: up to 4.4); fp16 / bf16: the fp32 result rounded once (half an ulp). A wrong
            # formula, dtype or row is off by a large part of the output, millions of ulps.
            wide = dtype in ("torch.float32", "torch.float64")
            assert same_dtype and ulps <= (16 if wide else 1), (dtype, ulps)
        # A direct call with a bad weight: the binding's check, a RuntimeError in either ABI (the
        # front raises the ValueError it promises before calling).
        assert (
            build["refused"][0] == "RuntimeError"
            and "weight must be contiguous of shape [3]" in build["refused"][1]
        )


@pytest.mark.skipif(not hasattr(F, "rms_norm"), reason="torch.nn.functional.rms_norm needs torch >= 2.4")
@pytest.mark.parametrize(
    ("dtype", "shape", "atol"),
    [
        (torch.float32, (37, 127), 1e-5),
        (torch.float64, (3, 5, 4097), 1e-12),
        (torch.bfloat16, (37, 7), 3e-2),  # fp32 math, rounded once to bf16 (~2.3 digits)
    ],
)
def test_fallback_matches_torch_rms_norm(
    front: ModuleType, dtype: torch.dtype, shape: tuple[int, ...], atol: float
) -> None:
    x = (torch.randn(shape, dtype=torch.float64) * 3 + 0.5).to(dtype)
    weight = torch.randn(shape[-1], dtype=torch.float64).to(dtype)
    y = front.rms_norm(x, weight, 1e-6, use_kernel=False)
    math = torch.float64 if dtype == torch.float64 else torch.float32
    expected = F.rms_norm(x.to(math), (shape[-1],), weight.to(math), 1e-6).to(dtype)
    assert y.dtype == dtype and y.shape == x.shape
    torch.testing.assert_close(y, expected, atol=atol, rtol=atol)


@pytest.mark.skipif(not hasattr(F, "rms_norm"), reason="torch.nn.functional.rms_norm needs torch >= 2.4")
def test_autograd_takes_the_fallback_once_warned_with_torchs_gradients(front: ModuleType) -> None:
    x = torch.randn(4, 9, dtype=torch.float64, requires_grad=True)
    weight = torch.randn(9, dtype=torch.float64, requires_grad=True)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        front.rms_norm(x, weight)  # the kernels are forward-only: the fallback, with one warning
        y = front.rms_norm(x, weight)
    ours = [w for w in caught if str(w.message).startswith("acme_ops.rms_norm:")]
    assert len(ours) == 1 and "forward-only" in str(ours[0].message)  # once per reason
    assert ours[0].filename == __file__  # pointing at the caller, not the front
    ref_x, ref_w = x.detach().clone().requires_grad_(True), weight.detach().clone().requires_grad_(True)
    expected = F.rms_norm(ref_x, (9,), ref_w, 1e-6)
    dy = torch.randn(4, 9, dtype=torch.float64)
    grads = torch.autograd.grad(y, (x, weight), dy)
    ref_grads = torch.autograd.grad(expected, (ref_x, ref_w), dy)
    for got, want in zip(grads, ref_grads):
        torch.testing.assert_close(got, want)


def test_front_refuses_a_weight_of_the_wrong_shape(front: ModuleType) -> None:
    with pytest.raises(ValueError, match="last dimension"):
        front.rms_norm(torch.zeros(2, 3), torch.ones(4))


@pytest.mark.skipif(not HAS_NVCC, reason="no CUDA toolkit (nvcc) on this machine")
@pytest.mark.parametrize(
    ("archs", "extra"),
    [
        # bf16 kernels (BF16_AVAILABLE), and the torch binding as a stable module
        ("8.0;9.0", ("--bindings", "stable")),
        # and as the ATen + pybind11 build too (~60 s more: torch's whole C++ API); our own GPU
        # bindings are built both ways in the default tier (tests/aot/test_device_code_checks.py)
        pytest.param("8.0;9.0", ("--bindings",), marks=pytest.mark.slow),
        ("7.5", ()),  # an arch below sm_80: the build without bf16 kernels
    ],
)
def test_cuda_op_compiles_for_the_builders_flags(tmp_path: Path, archs: str, extra: tuple[str, ...]) -> None:
    command = [
        sys.executable,
        str(REPO / "scripts" / "cuda_check.py"),
        *("--op-source", str(EXAMPLE), "--ops", "acme_rmsnorm_cuda", "--archs", archs, "--json", *extra),
    ]
    done = subprocess.run(
        command, env=_env(tmp_path), capture_output=True, text=True, timeout=600, check=False
    )
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
    report = json.loads(done.stdout)
    compiled = {(Path(r["source"]).name, r["variant"]) for r in report["results"] if r["ok"]}
    # The binding from one source: the stable module (its symbols held to torch 2.10's C shim and
    # CPython's limited API) and the ATen + pybind11 build that older torch and ROCm get.
    variants = {"stable ABI 2.10", "ATen + pybind11"} if STABLE_CUDA_HERE else {""}
    if "stable" in extra:
        variants = {"stable ABI 2.10"} if STABLE_CUDA_HERE else set()
    bindings = {("rmsnorm_cuda_binding.cpp", variant) for variant in variants} if extra else set()
    assert report["ok"] is True and compiled == {("rmsnorm_cuda.cu", ""), *bindings}
