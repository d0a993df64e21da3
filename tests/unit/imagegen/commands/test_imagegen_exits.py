"""Exit codes of commands whose printed answer already says what failed (doctor, matrix --check,
a failed verification): one document on stdout, then the error's exit code, nothing more."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from imagegen.cli import ImagegenGroup, app
from imagegen.doctor import diagnosis as doctor_lib
from imagegen.engine import Engine
from imagegen.engine.client import ENSURE_DOCKER_HINT
from imagegen.errors import EngineUnavailableError, VerificationFailedError

runner = CliRunner()


def _engine(kind: str = "buildkit") -> Engine:
    return Engine(kind, None if kind == "classic" else "/usr/bin/docker", "20.10.24")  # type: ignore[arg-type]


def _fake_host(monkeypatch: pytest.MonkeyPatch, engine: Engine | None, missing: tuple[str, ...] = ()) -> None:
    """doctor's probes answered by hand: ``engine`` None means no daemon answers."""

    def detect_engine(env: object) -> Engine:
        if engine is None:
            raise EngineUnavailableError(
                "no Docker daemon answers: connection refused", hint=ENSURE_DOCKER_HINT
            )
        return engine

    def local_images(refs: list[str], env: object) -> dict[str, bool]:
        return {ref: ref not in missing for ref in refs}

    monkeypatch.setattr(doctor_lib, "detect_engine", detect_engine)
    monkeypatch.setattr(doctor_lib, "local_images", local_images)


def _one_document(stdout: str) -> dict[str, object]:
    data = json.loads(stdout)  # fails when a second document (an {"error": ...}) follows
    assert isinstance(data, dict) and "error" not in data
    return data


def test_doctor_json_all_present_exits_0(monkeypatch: pytest.MonkeyPatch) -> None:
    _fake_host(monkeypatch, _engine())
    result = runner.invoke(app, ["doctor", "--json"])
    assert result.exit_code == 0, result.output
    assert _one_document(result.stdout)["ok"] is True


def test_doctor_json_with_a_problem_exits_1_after_its_report(monkeypatch: pytest.MonkeyPatch) -> None:
    _fake_host(monkeypatch, _engine(), missing=(doctor_lib.STANDIN_TAGS[0],))
    result = runner.invoke(app, ["doctor", "--json"])
    assert result.exit_code == 1, result.output
    data = _one_document(result.stdout)
    assert data["ok"] is False
    failed = [c for c in data["checks"] if not c["ok"]]  # type: ignore[union-attr]
    assert [c["name"] for c in failed] == [f"stand-in {doctor_lib.STANDIN_TAGS[0]}"]


def test_doctor_json_classic_only_exits_1(monkeypatch: pytest.MonkeyPatch) -> None:
    _fake_host(monkeypatch, _engine("classic"))
    result = runner.invoke(app, ["doctor", "--json"])
    assert result.exit_code == 1 and _one_document(result.stdout)["ok"] is False


@pytest.mark.parametrize("as_json", [True, False])
def test_doctor_without_an_engine_exits_3_once_reported(
    monkeypatch: pytest.MonkeyPatch, as_json: bool
) -> None:
    _fake_host(monkeypatch, None)
    result = runner.invoke(app, ["doctor", *(["--json"] if as_json else [])])
    assert result.exit_code == 3, result.output
    if as_json:
        assert _one_document(result.stdout)["ok"] is False
    else:
        assert "connection refused" in result.stdout  # in the table
    assert "error:" not in result.stderr  # the report above is the answer, not repeated


def test_doctor_text_with_a_problem_exits_1(monkeypatch: pytest.MonkeyPatch) -> None:
    _fake_host(monkeypatch, _engine(), missing=(doctor_lib.STANDIN_TAGS[1],))
    result = runner.invoke(app, ["doctor"])
    assert result.exit_code == 1 and "not made yet" in result.stdout


def test_doctor_lists_cuda_and_arm64_standins_as_optional(monkeypatch: pytest.MonkeyPatch) -> None:
    cuda_devel = "imagegen-standin/cuda:13.2-devel"
    arm64_runtime = "imagegen-standin/python:3.11-runtime-arm64"
    _fake_host(monkeypatch, _engine(), missing=(cuda_devel, arm64_runtime))
    result = runner.invoke(app, ["doctor", "--json"])
    assert result.exit_code == 0, result.output  # optional ones absent: still a healthy host
    data = _one_document(result.stdout)
    checks = {c["name"]: c for c in data["checks"]}  # type: ignore[union-attr]
    assert data["ok"] is True
    cuda = checks[f"stand-in {cuda_devel}"]
    assert cuda["ok"] is False and cuda["required"] is False
    assert cuda["fix"] == "imagegen standins --cuda 13.2"
    arm64 = checks[f"stand-in {arm64_runtime}"]
    assert arm64["fix"] == "imagegen standins --platform linux/arm64"
    assert checks[f"stand-in {doctor_lib.STANDIN_TAGS[1]}"]["required"] is True
    text = runner.invoke(app, ["doctor"])
    assert text.exit_code == 0 and "optional" in text.stdout


def test_matrix_check_json_stale_is_one_document_and_exit_1(tmp_path: Path) -> None:
    result = runner.invoke(app, ["matrix", "--out", str(tmp_path), "--check", "--json"])
    assert result.exit_code == 1, result.output
    data = _one_document(result.stdout)
    assert data["ok"] is False and data["stale"]


# A command of its own, so the CLI's error handling is tested without an engine.
probe_app = typer.Typer(cls=ImagegenGroup)


@probe_app.command("fail")
def _fail(reported: bool = False) -> None:
    typer.echo("the whole answer")
    raise VerificationFailedError("op x did not load", hint="see above", reported=reported)


@probe_app.command("other")
def _other() -> None:
    pass


def test_a_reported_error_only_sets_the_exit_code() -> None:
    reported = runner.invoke(probe_app, ["fail", "--reported"])
    assert reported.exit_code == 1
    assert reported.stdout == "the whole answer\n" and reported.stderr == ""
    unreported = runner.invoke(probe_app, ["fail"])
    assert unreported.exit_code == 1
    assert "error: op x did not load" in unreported.stderr
