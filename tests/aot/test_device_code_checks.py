"""`make cuda-check` and `make hip-check` as tests: every GPU op's .cu source compiles with
the local nvcc (for 9.0), using the flags the op builder gives it, and every binding of the GPU
ops built against torch's stable ABI builds as a stable module that keeps to it; one op's source,
hipified, compiles with Debian's ROCm hipcc (gfx90a and gfx1030), one .cu compiles for an arm64
host, and one stable binding builds as the ATen + pybind11 binding too. Each is skipped, with the
reason, without its compiler.

The exhaustive variants (every .cu for 8.0 and 9.0, every source hipified, every .cu for an arm64
host, every binding built both ways: about 5 minutes of a 2-core CI run together) are the slow
tier's (SLOW=1; `make cuda-check`, `make hip-check`, `make cuda-check HOST=aarch64`);
docs/testing.md records their last result."""

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
from tests._script_module import load_script

REPO = Path(__file__).resolve().parents[2]
HAS_NVCC = shutil.which("nvcc") is not None or Path("/usr/local/cuda/bin/nvcc").exists()
HAS_HIPCC = shutil.which("hipcc") is not None
# The op the default tier's representative checks compile: one .cu (the shared multi-tensor and
# portability headers, gpu_multi_tensor.h and gpu_compat.h, included) and one binding, the
# cheapest of our GPU ops to build; the slow tier builds every op.
REPRESENTATIVE = "fused_lion"


def _cu_sources(ops: list[str] | None = None) -> set[str]:
    """The .cu sources of ``ops`` (default: every GPU op of ours), relative to the checkout."""
    return {
        str(Path(src).relative_to(REPO))
        for name, builder in ALL_OPS.items()
        if builder.target == "gpu" and (ops is None or name in ops)
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


# The GPU ops whose bindings are written once for both ABIs (kernels/includes/op_abi.h).
STABLE_GPU_OPS = sorted(name for name, b in ALL_OPS.items() if b.target == "gpu" and b.stable_abi is not None)
HAS_STABLE_TORCH = stable_target("2.10", version("torch"), "cuda") is not None
NEEDS_NVCC = pytest.mark.skipif(
    not HAS_NVCC, reason="no CUDA toolkit (nvcc) on this machine: cuda-check needs one"
)
NEEDS_STABLE_TORCH = pytest.mark.skipif(
    not HAS_STABLE_TORCH, reason="this torch is older than 2.10: it has no stable ABI to build"
)


@pytest.fixture(scope="module")
def cuda_check_run() -> tuple[int, dict[str, Any], str]:
    """One `cuda_check.py` run that two tests read: every .cu for 9.0 and, where this torch has a
    stable ABI, every stable binding built as its stable module (`--bindings stable`), so the
    device code compiles once per run, not again for the bindings' test. (exit status, report,
    output); each test judges its own results, so one part failing fails only its test. One arch:
    our kernels branch on none, and every arch more is another device compile of every source;
    the slow tier compiles them for 8.0 too (`make cuda-check`'s list), and
    tests/aot/test_gencode_real_build.py builds two ops for 7.5 and 8.0."""
    args = ["--archs", "9.0", *(["--bindings", "stable"] if HAS_STABLE_TORCH else [])]
    done = subprocess.run(
        [sys.executable, str(REPO / "scripts" / "cuda_check.py"), "--json", *args],
        capture_output=True,
        text=True,
        timeout=1200,
    )
    return done.returncode, json.loads(done.stdout), done.stdout[-4000:] + done.stderr[-4000:]


def _failed(results: list[dict[str, Any]]) -> list[str]:
    return [f"{r['source']} ({r['variant']}):\n{r['output']}" for r in results if not r["ok"]]


@NEEDS_NVCC
def test_every_cuda_source_compiles_for_the_builders_flags(
    cuda_check_run: tuple[int, dict[str, Any], str],
) -> None:
    status, report, output = cuda_check_run
    assert status in (0, 1), output  # 1: something failed, which the results name
    device = [r for r in report["results"] if r["source"].endswith(".cu")]
    assert not _failed(device), _failed(device)
    assert {_source(r) for r in device if r["ok"]} == _cu_sources()


@pytest.mark.slow
@NEEDS_NVCC
def test_every_cuda_source_compiles_for_two_archs() -> None:
    """The slow tier's: every .cu for 8.0 and 9.0, `make cuda-check`'s default list (the CUDA
    headers' bf16 and fp8 code differ by arch); the default tier compiles for 9.0."""
    assert _run_check("cuda_check.py", "--archs", "8.0;9.0") == _cu_sources()


@pytest.mark.slow
@pytest.mark.skipif(
    not HAS_HIPCC, reason="no hipcc: `scripts/system-deps.sh --rocm` installs Debian's ROCm 5.2"
)
def test_every_cuda_source_hipifies_and_compiles_for_amd_targets() -> None:
    """The slow tier's (78 s of a 2-core run): the default tier hipifies the tree and compiles
    the representative op's source for both targets, through the same script."""
    compiled = _run_check("hip_check.py", "--archs", "gfx90a;gfx1030", HIP_PLATFORM="amd")
    assert compiled == _cu_sources()


@pytest.mark.skipif(
    not HAS_HIPCC, reason="no hipcc: `scripts/system-deps.sh --rocm` installs Debian's ROCm 5.2"
)
def test_a_cuda_source_hipifies_and_compiles_for_amd_targets(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """`make hip-check` on one op: the script's own run (the whole tree hipified, as a ROCm
    build hipifies it) with its list of our GPU ops cut to the representative one."""
    hip_check = load_script(REPO / "scripts" / "hip_check.py", "hip_check")
    monkeypatch.setattr(hip_check, "our_gpu_ops", lambda: [REPRESENTATIVE])
    monkeypatch.setenv("HIP_PLATFORM", "amd")
    status = hip_check.main(["--json", "--archs", "gfx90a;gfx1030"])
    out = capsys.readouterr().out
    report = json.loads(out)
    assert status == 0 and report["ok"] is True and report["hipified"] is True, out[-4000:]
    assert sorted(report["archs"]) == ["gfx1030", "gfx90a"]
    assert {_source(r) for r in report["results"] if r["ok"]} == _cu_sources([REPRESENTATIVE])


HAS_AARCH64_GXX = shutil.which("aarch64-linux-gnu-g++") is not None


@pytest.mark.slow
@pytest.mark.skipif(not (HAS_NVCC and HAS_AARCH64_GXX), reason="needs nvcc and aarch64-linux-gnu-g++")
def test_every_cuda_source_compiles_for_an_arm64_host() -> None:
    """Grace hosts: the .cu files' host side compiles with the aarch64 compiler too. The slow
    tier's (51 s of a 2-core run): the default tier compiles the representative op's source for
    an arm64 host, and holds the check to catching x86-only host code."""
    assert _run_check("cuda_check.py", "--archs", "9.0", "--host", "aarch64") == _cu_sources()


@pytest.mark.skipif(not (HAS_NVCC and HAS_AARCH64_GXX), reason="needs nvcc and aarch64-linux-gnu-g++")
def test_a_cuda_source_compiles_for_an_arm64_host() -> None:
    args = ["--archs", "9.0", "--host", "aarch64", "--ops", REPRESENTATIVE]
    assert _run_check("cuda_check.py", *args) == _cu_sources([REPRESENTATIVE])


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


def _bindings(ops: list[str]) -> set[str]:
    return {
        str(Path(src).relative_to(REPO))
        for op in ops
        for src in ALL_OPS[op].source_paths()
        if src.endswith(".cpp")
    }


PORTED = {"fused_adam", "fused_lamb", "fused_lion", "fp_quantizer", "quantizer", "transformer"}
BOTH_ABIS = ("stable ABI 2.10", "ATen + pybind11")


@NEEDS_NVCC
@NEEDS_STABLE_TORCH
def test_stable_gpu_bindings_build_as_stable_modules(cuda_check_run: tuple[int, dict[str, Any], str]) -> None:
    """Each binding of a stable GPU op builds as the stable module: its symbols within torch
    2.10's C shim and CPython's limited API."""
    assert set(STABLE_GPU_OPS) >= PORTED
    status, report, output = cuda_check_run
    assert status in (0, 1), output
    bindings = [r for r in report["results"] if r["source"].endswith(".cpp")]
    assert not _failed(bindings), _failed(bindings)
    built = {(_source(r), r["variant"]) for r in bindings if r["ok"]}
    assert built == {(src, "stable ABI 2.10") for src in _bindings(STABLE_GPU_OPS)}


@NEEDS_NVCC
@NEEDS_STABLE_TORCH
def test_a_stable_gpu_binding_builds_as_a_stable_module_and_as_a_pybind11_one() -> None:
    """op_abi.h's two sides on one op's binding: the stable module, and the ATen + pybind11
    binding that ROCm and older torch get (torch's full C++ headers: ~25 s a binding here)."""
    assert REPRESENTATIVE in STABLE_GPU_OPS
    report = _report("cuda_check.py", "--archs", "9.0", "--bindings", "--ops", REPRESENTATIVE)
    built = {(_source(r), r["variant"]) for r in report["results"] if r["source"].endswith(".cpp")}
    assert built == {(src, variant) for src in _bindings([REPRESENTATIVE]) for variant in BOTH_ABIS}


@pytest.mark.slow
@NEEDS_NVCC
@NEEDS_STABLE_TORCH
def test_stable_gpu_bindings_build_as_stable_modules_and_as_pybind11_ones() -> None:
    """Each binding of a stable GPU op builds as the stable module (its symbols within torch
    2.10's C shim and CPython's limited API) and as the ATen + pybind11 binding that ROCm and
    older torch get. The slow tier's (107 s of a 2-core run, the pybind11 builds most of it): the
    default tier builds every stable module and one op's binding both ways."""
    assert set(STABLE_GPU_OPS) >= PORTED
    report = _report("cuda_check.py", "--archs", "9.0", "--bindings", "--ops", ",".join(STABLE_GPU_OPS))
    built = {(_source(r), r["variant"]) for r in report["results"] if r["source"].endswith(".cpp")}
    expected = {(src, variant) for src in _bindings(STABLE_GPU_OPS) for variant in BOTH_ABIS}
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


@NEEDS_NVCC
@NEEDS_STABLE_TORCH
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
