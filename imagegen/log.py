"""Step headers with timings, info and warning lines — all on stderr.

stdout is reserved for results (``--json`` output, rendered Dockerfiles), so every
progress line goes to stderr. On a TTY the lines are styled with rich; when stderr is
not a TTY or ``CI`` is set, they are plain text so CI logs stay readable.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager

from rich.console import Console

from imagegen import settings
from imagegen.terminal import CleanConsole, clean


def _plain(env: Mapping[str, str], stream_is_tty: bool) -> bool:
    ci = env.get(settings.CI.name, "").strip().lower()
    return not stream_is_tty or ci in {"1", "true", "yes"}


def _console() -> Console:
    # Built per call (cheap) so tests that swap sys.stderr and env see the change.
    plain = _plain(os.environ, sys.stderr.isatty())
    return CleanConsole(
        file=sys.stderr,
        no_color=plain,
        highlight=False,
        soft_wrap=True,
        force_terminal=False if plain else None,
    )


def _emit(markup: str, plain_text: str) -> None:
    if _plain(os.environ, sys.stderr.isatty()):
        print(clean(plain_text), file=sys.stderr, flush=True)
    else:
        _console().print(markup)


def info(msg: str) -> None:
    """One informational line."""
    _emit(f"[dim]·[/dim] {_escape(msg)}", f"  {msg}")


def warn(msg: str) -> None:
    """One warning line, prefixed so it stands out in plain logs."""
    _emit(f"[bold yellow]warning:[/bold yellow] {_escape(msg)}", f"warning: {msg}")


def _escape(msg: str) -> str:
    from rich.markup import escape

    return escape(msg)


def _fmt(seconds: float) -> str:
    if seconds < 60:
        return f"{seconds:.1f}s"
    minutes, secs = divmod(round(seconds), 60)
    return f"{minutes}m{secs:02d}s"


@contextmanager
def step(title: str) -> Iterator[None]:
    """Print ``title`` as a step header, run the block, then print its elapsed time.

    The end line says ``failed`` when the block raises, so a log shows where time went
    even for a failing build.
    """
    _emit(f"[bold cyan]==>[/bold cyan] [bold]{_escape(title)}[/bold]", f"==> {title}")
    start = time.monotonic()
    try:
        yield
    except BaseException:
        elapsed = _fmt(time.monotonic() - start)
        _emit(
            f"[red]<== {_escape(title)}: failed after {elapsed}[/red]", f"<== {title}: failed after {elapsed}"
        )
        raise
    elapsed = _fmt(time.monotonic() - start)
    _emit(f"[green]<==[/green] {_escape(title)}: done in {elapsed}", f"<== {title}: done in {elapsed}")
