"""scripts/gpu_proof.py: the GPU proof's Python steps fail with one line, not a traceback."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest
import torch

from tests._script_module import load_script

SCRIPT = Path(__file__).resolve().parents[3] / "scripts" / "gpu_proof.py"


def _run(*argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(SCRIPT), *argv], capture_output=True, text=True, timeout=120)


def test_an_unknown_op_exits_2_naming_the_known_ones() -> None:
    proc = _run("load", "fused_adma")
    assert proc.returncode == 2
    assert proc.stderr.startswith("fused_adma: unknown op 'fused_adma'") and "fused_adam" in proc.stderr
    assert "Traceback" not in proc.stderr


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has a CUDA GPU")
def test_env_without_a_gpu_exits_1() -> None:
    proc = _run("env")
    assert proc.returncode == 1 and "sees no CUDA GPU" in proc.stderr and "Traceback" not in proc.stderr


def _gpu_proof_module() -> ModuleType:
    return load_script(SCRIPT, "gpu_proof")


H100 = "NVIDIA H100 80GB HBM3"
REFUSED = {"name": "transformer", "ok": False, "reason": f"{H100} (9.0): the module holds sm_80 only"}
PASSED = {"name": "transformer", "ok": True, "reason": "sm_90 runs on 9.0"}


@pytest.mark.parametrize(
    ("expect_ok", "returncode", "entries", "wrong"),
    [
        (True, 0, [PASSED], None),
        (False, 1, [REFUSED], None),
        (True, 1, [REFUSED], "refused a build for this GPU"),
        (True, 0, [], "listed transformer 0 times"),
        (False, 0, [PASSED], "passed a build with no code"),
        (False, 0, [REFUSED], "passed a build with no code"),  # refused, yet exit 0
        (False, 1, [{**REFUSED, "reason": "no code for this GPU"}], "without naming the GPU"),
    ],
)
def test_preflight_judgement(
    expect_ok: bool, returncode: int, entries: list[dict[str, object]], wrong: str | None
) -> None:
    problem = _gpu_proof_module().judge("transformer", expect_ok, returncode, {"ops": entries}, H100)
    assert problem is None if wrong is None else wrong in problem


def test_the_other_major_cannot_run_on_the_gpu() -> None:
    other_major = _gpu_proof_module().other_major
    assert [other_major(c) for c in [(9, 0), (8, 6), (10, 0), (12, 0)]] == ["8.0", "9.0", "8.0", "8.0"]


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has a CUDA GPU")
def test_preflight_step_without_a_gpu_exits_1(tmp_path: Path) -> None:
    proc = _run("preflight", "--work", str(tmp_path))
    assert proc.returncode == 1 and "sees no CUDA GPU" in proc.stderr and "Traceback" not in proc.stderr


PROFILE = SCRIPT.parents[1] / "bench" / "gpu_profile.py"


def test_profile_cases_name_the_lagging_kernels_and_refuse_others() -> None:
    listed = subprocess.run(
        [sys.executable, str(PROFILE), "--list"], capture_output=True, text=True, timeout=120
    )
    cases = listed.stdout.split()
    assert listed.returncode == 0
    for lagging in (
        "layer_norm_fwd_fp16_768",
        "layer_norm_fwd_fp32_1024",
        "quantize_int8_asym_bf16",
        "quantize_e4m3_bf16",
    ):
        assert lagging in cases
    wrong = subprocess.run(
        [sys.executable, str(PROFILE), "layer_norm"], capture_output=True, text=True, timeout=120
    )
    assert (
        wrong.returncode == 2
        and "unknown case 'layer_norm'" in wrong.stderr
        and "Traceback" not in wrong.stderr
    )


def test_an_unknown_step_runs_nothing() -> None:
    proc = subprocess.run(
        ["bash", str(SCRIPT.with_suffix(".sh")), "env", "proifle"], capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 2 and "unknown step: proifle" in proc.stderr and "=== env" not in proc.stdout
