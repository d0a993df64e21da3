"""``python -m op_builder preflight`` on this machine (no GPU here): GPU ops are reported as not
checkable, which passes unless ``--require-gpu``; CPU ops run wherever the image runs."""

from __future__ import annotations

import json

import pytest

from op_builder.manifest import InstalledOp, Manifest
from op_builder.preflight import run_preflight, visible_devices

pytestmark = pytest.mark.skipif(bool(visible_devices()[0]), reason="a GPU is visible: tests/gpu covers it")

MANIFEST = Manifest(
    torch="2.13.0",
    cuda="13.0",
    hip=None,
    accelerator="cuda",
    python="3.11",
    ops={
        "cpu_adam": InstalledOp("cpu_adam", "kernels._ops.cpu_adam", "cpu", ()),
        "fused_adam": InstalledOp("fused_adam", "kernels._ops.fused_adam", "gpu", ("9.0",)),
    },
)


def test_without_a_gpu_gpu_ops_are_not_checkable_and_pass_unless_a_gpu_is_required() -> None:
    relaxed = run_preflight(MANIFEST, require_gpu=False)
    assert relaxed.ok and relaxed.devices == ()
    by_name = {op.name: op for op in relaxed.ops}
    assert by_name["cpu_adam"].ok and "CPU op" in by_name["cpu_adam"].reason
    assert by_name["fused_adam"].ok and by_name["fused_adam"].reason.startswith("not checkable: ")
    strict = run_preflight(MANIFEST, require_gpu=True)
    assert not strict.ok and [op.name for op in strict.ops if not op.ok] == ["fused_adam"]
    assert json.loads(json.dumps(strict.to_json()))["ops"][1] == {
        "name": "fused_adam", "ok": False, "reason": by_name["fused_adam"].reason,
    }  # fmt: skip


def test_nothing_installed_is_nothing_to_refuse() -> None:
    assert run_preflight(None, require_gpu=True).to_json() == {"ok": True, "devices": [], "ops": []}


def test_the_command_prints_json_and_exits_by_the_verdict(capsys: pytest.CaptureFixture[str]) -> None:
    from op_builder.__main__ import main

    assert main(["preflight", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["ok"] is True
