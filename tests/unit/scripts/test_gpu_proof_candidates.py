"""scripts/gpu_proof.sh's candidates step, its wiring without a GPU: the Python it runs is a
recorder that writes down each call's arguments and the two variables that make a candidate a
candidate (its define, through nvcc's NVCC_APPEND_FLAGS, and its own extensions folder), so the
test sees that the candidate is built, tested and benchmarked with its define, the current build
benchmarked without it, and a failed candidate build reported without stopping the step."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]
RECORDER = """#!/usr/bin/env python3
import json, os, sys
with open(os.environ["RECORD"], "a") as out:
    out.write(json.dumps({"argv": sys.argv[1:], "define": os.environ.get("NVCC_APPEND_FLAGS"),
                          "ext": os.environ["TORCH_EXTENSIONS_DIR"]}) + "\\n")
failing = os.environ.get("FAIL_DEFINE")
building = sys.argv[1:2] == ["scripts/gpu_proof.py"]
sys.exit(3 if failing and building and failing in (os.environ.get("NVCC_APPEND_FLAGS") or "") else 0)
"""


def _run(
    tmp_path: Path, candidates: str, **extra: str
) -> tuple[subprocess.CompletedProcess[str], list[dict]]:
    python = tmp_path / "python"
    python.write_text(RECORDER)
    python.chmod(0o755)
    record = tmp_path / "record.jsonl"
    env = {
        **os.environ,
        "PYTHON": str(python),
        "LOG_DIR": str(tmp_path / "logs"),
        "RECORD": str(record),
        "CANDIDATES": candidates,
        "TORCH_EXTENSIONS_DIR": str(tmp_path / "ext"),
        **extra,
    }
    env.pop("NVCC_APPEND_FLAGS", None)
    done = subprocess.run(
        ["bash", "scripts/gpu_proof.sh", "candidates"],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    calls = [json.loads(line) for line in record.read_text().splitlines()] if record.exists() else []
    return done, calls


def test_the_candidate_is_built_tested_and_benchmarked_beside_the_current_build(tmp_path: Path) -> None:
    done, calls = _run(tmp_path, "quantizer:QUANTIZER_REDO_UNSURE_ONLY:gpu_quantizer")
    assert done.returncode == 0, done.stdout + done.stderr
    build, tests, current, candidate = calls
    candidate_dir = str(tmp_path / "ext-candidate-QUANTIZER_REDO_UNSURE_ONLY")
    assert build["argv"] == ["scripts/gpu_proof.py", "load", "quantizer"]
    assert tests["argv"][:3] == ["-m", "pytest", "tests/gpu"] and "quantizer" in tests["argv"]
    for call in (build, tests, candidate):
        assert call["define"] == "-DQUANTIZER_REDO_UNSURE_ONLY" and call["ext"] == candidate_dir
    assert current["argv"][0] == "bench/gpu_quantizer.py" and current["define"] is None
    assert current["ext"] == str(tmp_path / "ext")
    assert candidate["argv"][0] == "bench/gpu_quantizer.py"
    assert candidate["argv"][2].endswith("gpu_quantizer-QUANTIZER_REDO_UNSURE_ONLY.json")


def test_a_candidate_that_does_not_build_fails_the_step_and_the_next_still_runs(tmp_path: Path) -> None:
    done, calls = _run(
        tmp_path, "quantizer:BROKEN:gpu_quantizer transformer:OTHER:gpu_transformer", FAIL_DEFINE="BROKEN"
    )
    assert done.returncode == 1
    assert "!!! candidate BROKEN build failed (exit 3)" in done.stdout
    assert [c["define"] for c in calls] == ["-DBROKEN", "-DOTHER", "-DOTHER", None, "-DOTHER"]
