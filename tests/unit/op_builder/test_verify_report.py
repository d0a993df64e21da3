"""The verify JSON: written by ``op_builder verify`` in the image, read back by imagegen."""

from __future__ import annotations

import pytest

from op_builder.report import OpVerification, SelfTestResult, VerifyReport


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
    assert set(data) == {"ok", "torch", "cuda", "hip", "machine", "ops"}
    assert set(data["ops"][0]) == {
        "name",
        "ok",
        "source",
        "seconds",
        "error",
        "selftest",
        "binary",
        "machine",
    }
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


def _selftest(ok: bool, skipped: str | None = None, error: str | None = None) -> SelfTestResult:
    err = 0.0 if ok else (None if skipped or error else 1.0)
    return SelfTestResult(
        "fused_adam", ok, "cpu", err, None if err is None else 1e-5, 0.1, None, error, skipped
    )


@pytest.mark.parametrize(
    ("selftest", "require_gpu", "expected"),
    [
        (None, False, True),  # not self-tested (--no-selftest)
        ("pass", False, True),
        ("fail", False, False),  # wrong results fail verification
        ("error", False, False),
        ("skipped", False, True),  # no GPU here: reported, not failed
        ("skipped", True, False),  # ... unless a GPU was required
    ],
)
def test_the_verdict_combines_load_selftest_and_audit(
    selftest: str | None, require_gpu: bool, expected: bool
) -> None:
    test = {
        None: None,
        "pass": _selftest(True),
        "fail": _selftest(False),
        "error": _selftest(False, error="boom"),
        "skipped": _selftest(False, skipped="needs a GPU"),
    }[selftest]
    assert OpVerification.verdict("aot", None, test, None, require_gpu) is expected
    assert OpVerification.verdict("jit", None, test, None, require_gpu) is False
    entry = OpVerification("fused_adam", expected, "aot", 0.1, None, test)
    # What an image printed reads back to the same verdict (reading never raises one).
    assert OpVerification.from_json(entry.to_json()).ok is expected
    if not expected:
        assert entry.problems() and entry.problems()[0].startswith("self-test")


def test_a_failed_selftest_cannot_be_read_back_as_a_pass() -> None:
    forged = OpVerification("cpu_adam", True, "aot", 0.1, None, _selftest(False)).to_json()
    forged["ok"] = True
    forged["selftest"]["ok"] = True  # max_abs_err 1.0 > tolerance 1e-5 all the same
    assert OpVerification.from_json(forged).ok is False
