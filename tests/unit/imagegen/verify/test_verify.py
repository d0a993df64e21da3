"""Reading `op_builder verify --json` output and choosing how the sealed container runs (no Docker)."""

from __future__ import annotations

import json
from typing import Any

import pytest
from rich.console import Console

from imagegen.engine import sealed
from imagegen.errors import BadInputError
from imagegen.verify import container as ver
from imagegen.verify.table import render_table


def report(*ops: dict[str, Any], ok: bool = True) -> str:
    return json.dumps(
        {"ok": ok, "torch": "2.13.0+cpu", "cuda": None, "hip": None, "ops": list(ops)}, indent=2
    )


def op(name: str, source: str | None = "aot", ok: bool = True, error: str | None = None) -> dict[str, Any]:
    return {"name": name, "ok": ok, "source": source, "seconds": 0.25, "error": error}


def test_every_requested_op_from_aot_is_ok() -> None:
    result = ver.parse_verify_output(
        report(op("cpu_adam"), op("cpu_lion")), ["cpu_adam", "cpu_lion"], "img", 1.5
    )
    assert result is not None
    assert result.ok
    assert [o.name for o in result.ops] == ["cpu_adam", "cpu_lion"]
    assert all(o.source == "aot" and o.error is None for o in result.ops)
    assert (result.torch, result.cuda, result.hip, result.seconds) == ("2.13.0+cpu", None, None, 1.5)


@pytest.mark.parametrize("source", ["jit", "fallback"])
def test_an_op_not_loaded_ahead_of_time_fails_even_if_the_image_says_ok(source: str) -> None:
    # The verifier is not trusted on "ok": only source == "aot" counts.
    result = ver.parse_verify_output(report(op("cpu_adam", source=source, ok=True)), ["cpu_adam"], "img", 0.0)
    assert result is not None and not result.ok
    assert result.ops[0].source == source
    assert result.ops[0].error is not None and source in result.ops[0].error


def test_a_requested_op_missing_from_the_image_fails() -> None:
    result = ver.parse_verify_output(report(op("cpu_adam")), ["cpu_adam", "cpu_lion"], "img", 0.0)
    assert result is not None and not result.ok
    missing = result.ops[1]
    assert (missing.name, missing.ok, missing.source) == ("cpu_lion", False, None)
    assert missing.error is not None and "not reported" in missing.error


def test_load_error_is_kept() -> None:
    raw = report(
        op("async_io", source=None, ok=False, error="libaio.so.1: cannot open shared object file"), ok=False
    )
    result = ver.parse_verify_output(raw, None, "img", 0.0)
    assert result is not None and not result.ok
    assert result.ops[0].error == "libaio.so.1: cannot open shared object file"


def test_nothing_requested_and_nothing_installed_is_not_ok() -> None:
    result = ver.parse_verify_output(report(ok=False), None, "img", 0.0)
    assert result is not None and not result.ok and result.ops == ()


def test_noise_before_the_json_is_skipped() -> None:
    stdout = "UserWarning: something {odd}\n{not json\n" + report(op("cpu_adam"))
    result = ver.parse_verify_output(stdout, ["cpu_adam"], "img", 0.0)
    assert result is not None and result.ok


@pytest.mark.parametrize(
    "stdout", ["", "Traceback (most recent call last):\nModuleNotFoundError: op_builder", "[1, 2]"]
)
def test_no_report_is_none(stdout: str) -> None:
    assert ver.parse_verify_output(stdout, ["cpu_adam"], "img", 0.0) is None


def test_to_json_has_the_design_shape() -> None:
    result = ver.parse_verify_output(report(op("cpu_adam")), None, "img:1", 2.0)
    assert result is not None
    data = result.to_json()
    # Today's fields plus what the verification issue added: the GPUs passed, and per op its
    # self-test and device-code audit (None here: an image that did not report them).
    assert set(data) == {"image", "ok", "torch", "cuda", "hip", "seconds", "ops", "gpus"}
    assert data["ops"] == [
        {
            "name": "cpu_adam",
            "ok": True,
            "source": "aot",
            "seconds": 0.25,
            "error": None,
            "selftest": None,
            "binary": None,
            "machine": None,
        }
    ]
    json.dumps(data)  # serialisable as is


@pytest.mark.parametrize(
    ("ops", "labels", "expected"),
    [
        (["cpu_lion"], {"io.imagegen.ops": "cpu_adam,cpu_lion"}, ("cpu_lion",)),
        (None, {"io.imagegen.ops": "cpu_adam, cpu_lion"}, ("cpu_adam", "cpu_lion")),
        ([], {"io.imagegen.ops": "cpu_adam"}, ("cpu_adam",)),
        (None, {"io.imagegen.ops": ""}, None),
        (None, {}, None),
    ],
)
def test_requested_ops(
    ops: list[str] | None, labels: dict[str, str], expected: tuple[str, ...] | None
) -> None:
    assert ver.requested_ops(ops, labels) == expected


@pytest.mark.parametrize(
    ("image_user", "expected"),
    [
        ("", sealed.FALLBACK_USER),
        ("root", sealed.FALLBACK_USER),
        ("0", sealed.FALLBACK_USER),
        ("0:0", sealed.FALLBACK_USER),
        ("root:root", sealed.FALLBACK_USER),
        ("10001:10001", "10001:10001"),
        ("imagegen", "imagegen"),
    ],
)
def test_the_container_never_runs_as_root(image_user: str, expected: str) -> None:
    assert sealed.run_user(image_user) == expected


def test_verify_command() -> None:
    assert ver.verify_command(["cpu_adam"]) == ["python", "-m", "op_builder", "verify", "--json", "cpu_adam"]
    assert ver.verify_command(None) == ["python", "-m", "op_builder", "verify", "--json"]


def test_table_shows_each_op_and_the_verdict() -> None:
    raw = report(op("cpu_adam"), op("async_io", source=None, ok=False, error="libaio missing"), ok=False)
    result = ver.parse_verify_output(raw, None, "img:1", 3.0)
    assert result is not None
    console = Console(record=True, width=120, color_system=None)
    console.print(render_table(result))
    text = console.export_text()
    assert "img:1" in text and "FAILED" in text and "torch 2.13.0+cpu" in text
    assert "cpu_adam" in text and "aot" in text
    assert "async_io" in text and "libaio missing" in text


def test_verify_command_can_require_a_gpu() -> None:
    command = ver.verify_command(["fused_adam"], require_gpu=True)
    assert command == ["python", "-m", "op_builder", "verify", "--json", "--require-gpu", "fused_adam"]


def selftest(
    name: str, ok: bool, skipped: str | None = None, err: float = 0.0, device: str = "cpu"
) -> dict[str, Any]:
    measured = {"max_abs_err": err, "tolerance": 1e-5}
    if skipped:
        measured = {"max_abs_err": None, "tolerance": None}
    return {"name": name, "ok": ok, "device": device, **measured, "seconds": 0.1, "isa": None, "error": None,
            "skipped": skipped}  # fmt: skip


def audit(missing: tuple[str, ...] = ()) -> dict[str, Any]:
    sass = [s for s in ("sm_80", "sm_90") if s not in missing]
    return {"sass": sass, "ptx": [], "gfx": [], "planned": ["sm_80", "sm_90"], "missing": [], "extra": []}


def test_selftests_and_audits_decide_with_the_load() -> None:
    raw = report(
        {**op("cpu_adam"), "selftest": selftest("cpu_adam", True), "binary": None},
        {**op("cpu_lion"), "selftest": selftest("cpu_lion", True, err=0.5), "binary": None},
        {
            **op("fused_adam"),
            "selftest": selftest("fused_adam", False, "needs a GPU", device="cuda"),
            "binary": audit(),
        },
        {
            **op("fused_lion"),
            "selftest": selftest("fused_lion", False, "needs a GPU", device="cuda"),
            "binary": audit(("sm_90",)),
        },
    )
    result = ver.parse_verify_output(raw, None, "img", 1.0)
    assert result is not None and not result.ok
    verdicts = {o.name: o.ok for o in result.ops}
    # A wrong result (0.5 > 1e-5 although the image said ok) and a missing arch fail; a GPU
    # self-test skipped without a GPU does not.
    assert verdicts == {"cpu_adam": True, "cpu_lion": False, "fused_adam": True, "fused_lion": False}
    assert result.gpu_selftests_skipped == ("fused_adam", "fused_lion")
    summary = result.failure_summary()
    assert "cpu_lion (self-test failed: max error 0.5 > tolerance 1e-05)" in summary
    assert "fused_lion (device code differs from the plan: missing sm_90)" in summary
    console = Console(record=True, width=160, color_system=None)
    console.print(render_table(result))
    text = console.export_text()
    assert "GPU self-tests skipped (fused_adam, fused_lion): no GPU was passed" in text
    assert "differs" in text and "skipped" in text


@pytest.mark.parametrize(("value", "expected"), [("all", "all"), ("ALL", "all"), ("0", "0"), ("0, 1", "0,1")])
def test_gpu_selections(value: str, expected: str) -> None:
    assert ver.parse_gpus(value) == expected
    assert ver.parse_gpus(None) is None


@pytest.mark.parametrize("value", ["", "gpu0", "0;1", "all,0", "-1"])
def test_bad_gpu_selections_are_bad_input(value: str) -> None:
    with pytest.raises(BadInputError, match="--gpus"):
        ver.parse_gpus(value)


def test_gpus_become_device_requests() -> None:
    assert sealed.device_requests(None) == []
    (every,) = sealed.device_requests("all")
    assert every["Count"] == -1 and every["Capabilities"] == [["gpu"]]
    (some,) = sealed.device_requests("0,1")
    assert some["DeviceIDs"] == ["0", "1"]


def test_a_cpu_self_test_not_checkable_here_passes_and_says_why() -> None:
    why = "not checkable under emulation: qemu-user has no Linux AIO (io_setup: Function not implemented)"
    raw = report(
        {**op("cpu_adam"), "selftest": selftest("cpu_adam", True), "binary": None},
        {**op("async_io"), "selftest": selftest("async_io", False, why), "binary": None},
    )
    result = ver.parse_verify_output(raw, None, "img", 1.0)
    assert result is not None and result.ok
    assert result.gpu_selftests_skipped == () and result.cpu_selftests_skipped == (("async_io", why),)
    console = Console(record=True, width=200, color_system=None)
    console.print(render_table(result))
    text = console.export_text()
    assert f"async_io self-test skipped: {why}" in " ".join(text.split()) and "GPU self-tests" not in text
