"""Show a build as it runs: every line in CI, a compact per-step view on a TTY."""

from __future__ import annotations

import os
import re
import sys
import time
from collections.abc import Mapping

from rich.console import Console
from rich.markup import escape
from rich.status import Status

from imagegen import settings
from imagegen.engine.log_lines import BK_HEADER, CLASSIC_STEP, strip_buildkit
from imagegen.engine.types import EngineKind

_BK_STATE = re.compile(r"^#\d+ (?:DONE|CACHED|ERROR|CANCELED)\b")
_BK_DIGEST = re.compile(r"^#\d+ sha256:[0-9a-f]+$")
_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")


def plain_output(env: Mapping[str, str] = os.environ) -> bool:
    return not sys.stderr.isatty() or env.get(settings.CI.name, "").strip().lower() in {"1", "true", "yes"}


class LogView:
    """Show the build as it runs: every line in CI, a compact per-step view on a TTY."""

    def __init__(self, kind: EngineKind, plain: bool) -> None:
        self.kind = kind
        self.plain = plain
        self.lines: list[str] = []
        self._step_started = time.monotonic()
        self._step_title: str | None = None
        self._status: Status | None = None
        if not plain:
            self._console = Console(file=sys.stderr, highlight=False)
            self._status = self._console.status("starting the build")
            self._status.start()

    def feed(self, raw: str) -> None:
        # The classic builder wraps a step's stderr in colour codes.
        for line in _ANSI.sub("", raw).splitlines():
            self.lines.append(line)
            self._show(line)

    def _show(self, line: str) -> None:
        if self.kind == "classic":
            self._classic_timing(line)
        if self.plain:
            print(line, file=sys.stderr, flush=True)
            return
        if _BK_DIGEST.match(line):
            return  # BuildKit's step digests say nothing to a person
        if self.kind == "classic":
            if CLASSIC_STEP.match(line):
                self._console.print(f"[bold]{escape(line)}[/bold]", no_wrap=True, overflow="ellipsis")
        elif BK_HEADER.match(line) or _BK_STATE.match(line):
            self._console.print(escape(line), no_wrap=True, overflow="ellipsis")
        text = strip_buildkit(line).strip()
        if text and self._status is not None:
            self._status.update(escape(text[: self._console.width - 4]))

    def _classic_timing(self, line: str) -> None:
        # The classic builder prints no timings; add one per step so slow steps show.
        m = CLASSIC_STEP.match(line)
        if not m:
            return
        now = time.monotonic()
        if self._step_title is not None:
            self._say(f"    ({now - self._step_started:.1f}s)")
        self._step_title, self._step_started = m.group(1), now

    def _say(self, text: str) -> None:
        if self.plain:
            print(text, file=sys.stderr, flush=True)
        else:
            self._console.print(f"[dim]{escape(text)}[/dim]")

    def close(self) -> None:
        if self.kind == "classic" and self._step_title is not None:
            self._say(f"    ({time.monotonic() - self._step_started:.1f}s)")
            self._step_title = None
        if self._status is not None:
            self._status.stop()
            self._status = None
