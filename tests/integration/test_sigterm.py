"""SIGTERM (what CI timeouts, job cancellation and `timeout` send) stops `imagegen` as Ctrl-C does:
exit 143, one message (a JSON error under --json), and nothing left behind: no verify container,
no staged build context, no docker CLI still building. Ctrl-C under --json prints its JSON error.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests._processes import processes_mentioning
from tests.integration.conftest import REPO, STANDIN_RUNTIME, build_args, verify_containers
from tests.integration.derived import derive

pytestmark = [pytest.mark.docker, pytest.mark.timeout(900)]

SLOW_VERIFIER = "imagegen-it/slow-verifier:latest"
BUILD_TAG = "imagegen-it/terminated:1"


@pytest.fixture(scope="module")
def slow_verifier(docker_client: Any) -> Iterator[str]:
    """An image whose `python` waits ten minutes: its verify container is there to be left behind."""
    path = "/usr/local/bin/python"
    derive(docker_client, SLOW_VERIFIER, STANDIN_RUNTIME, {path: b"#!/bin/sh\nexec sleep 600\n"}, {},
           executable=(path,))  # fmt: skip
    yield SLOW_VERIFIER
    docker_client.images.remove(SLOW_VERIFIER, force=True)


def _verify_containers(client: Any) -> list[str]:
    return verify_containers(client, SLOW_VERIFIER)


def _default_sigint() -> None:
    # A shell that starts the tests in the background has them ignore SIGINT, which exec keeps.
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def _stop_when(
    args: list[str], ready: Callable[[], bool], sig: signal.Signals, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """Run `imagegen ARGS`, send ``sig`` once ``ready()``, and return how it ended."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "imagegen", *args],
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO), "CI": "true", "IMAGEGEN_DEBUG": "", **(env or {})},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=_default_sigint,
    )
    try:
        deadline = time.monotonic() + 300
        while not ready():
            assert proc.poll() is None, f"imagegen ended before it could be stopped: {proc.communicate()}"
            assert time.monotonic() < deadline, "what the test waits for never came"
            time.sleep(0.02)
        proc.send_signal(sig)
        stdout, stderr = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    return subprocess.CompletedProcess(proc.args, proc.returncode, stdout, stderr)


def _one_error_line(done: subprocess.CompletedProcess[str], words: str) -> None:
    assert "Traceback" not in done.stderr, done.stderr
    errors = [line for line in done.stderr.splitlines() if line.startswith("error: ")]
    assert len(errors) == 1 and words in errors[0], done.stderr[-3000:]
    assert "\nhint: " in done.stderr


def _json_error(done: subprocess.CompletedProcess[str], code: int) -> None:
    assert "Traceback" not in done.stderr, done.stderr
    error = json.loads(done.stdout)["error"]
    assert error["exit_code"] == code and error["message"] and error["hint"], error
    assert "error: " not in done.stderr


@pytest.mark.parametrize("as_json", [False, True])
def test_sigterm_during_verify_leaves_no_container(
    slow_verifier: str, docker_client: Any, as_json: bool
) -> None:
    assert _verify_containers(docker_client) == []
    args = ["verify", slow_verifier, *(["--json"] if as_json else [])]
    done = _stop_when(args, lambda: bool(_verify_containers(docker_client)), signal.SIGTERM)
    assert done.returncode == 143, done.stderr[-3000:]
    if as_json:
        _json_error(done, 143)
    else:
        _one_error_line(done, "SIGTERM")
    assert _verify_containers(docker_client) == []


def test_ctrl_c_under_json_prints_an_error_document(slow_verifier: str, docker_client: Any) -> None:
    done = _stop_when(
        ["verify", slow_verifier, "--json"], lambda: bool(_verify_containers(docker_client)), signal.SIGINT
    )
    assert done.returncode == 130, done.stderr[-3000:]
    _json_error(done, 130)
    assert _verify_containers(docker_client) == []


def test_sigterm_during_a_build_leaves_no_staged_context(docker_ready: None, tmp_path: Path) -> None:
    # The context (the checkout's sources, the torch wheel, the CA bundle) is staged in a slot
    # under XDG_CACHE_HOME: SIGTERM as soon as anything is there, while it is being staged or sent.
    slots = tmp_path / "imagegen" / "contexts"

    def staging() -> bool:
        return any(slot.is_dir() and any(slot.iterdir()) for slot in slots.glob("slot-*"))

    done = _stop_when(build_args(BUILD_TAG), staging, signal.SIGTERM, env={"XDG_CACHE_HOME": str(tmp_path)})
    assert done.returncode == 143, done.stderr[-3000:]
    _json_error(done, 143)  # build_args asks for --json
    left = [p for slot in slots.glob("slot-*") if slot.is_dir() for p in slot.iterdir()]
    assert not left, f"the staged context was left behind: {left[:5]}"
    # The docker CLI runs in its own session, so SIGTERM reached only imagegen: it stopped it.
    assert not processes_mentioning(BUILD_TAG)
