"""Printing results (stdout) and errors (stderr, or JSON on stdout with --json)."""

from __future__ import annotations

import json
import sys
from typing import Any

from rich.console import Console

from imagegen.errors import UserFacingError


def emit_json(data: Any) -> None:
    """One JSON document on stdout: the whole output of a command run with --json."""
    sys.stdout.write(json.dumps(data, indent=2) + "\n")
    sys.stdout.flush()


def console() -> Console:
    """Results go to stdout (progress and logs go to stderr through imagegen.log)."""
    return Console(file=sys.stdout, highlight=False, soft_wrap=True)


def report_error(exc: UserFacingError, as_json: bool) -> None:
    """The one clear message (and hint) a user sees instead of a traceback."""
    if as_json:
        emit_json(exc.to_json())
        return
    print(f"error: {exc.message}", file=sys.stderr)
    if exc.hint:
        indented = exc.hint.replace("\n", "\n  ")
        print(f"hint: {indented}", file=sys.stderr)
    sys.stderr.flush()
