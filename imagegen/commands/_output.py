"""Printing results (stdout) and errors (stderr, or JSON on stdout with --json).

Both are the edge where text reaches a terminal: the result console and the error report pass
what they print through ``imagegen.terminal.clean`` (no control character but newline and tab,
no URL's password), whatever a registry, an image or a user put in it.
"""

from __future__ import annotations

import json
import sys
from typing import Any

from rich.console import Console

from imagegen.errors import UserFacingError
from imagegen.terminal import CleanConsole, clean, clean_document, redact_document


def emit_json(data: Any) -> None:
    """One JSON document on stdout: the whole output of a command run with --json."""
    sys.stdout.write(json.dumps(redact_document(data), indent=2) + "\n")
    sys.stdout.flush()


def console() -> Console:
    """Results go to stdout (progress and logs go to stderr through imagegen.log)."""
    return CleanConsole(file=sys.stdout, highlight=False, soft_wrap=True)


def report_error(exc: UserFacingError, as_json: bool) -> None:
    """The one clear message (and hint) a user sees instead of a traceback."""
    if as_json:
        emit_json(clean_document(exc.to_json()))
        return
    print(f"error: {clean(exc.message)}", file=sys.stderr)
    if exc.hint:
        indented = clean(exc.hint).replace("\n", "\n  ")
        print(f"hint: {indented}", file=sys.stderr)
    sys.stderr.flush()
