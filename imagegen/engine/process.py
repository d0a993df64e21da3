"""Run a docker CLI command, streaming its output to a view, and cancel it cleanly on Ctrl-C."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
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
        cancel_sessions([proc])
        raise


def _lines(stream: IO[bytes]) -> Iterator[str]:
    for raw in iter(stream.readline, b""):
        yield raw.decode("utf-8", "replace").rstrip("\n")


def cancel_sessions(procs: Sequence[subprocess.Popen[bytes]], grace_s: float = CANCEL_GRACE_S) -> None:
    """Cancel commands started in sessions of their own (``start_new_session``): SIGINT to each
    whole process group, SIGKILL to what is left after ``grace_s``; return once none of those
    processes is left. The group, not the process: ``docker buildx build`` runs its plugin
    (docker-buildx) as a child, which can outlive the CLI by a moment, and a caller that reports
    the build stopped must leave nothing still building."""
    for proc in procs:  # the session leader's pid is its group's id
        _signal_group(proc.pid, signal.SIGINT)
    deadline = time.monotonic() + grace_s
    for proc in procs:
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=max(0.1, deadline - time.monotonic()))
    for proc in procs:
        if not _group_gone(proc.pid, deadline):
            _signal_group(proc.pid, signal.SIGKILL)
            proc.wait()
            _group_gone(proc.pid, time.monotonic() + 2.0)


def _signal_group(group: int, sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(group, sig)


def _group_gone(group: int, deadline: float) -> bool:
    """Whether the group is empty by ``deadline`` (a zombie nobody reaps counts as still there)."""
    while True:
        try:
            os.killpg(group, 0)
        except ProcessLookupError:
            return True
        except PermissionError:  # another user's process took the id: ours are gone
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.05)
