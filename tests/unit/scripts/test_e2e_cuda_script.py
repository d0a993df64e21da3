"""scripts/e2e_cuda.py aot: the end-to-end CUDA run passes only when every op loads ahead of time."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

SCRIPT = Path(__file__).resolve().parents[3] / "scripts" / "e2e_cuda.py"
OPS = ["fused_adam", "transformer"]


def _op(name: str, source: str = "aot", ok: bool = True) -> dict[str, Any]:
    return {"name": name, "ok": ok, "source": source}


def _check(tmp_path: Path, report: object | str) -> subprocess.CompletedProcess[str]:
    path = tmp_path / "verify.json"
    path.write_text(report if isinstance(report, str) else json.dumps(report))
    return subprocess.run(
        [sys.executable, str(SCRIPT), "aot", str(path), *OPS], capture_output=True, text=True, timeout=60
    )


def test_every_op_ahead_of_time_passes(tmp_path: Path) -> None:
    proc = _check(tmp_path, {"ok": True, "torch": "2.15.0", "cuda": "13.2", "ops": [_op(n) for n in OPS]})
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "all 2 GPU ops load from their AOT modules (torch 2.15.0, CUDA 13.2)"


@pytest.mark.parametrize(
    ("ops", "report_ok", "named"),
    [
        ([_op("fused_adam"), _op("transformer", source="jit")], True, "transformer"),  # JIT-built
        ([_op("fused_adam", ok=False), _op("transformer")], True, "fused_adam"),  # loaded, failed
        ([_op("fused_adam")], True, "transformer"),  # missing from the report
        ([_op("fused_adam"), _op("transformer")], False, "see report"),  # the report itself failed
    ],
)
def test_anything_else_fails_naming_it(
    tmp_path: Path, ops: list[dict[str, Any]], report_ok: bool, named: str
) -> None:
    proc = _check(tmp_path, {"ok": report_ok, "torch": "2.15.0", "cuda": "13.2", "ops": ops})
    assert proc.returncode == 1
    assert proc.stderr.strip() == f"not loaded ahead of time: {named}"


@pytest.mark.parametrize("report", ["", "{not json", json.dumps({"ok": True})])
def test_a_report_that_cannot_be_read_exits_2(tmp_path: Path, report: str) -> None:
    proc = _check(tmp_path, report)
    assert proc.returncode == 2
    assert "cannot read the verify report" in proc.stderr and "Traceback" not in proc.stderr


def test_no_op_named_is_a_usage_error(tmp_path: Path) -> None:
    proc = subprocess.run(
        [sys.executable, str(SCRIPT), "aot", str(tmp_path / "v.json")], capture_output=True, text=True
    )
    assert proc.returncode == 2 and "usage:" in proc.stderr


def test_torch_is_cuda_fails_on_a_cpu_build() -> None:
    import torch

    proc = subprocess.run(
        [sys.executable, str(SCRIPT), "torch-is-cuda"], capture_output=True, text=True, timeout=120
    )
    assert proc.stdout.strip() == f"torch {torch.__version__}, CUDA {torch.version.cuda}"
    if torch.version.cuda is None:
        assert proc.returncode == 1 and "not a CUDA build" in proc.stderr
    else:
        assert proc.returncode == 0
