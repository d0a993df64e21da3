"""The seed bug, checked in a real build: nvcc command lines carry each arch once, and
fp_quantizer's >= 8.0 filter does not leak into the op built after it."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
NVCC = shutil.which("nvcc") or (
    "/usr/local/cuda/bin/nvcc" if Path("/usr/local/cuda/bin/nvcc").exists() else None
)

pytestmark = pytest.mark.skipif(NVCC is None, reason="no CUDA toolkit (nvcc) on this machine")


def test_each_op_nvcc_line_has_its_own_archs_once(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DS_", "TORCH_CUDA_ARCH"))}
    # CUDA 13 cannot build 7.0; 7.5 plays its part (an arch fp_quantizer must drop). Two archs
    # and a PTX are enough to show each once: every arch more is another device compile per op.
    env.update(
        DS_ACCELERATOR="cuda",
        TORCH_CUDA_ARCH_LIST="7.5;8.0+PTX",
        DS_SKIP_CUDA_CHECK="1",
        MAX_JOBS="2",
        PYTHONPATH=str(REPO),
    )
    before = dict(env)
    done = subprocess.run(
        [
            sys.executable,
            str(Path(__file__).with_name("gencode_build.py")),
            str(tmp_path),
            "fp_quantizer",
            "quantizer",
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=1200,
    )
    log = done.stdout + done.stderr
    assert done.returncode == 0, log[-4000:]
    nvcc_lines = [line for line in log.splitlines() if "nvcc" in line and " -c " in line and ".cu" in line]
    by_source = {re.search(r"(\w+)\.cu\b", line)[1]: line for line in nvcc_lines}  # type: ignore[index]
    assert {"fp_quantizer", "quantizer"} <= set(by_source), nvcc_lines

    def codes(line: str) -> Counter[str]:
        return Counter(re.findall(r"-gencode[= ]arch=compute_\w+,code=(\w+)", line))

    assert codes(by_source["fp_quantizer"]) == Counter({"sm_80": 1, "compute_80": 1})
    assert codes(by_source["quantizer"]) == Counter({"sm_75": 1, "sm_80": 1, "compute_80": 1})
    assert "-DBF16_AVAILABLE" in by_source["fp_quantizer"]
    assert "-DBF16_AVAILABLE" not in by_source["quantizer"]  # its own list has 7.5
    assert env == before
