"""scripts/sanitize_cases.py, the sanitizers' workload, runs its calls on the fallbacks here.

The GPU machine runs it under compute-sanitizer; here the same calls on the CPU keep it in
step with the fronts' signatures, so a device session does not lose its sanitizer step to
a renamed argument.
"""

from __future__ import annotations

from pathlib import Path
from types import ModuleType

import pytest
import torch

from tests._script_module import load_script

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "sanitize_cases.py"


@pytest.fixture(scope="module")
def cases() -> ModuleType:
    return load_script(SCRIPT, "sanitize_cases")


@pytest.mark.filterwarnings("ignore:.*using the PyTorch fallback:RuntimeWarning")
def test_every_case_runs_on_the_fallbacks(cases: ModuleType, capsys: pytest.CaptureFixture[str]) -> None:
    # One dtype: the calls are the same for each, and the fallbacks are slow in bf16.
    assert cases.main(["--device", "cpu", "--dtypes", "float32"]) == 0
    out = capsys.readouterr().out
    ran = [line.removeprefix("  ran ") for line in out.splitlines() if line.startswith("  ran ")]
    assert len(ran) == len(set(ran)), "two cases share a name: the log would not say which failed"
    for group in cases.GROUPS:
        assert any(line.startswith(f"{group}: ") and " 0 cases" not in line for line in out.splitlines())


@pytest.mark.skipif(torch.cuda.is_available(), reason="a GPU is visible")
def test_without_a_gpu_the_cuda_run_says_so(cases: ModuleType, capsys: pytest.CaptureFixture[str]) -> None:
    assert cases.main([]) == 2
    assert "no GPU visible" in capsys.readouterr().err
