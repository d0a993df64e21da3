"""The CLI's error contract, asserted one way by every test of bad input.

Exit 2 (or the documented code), exactly one ``error:`` line and a ``hint:`` on stderr,
never a traceback, no partial output; with --json one ``{"error": ...}`` document on stdout.
"""

from __future__ import annotations

import json

from typer.testing import CliRunner, Result

from imagegen.cli import app

runner = CliRunner()
DOCKERFILE = ["dockerfile", "--cpu", "--ops", "cpu_adam"]
PEM = "-----BEGIN CERTIFICATE-----\nMIIBszCCAVmgAwIBAgIU\n-----END CERTIFICATE-----\n"


def invoke(args: list[str]) -> Result:
    return runner.invoke(app, args, env={"IMAGEGEN_DEBUG": "", "COLUMNS": "200"})


def assert_reported(result: Result, code: int = 2, fragment: str = "") -> None:
    """Exit ``code``; stderr holds exactly one ``error:`` line and a ``hint:``; no traceback."""
    detail = f"exit {result.exit_code}\nstdout: {result.stdout}\nstderr: {result.stderr}"
    # CliRunner swallows an escaped exception (exit 1, no traceback printed): check it too.
    assert result.exception is None or isinstance(result.exception, SystemExit), repr(result.exception)
    assert result.exit_code == code, detail
    assert "Traceback" not in result.stdout + result.stderr, detail
    lines = result.stderr.splitlines()
    errors = [line for line in lines if line.startswith("error: ")]
    assert len(errors) == 1, detail
    assert any(line.startswith("hint: ") for line in lines), detail
    assert fragment in errors[0], detail
    assert result.stdout == "", detail  # nothing rendered, no partial result


def assert_json_error(result: Result, code: int = 2, fragment: str = "") -> None:
    """With --json: exactly one JSON document on stdout, the error with its hint and code."""
    assert result.exception is None or isinstance(result.exception, SystemExit), repr(result.exception)
    assert result.exit_code == code, result.output
    assert "Traceback" not in result.stdout + result.stderr
    doc = json.loads(result.stdout)
    assert set(doc) == {"error"} and set(doc["error"]) == {"message", "hint", "exit_code"}, doc
    assert doc["error"]["exit_code"] == code
    assert doc["error"]["hint"] and fragment in doc["error"]["message"], doc
    assert "error: " not in result.stderr  # the document is the report; no second one
