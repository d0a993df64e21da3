"""`make cuda-check` as a test: every .cu compiles with the local nvcc for the flags
the op builder gives it (8.0 and 9.0, with each op's own defines)."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from op_builder import ALL_OPS

REPO = Path(__file__).resolve().parents[2]
HAS_NVCC = shutil.which("nvcc") is not None or Path("/usr/local/cuda/bin/nvcc").exists()


@pytest.mark.skipif(not HAS_NVCC, reason="no CUDA toolkit (nvcc) on this machine: cuda-check needs one")
def test_every_cuda_source_compiles_for_the_builders_flags() -> None:
    done = subprocess.run(
        [sys.executable, str(REPO / "scripts" / "cuda_check.py"), "--json", "--archs", "8.0;9.0"],
        capture_output=True,
        text=True,
        timeout=1200,
    )
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:]
    report = json.loads(done.stdout)
    results = report["results"] if isinstance(report, dict) else report
    compiled = {r["source"] for r in results if r["ok"]}
    expected = {
        str(Path(src).relative_to(REPO)) if Path(src).is_absolute() else src
        for name, builder in ALL_OPS.items()
        if builder.target == "gpu"
        for src in builder.source_paths()
        if src.endswith(".cu")
    }
    normalised = {str(Path(s).relative_to(REPO)) if Path(s).is_absolute() else s for s in compiled}
    assert normalised == expected
