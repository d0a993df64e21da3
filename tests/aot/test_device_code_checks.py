"""`make cuda-check` and `make hip-check` as tests: every GPU op's .cu source compiles with
the local nvcc (8.0 and 9.0) and, hipified, with Debian's ROCm hipcc (gfx90a and gfx1030),
using the flags the op builder gives it; the bindings of the GPU ops built against torch's stable
ABI build as stable modules that keep to it, and as ATen + pybind11 bindings too. Each is skipped,
with the reason, without its compiler."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from importlib.metadata import version
from pathlib import Path
from typing import Any

import pytest

from op_builder import ALL_OPS
from op_builder.stable_abi import stable_target

REPO = Path(__file__).resolve().parents[2]
HAS_NVCC = shutil.which("nvcc") is not None or Path("/usr/local/cuda/bin/nvcc").exists()
HAS_HIPCC = shutil.which("hipcc") is not None


def _cu_sources() -> set[str]:
    return {
        str(Path(src).relative_to(REPO))
        for builder in ALL_OPS.values()
        if builder.target == "gpu"
        for src in builder.source_paths()
        if src.endswith(".cu")
    }


def _report(script: str, *args: str, status: int = 0, **env: str) -> dict[str, Any]:
    done = subprocess.run(
        [sys.executable, str(REPO / "scripts" / script), "--json", *args],
        capture_output=True,
        text=True,
        timeout=1200,
        env={**os.environ, **env},
    )
    assert done.returncode == status, done.stdout[-4000:] + done.stderr[-4000:]
    report: dict[str, Any] = json.loads(done.stdout)
    assert report["ok"] is (status == 0)
    return report


def _source(result: dict[str, Any]) -> str:
    path = Path(result["source"])
    return str(path.relative_to(REPO)) if path.is_relative_to(REPO) else result["source"]


def _run_check(script: str, *args: str, **env: str) -> set[str]:
    return {_source(r) for r in _report(script, *args, **env)["results"] if r["ok"]}


@pytest.mark.skipif(not HAS_NVCC, reason="no CUDA toolkit (nvcc) on this machine: cuda-check needs one")
def test_every_cuda_source_compiles_for_the_builders_flags() -> None:
    assert _run_check("cuda_check.py", "--archs", "8.0;9.0") == _cu_sources()


@pytest.mark.skipif(
    not HAS_HIPCC, reason="no hipcc: `scripts/system-deps.sh --rocm` installs Debian's ROCm 5.2"
)
def test_every_cuda_source_hipifies_and_compiles_for_amd_targets() -> None:
    compiled = _run_check("hip_check.py", "--archs", "gfx90a;gfx1030", HIP_PLATFORM="amd")
    assert compiled == _cu_sources()


HAS_AARCH64_GXX = shutil.which("aarch64-linux-gnu-g++") is not None


@pytest.mark.skipif(not (HAS_NVCC and HAS_AARCH64_GXX), reason="needs nvcc and aarch64-linux-gnu-g++")
def test_every_cuda_source_compiles_for_an_arm64_host() -> None:
    """Grace hosts: the .cu files' host side compiles with the aarch64 compiler too."""
    assert _run_check("cuda_check.py", "--archs", "9.0", "--host", "aarch64") == _cu_sources()


X86_ONLY_CU = """\
#include <cuda_runtime.h>
#include <immintrin.h>  // x86 only: what an arm64 host build must catch

__global__ void twice(float* x) { x[threadIdx.x] *= 2.0f; }

void launch(float* x) {
  _mm_pause();
  twice<<<1, 32>>>(x);
}
"""


@pytest.mark.skipif(not (HAS_NVCC and HAS_AARCH64_GXX), reason="needs nvcc and aarch64-linux-gnu-g++")
def test_the_arm64_host_check_catches_x86_host_code(tmp_path: Path) -> None:
    from tests.op_package_files import builder_source, unique, write_package

    op = unique("x86_only")
    root = write_package(
        tmp_path,
        unique("pkg_x86"),
        builder_source("X86Only", op, base="CUDAOpBuilder", sources='("csrc/k.cu",)'),
    )
    (root / "csrc" / "k.cu").write_text(X86_ONLY_CU)
    args = ["--archs", "9.0", "--op-source", str(root), "--ops", op]
    assert _run_check("cuda_check.py", *args) == {str(root / "csrc" / "k.cu")}
    done = subprocess.run(
        [sys.executable, str(REPO / "scripts" / "cuda_check.py"), "--json", *args, "--host", "aarch64"],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 1, done.stdout + done.stderr
    report = json.loads(done.stdout)
    assert report["ok"] is False and report["host"] == "aarch64"
    assert "immintrin.h" in json.dumps(report["results"])


# The GPU ops whose bindings are written once for both ABIs (kernels/includes/op_abi.h).
STABLE_GPU_OPS = sorted(name for name, b in ALL_OPS.items() if b.target == "gpu" and b.stable_abi is not None)
HAS_STABLE_TORCH = stable_target("2.10", version("torch"), "cuda") is not None


def _bindings(ops: list[str]) -> set[str]:
    return {
        str(Path(src).relative_to(REPO))
        for op in ops
        for src in ALL_OPS[op].source_paths()
        if src.endswith(".cpp")
    }


@pytest.mark.skipif(not HAS_NVCC, reason="no CUDA toolkit (nvcc) on this machine: cuda-check needs one")
@pytest.mark.skipif(
    not HAS_STABLE_TORCH, reason="this torch is older than 2.10: it has no stable ABI to build"
)
def test_stable_gpu_bindings_build_as_stable_modules_and_as_pybind11_ones() -> None:
    """Each binding of a stable GPU op builds as the stable module (its symbols within torch
    2.10's C shim and CPython's limited API) and as the ATen + pybind11 binding that ROCm and
    older torch get."""
    ported = {"fused_adam", "fused_lamb", "fused_lion", "fp_quantizer", "quantizer", "transformer"}
    assert ported <= set(STABLE_GPU_OPS)
    report = _report("cuda_check.py", "--archs", "9.0", "--bindings", "--ops", ",".join(STABLE_GPU_OPS))
    built = {(_source(r), r["variant"]) for r in report["results"] if r["source"].endswith(".cpp")}
    expected = {
        (src, variant)
        for src in _bindings(STABLE_GPU_OPS)
        for variant in ("stable ABI 2.10", "ATen + pybind11")
    }
    assert built == expected


BREAKS_THE_ABI_CPP = """\
// A binding that reaches past the stable ABI: a c10 function declared by hand (torch's headers
// refuse to be included under TORCH_TARGET_VERSION, so this is how one slips in).
namespace c10 {
int not_in_the_stable_abi();
}

extern "C" int probe() {
#ifdef TAKE_TORCH_CXX
  return c10::not_in_the_stable_abi();
#else
  return 0;
#endif
}
"""


@pytest.mark.skipif(not HAS_NVCC, reason="no CUDA toolkit (nvcc) on this machine: cuda-check needs one")
@pytest.mark.skipif(
    not HAS_STABLE_TORCH, reason="this torch is older than 2.10: it has no stable ABI to build"
)
def test_the_stable_binding_check_fails_a_module_that_takes_a_torch_cxx_symbol(tmp_path: Path) -> None:
    from tests.op_package_files import builder_source, unique, write_package

    clean, breaks = unique("stable_clean"), unique("stable_breaks")
    sources = '("csrc/probe.cpp",)'
    builders = builder_source(
        "Clean", clean, base="CUDAOpBuilder", sources=sources, extra='stable_abi = "2.10"'
    )
    builders += "\n\n" + builder_source(
        "Breaks",
        breaks,
        base="CUDAOpBuilder",
        sources=sources,
        extra='stable_abi = "2.10"\ndefines = ("-DTAKE_TORCH_CXX",)',
    )
    root = write_package(tmp_path, unique("pkg_stable"), builders)
    (root / "csrc" / "probe.cpp").write_text(BREAKS_THE_ABI_CPP)
    args = ["--archs", "9.0", "--op-source", str(root), "--ops", f"{clean},{breaks}", "--bindings", "stable"]
    results = {r["op"]: r for r in _report("cuda_check.py", *args, status=1)["results"]}
    assert set(results) == {clean, breaks}
    assert results[clean]["ok"] is True and results[clean]["variant"] == "stable ABI 2.10"
    failed = results[breaks]
    assert failed["ok"] is False
    assert "breaks the stable ABI of torch 2.10" in failed["output"]
    assert "_ZN3c1021not_in_the_stable_abiEv" in failed["output"]
