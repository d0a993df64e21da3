"""The selftest JSON: written by ``op_builder selftest`` (in an image or here), read back by imagegen."""

from __future__ import annotations

import pytest

from op_builder.report import SelfTestReport, SelfTestResult

KEYS = {"name", "ok", "device", "max_abs_err", "tolerance", "seconds", "isa", "error", "skipped"}


def _result(name: str = "cpu_adam", **changes: object) -> SelfTestResult:
    fields: dict[str, object] = {
        "name": name,
        "ok": True,
        "device": "cpu",
        "max_abs_err": 1e-7,
        "tolerance": 5e-5,
        "seconds": 0.05,
        "isa": "avx2",
        "error": None,
        "skipped": None,
    }
    fields.update(changes)
    return SelfTestResult(**fields)  # type: ignore[arg-type]


def test_round_trip_keeps_every_field() -> None:
    report = SelfTestReport(
        "cpu",
        (
            _result(),
            _result(
                "fused_adam",
                ok=False,
                device="cuda",
                max_abs_err=None,
                tolerance=None,
                isa=None,
                seconds=0.0,
                skipped="needs a GPU",
            ),
        ),
    )
    data = report.to_json()
    assert set(data) == {"ok", "device", "ops"}
    assert all(set(op) == KEYS for op in data["ops"])
    assert SelfTestReport.from_json(data) == report
    assert data["ok"] is False  # a skipped op is never a pass


@pytest.mark.parametrize(
    ("err", "tol", "error", "skipped", "ok"),
    [
        (0.0, 0.0, None, None, True),
        (1e-6, 1e-5, None, None, True),
        (1e-5, 1e-5, None, None, True),
        (2e-5, 1e-5, None, None, False),
        (None, 1e-5, None, None, False),
        (0.0, 1e-5, "boom", None, False),
        (None, None, None, "needs a GPU", False),
    ],
)
def test_the_verdict_rule(
    err: float | None, tol: float | None, error: str | None, skipped: str | None, ok: bool
) -> None:
    assert SelfTestResult.passes(err, tol, error, skipped) is ok


def test_reading_recomputes_verdicts_instead_of_trusting_them() -> None:
    data = {
        "ok": True,
        "device": "cpu",
        "ops": [
            {"name": "cpu_adam", "ok": True, "max_abs_err": 1.0, "tolerance": 1e-5},
            {"name": "fused_lion", "ok": True, "skipped": "no GPU"},
            {"name": "cpu_lion", "ok": True, "max_abs_err": "NaN", "tolerance": 1e-5},
            {"name": "async_io", "ok": True, "max_abs_err": True, "tolerance": 0},
            {"name": "quantizer", "ok": True, "max_abs_err": 0.0, "tolerance": 0.0, "seconds": "x"},
            {"ok": True},
            "garbage",
        ],
    }
    report = SelfTestReport.from_json(data)
    assert [op.name for op in report.ops] == ["cpu_adam", "fused_lion", "cpu_lion", "async_io", "quantizer"]
    assert [op.ok for op in report.ops] == [False, False, False, False, True]
    assert report.ops[2].max_abs_err is None and report.ops[4].seconds == 0.0
    assert report.ok is False


def test_an_empty_report_is_not_ok() -> None:
    assert SelfTestReport("cpu", ()).ok is False
    assert SelfTestReport.from_json({"ok": True, "ops": []}).ok is False
