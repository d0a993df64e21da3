"""Reading `op_builder verify --json` output and choosing how the sealed container runs (no Docker)."""

from __future__ import annotations

import json
from typing import Any

import pytest
from rich.console import Console

from imagegen import verify as ver


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
    assert set(data) == {"image", "ok", "torch", "cuda", "hip", "seconds", "ops"}
    assert data["ops"] == [{"name": "cpu_adam", "ok": True, "source": "aot", "seconds": 0.25, "error": None}]
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
        ("", ver.FALLBACK_USER),
        ("root", ver.FALLBACK_USER),
        ("0", ver.FALLBACK_USER),
        ("0:0", ver.FALLBACK_USER),
        ("root:root", ver.FALLBACK_USER),
        ("10001:10001", "10001:10001"),
        ("imagegen", "imagegen"),
    ],
)
def test_the_container_never_runs_as_root(image_user: str, expected: str) -> None:
    assert ver.run_user(image_user) == expected


def test_verify_command() -> None:
    assert ver.verify_command(["cpu_adam"]) == ["python", "-m", "op_builder", "verify", "--json", "cpu_adam"]
    assert ver.verify_command(None) == ["python", "-m", "op_builder", "verify", "--json"]


def test_table_shows_each_op_and_the_verdict() -> None:
    raw = report(op("cpu_adam"), op("async_io", source=None, ok=False, error="libaio missing"), ok=False)
    result = ver.parse_verify_output(raw, None, "img:1", 3.0)
    assert result is not None
    console = Console(record=True, width=120, color_system=None)
    console.print(ver.render_table(result))
    text = console.export_text()
    assert "img:1" in text and "FAILED" in text and "torch 2.13.0+cpu" in text
    assert "cpu_adam" in text and "aot" in text
    assert "async_io" in text and "libaio missing" in text
