"""scripts/gpu_proof.py: the GPU proof's Python steps fail with one line, not a traceback."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import torch

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "gpu_proof.py"


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
