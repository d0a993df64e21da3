"""`make cuda-check` and `make hip-check` as tests: every GPU op's .cu source compiles with
the local nvcc (8.0 and 9.0) and, hipified, with Debian's ROCm hipcc (gfx90a and gfx1030),
using the flags the op builder gives it. Each is skipped, with the reason, without its compiler."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from op_builder import ALL_OPS

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


def _run_check(script: str, *args: str, **env: str) -> set[str]:
    done = subprocess.run(
        [sys.executable, str(REPO / "scripts" / script), "--json", *args],
        capture_output=True,
        text=True,
        timeout=1200,
        env={**os.environ, **env},
    )
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:]
    report = json.loads(done.stdout)
    assert report["ok"] is True
    return {
        str(Path(r["source"]).relative_to(REPO)) if Path(r["source"]).is_relative_to(REPO) else r["source"]
        for r in report["results"]
        if r["ok"]
    }


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
