"""The verify JSON: written by ``op_builder verify`` in the image, read back by imagegen."""

from __future__ import annotations

from op_builder.report import OpVerification, VerifyReport


def test_round_trip_keeps_every_field() -> None:
    report = VerifyReport(
        "2.13.0+cpu",
        None,
        None,
        (
            OpVerification("cpu_adam", True, "aot", 0.01, None),
            OpVerification("async_io", False, None, 0.0, "no"),
        ),
    )
    data = report.to_json()
    assert set(data) == {"ok", "torch", "cuda", "hip", "ops"}
    assert set(data["ops"][0]) == {"name", "ok", "source", "seconds", "error"}
    assert VerifyReport.from_json(data) == report
    assert data["ok"] is False


def test_reading_recomputes_verdicts_instead_of_trusting_them() -> None:
    data = {
        "ok": True,
        "torch": "2.13.0",
        "ops": [
            {"name": "cpu_adam", "ok": True, "source": "jit", "seconds": 1, "error": None},
            {"name": "cpu_lion", "ok": True, "source": "weird", "seconds": 0, "error": None},
            {"ok": True},
            "garbage",
        ],
    }
    report = VerifyReport.from_json(data)
    assert [op.name for op in report.ops] == ["cpu_adam", "cpu_lion"]
    jit, weird = report.ops
    assert not jit.ok and jit.error == "loaded from jit, not ahead of time"
    assert not weird.ok and weird.source is None
    assert report.ok is False
    assert VerifyReport.from_json({"ops": []}).ok is False  # nothing verified is not a pass
