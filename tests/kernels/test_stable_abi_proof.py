"""One stable CPU module, built once, loads and computes right on two torch releases.

Runs ``scripts/stable_abi_proof.py`` end to end: the three CPU optimizer ops built ahead of time
with this venv's torch, installed into a venv of the same torch and one of torch 2.10.0, where
``op_builder verify``, the symbol check and the kernel tests against torch must pass on the same
module bytes. About 4 minutes once the venvs exist (build/stable-abi-venvs, kept between runs);
the first run fetches torch 2.10.0 and its CUDA wheels (~3 GB). ``make stable-abi-proof`` runs the
same; docs/benchmarks.md records its result.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "scripts" / "stable_abi_proof.py"
SETUP_FAILED = 3  # the script's exit code when a venv could not be set up

# The install may take up to the script's own 25 minutes, then the build and the two test runs.
pytestmark = [pytest.mark.slow, pytest.mark.timeout(2700)]


def test_one_module_loads_and_computes_right_on_two_torch_releases(tmp_path: Path) -> None:
    out = tmp_path / "proof.json"
    done = subprocess.run(
        [sys.executable, str(SCRIPT), "--work", str(tmp_path / "work"), "--out", str(out)],
        capture_output=True,
        text=True,
        timeout=2600,
    )
    if done.returncode == SETUP_FAILED:
        # Under IMAGEGEN_STRICT_SKIPS (make test) this skip is a failure: the index should serve it.
        pytest.skip(f"the second torch cannot be had here (pip install torch==2.10.0): {done.stderr[-500:]}")
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:]
    report = json.loads(out.read_text())
    assert report["ok"] and not report["failures"]
    first, second = report["envs"]
    assert first["torch"].split(".")[:2] != second["torch"].split(".")[:2]
    assert second["torch"].startswith("2.10.")
    for op, entry in report["wheel_modules"].items():
        assert entry["member"] == f"kernels/_ops/{op}.abi3.so"
        assert first["modules"][op]["sha256"] == second["modules"][op]["sha256"] == entry["sha256"]
    for env in (first, second):
        assert env["ok"] and env["tests"]["passed"] > 0 and env["tests"]["failed"] == 0
        assert {op["name"]: op["source"] for op in env["verify"]} == dict.fromkeys(
            report["wheel_modules"], "aot"
        )
        assert all(module["check_ok"] for module in env["modules"].values())
