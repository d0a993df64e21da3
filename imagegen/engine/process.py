"""Run a docker CLI command, streaming its output to a view, and cancel it cleanly on Ctrl-C."""

from __future__ import annotations

import contextlib
import signal
import subprocess
from collections.abc import Iterator, Mapping, Sequence
from typing import IO

from imagegen.engine.client import ENSURE_DOCKER_HINT
from imagegen.engine.progress import LogView
from imagegen.errors import EngineUnavailableError

# Seconds a cancelled docker CLI gets to stop its build before it is killed.
CANCEL_GRACE_S = 15.0


def stream_process(argv: Sequence[str], env: Mapping[str, str], view: LogView) -> int:
    """Run ``argv``, feeding its merged output to ``view``; on Ctrl-C cancel it, then re-raise.

    The child gets its own session so a terminal's Ctrl-C reaches only us: we then send it
    SIGINT ourselves (the docker CLI cancels the build, and BuildKit stops its step
    containers), wait a little, and kill it if it lingers.
    """
    try:
        proc = subprocess.Popen(
            list(argv),
            env=dict(env),
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
    except OSError as exc:
        raise EngineUnavailableError(f"cannot run {argv[0]}: {exc}", hint=ENSURE_DOCKER_HINT) from exc
    assert proc.stdout is not None
    try:
        for raw in _lines(proc.stdout):
            view.feed(raw)
        return proc.wait()
    except BaseException:
        _cancel(proc)
        raise


def _lines(stream: IO[bytes]) -> Iterator[str]:
    for raw in iter(stream.readline, b""):
        yield raw.decode("utf-8", "replace").rstrip("\n")


def _cancel(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is not None:
        return
    with contextlib.suppress(ProcessLookupError):
        proc.send_signal(signal.SIGINT)
    try:
        proc.wait(timeout=CANCEL_GRACE_S)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
