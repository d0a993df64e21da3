"""The preflight on modules the local nvcc compiles: what a real module holds, read from its
file, decides whether a GPU runs it, and the message names the GPU, what the module holds and
the arch to rebuild with. (The devices are values: this machine has no GPU; the verdicts follow
the CUDA compatibility rules, as tests/unit/op_builder/test_preflight.py tables them.)"""

from __future__ import annotations

import shutil
import subprocess
import types
from pathlib import Path

import pytest

from op_builder import preflight
from op_builder.errors import OpLoadError
from op_builder.manifest import Manifest
from op_builder.preflight import CudaDevice, decide_module

NVCC = shutil.which("nvcc")
pytestmark = pytest.mark.skipif(NVCC is None, reason="no CUDA toolkit (nvcc) on this machine")

KERNEL = "__global__ void scale(float* x, float a) { x[threadIdx.x] *= a; }\n"
H100 = CudaDevice("NVIDIA H100", (9, 0), (13, 0))
A100 = CudaDevice("NVIDIA A100", (8, 0), (13, 0))
OLD_DRIVER_H100 = CudaDevice("NVIDIA H100", (9, 0), (12, 8))


def _module(tmp: Path, name: str, codes: list[tuple[str, str]]) -> Path:
    source = tmp / "kernel.cu"
    source.write_text(KERNEL)
    out = tmp / f"{name}.so"
    gencode = [f"-gencode=arch={arch},code={code}" for arch, code in codes]
    command = [str(NVCC), "-shared", "-Xcompiler", "-fPIC", *gencode, str(source), "-o", str(out)]
    subprocess.run(command, check=True, capture_output=True)
    return out


@pytest.fixture(scope="module")
def modules(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    tmp = tmp_path_factory.mktemp("preflight")
    return {
        "sm80": _module(tmp, "sm80", [("compute_80", "sm_80")]),
        "sm80_ptx80": _module(tmp, "sm80_ptx80", [("compute_80", "sm_80"), ("compute_80", "compute_80")]),
        "sm90a": _module(tmp, "sm90a", [("compute_90a", "sm_90a")]),
    }


def test_sass_for_an_older_arch_only_fails_naming_gpu_holdings_and_arch(modules: dict[str, Path]) -> None:
    decision = decide_module(modules["sm80"], [H100], "13.0", "13.0")
    assert not decision.ok and decision.rebuild_arch == "9.0"
    for part in ("NVIDIA H100", "compute capability 9.0", "sm_80", "--arch 9.0"):
        assert part in decision.reason, decision.reason
    assert decide_module(modules["sm80"], [A100], "13.0", "13.0").ok


def test_ptx_runs_forward_through_the_jit_unless_the_driver_is_older(modules: dict[str, Path]) -> None:
    jit = decide_module(modules["sm80_ptx80"], [H100], "13.0", "13.0")
    assert jit.ok and "PTX compute_80" in jit.reason
    # A CUDA 12.8 runtime on a 12.8 driver, the PTX written by nvcc 13.0: the driver cannot JIT it.
    old = decide_module(modules["sm80_ptx80"], [OLD_DRIVER_H100], "12.8", "13.0")
    assert not old.ok and "written by CUDA 13.0" in old.reason and "580.65.06" in old.reason


def test_every_visible_gpu_must_run_it(modules: dict[str, Path]) -> None:
    both = decide_module(modules["sm90a"], [H100, A100], "13.0", "13.0")
    assert not both.ok and "NVIDIA A100" in both.reason
    assert decide_module(modules["sm90a"], [H100], "13.0", "13.0").ok


def test_loading_a_module_without_code_for_the_gpu_fails_with_the_message(
    modules: dict[str, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    """What the loader runs after importing an installed GPU op (op_builder.loader). The visible
    GPU is the one input this machine cannot give: an H100 stands in for what torch would report."""
    monkeypatch.setattr(preflight, "visible_devices", lambda: ((H100,), ""))
    module = types.ModuleType("kernels._ops.fused_adam")
    module.__file__ = str(modules["sm80"])
    manifest = Manifest(torch="2.13.0", cuda="13.0", hip=None, accelerator="cuda", python="3.11", ops={})
    with pytest.raises(OpLoadError) as failed:
        preflight.check_loaded("fused_adam", module, manifest)
    assert failed.value.message.startswith("fused_adam: no device code for NVIDIA H100 (compute capability 9")
    assert "python -m op_builder preflight" in (failed.value.hint or "")
    module.__file__ = str(modules["sm80_ptx80"])  # PTX the driver can JIT: it loads
    preflight.check_loaded("fused_adam", module, manifest)
