"""scripts/gpu_proof.py's preflight step, its GPU-free half for real: an op built into a wheel from
a copy of the sources, installed alone into a folder, and `python -m op_builder preflight` run
from that install (not this checkout), its verdict judged. A CPU op stands in for the GPU op the
device run builds: preflight passes it, so the judgement accepts it where a pass is due and
rejects it where a refusal is."""

from __future__ import annotations

import json
from pathlib import Path
from types import ModuleType

import pytest

from tests._script_module import load_script

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "gpu_proof.py"


@pytest.fixture(scope="module")
def gpu_proof() -> ModuleType:
    return load_script(SCRIPT, "gpu_proof")


def test_a_build_installed_alone_is_judged_by_its_own_preflight(
    gpu_proof: ModuleType, tmp_path: Path
) -> None:
    ok, text = gpu_proof._build_and_check("cpu_adam", "9.0", True, tmp_path, "NVIDIA H100 80GB HBM3")
    assert ok, text
    dest = tmp_path / "90"
    report = json.loads((dest / "preflight.json").read_text())
    # The install holds exactly the op built, so preflight (run from it) lists that op only.
    assert [op["name"] for op in report["ops"]] == ["cpu_adam"]
    modules = [p.name for p in (dest / "site" / "kernels" / "_ops").glob("*.so")]
    assert len(modules) == 1 and modules[0].startswith("cpu_adam."), modules
    assert "as it must" in text
    # Where preflight had to refuse, its pass is reported wrong and the step fails.
    ok, text = gpu_proof._build_and_check("cpu_adam", "8.0", False, tmp_path, "NVIDIA H100 80GB HBM3")
    assert not ok
    assert "WRONG: passed a build with no code for this GPU" in text
