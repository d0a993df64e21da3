"""Ctrl-C and SIGTERM stop a command the same way: its cleanup runs, one message, exit 130 / 143.

Real signals to a real `imagegen` process, whose verify step is replaced by one that waits (and
cleans up, slowly, when stopped), so no engine is needed; tests/integration sends the same
signals to real verify containers and builds.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[4]

# The CLI with a verify step (and no proof to check) that says when it waits, and cleans up
# for a second when stopped.
CHILD = """
import sys, time
from imagegen.verify import container as verify

def verify_image(*args, **kwargs):
    try:
        print("waiting", file=sys.stderr, flush=True)
        time.sleep(60)
    finally:
        print("cleaning up", file=sys.stderr, flush=True)
        time.sleep(1)
        print("cleaned up", file=sys.stderr, flush=True)

verify.verify_image = verify_image
# The proof is checked before the ops; this image has none to check.
from imagegen.proof import image_proof
image_proof.check_image = lambda *args, **kwargs: None
sys.argv = ["imagegen", *sys.argv[1:]]
from imagegen.cli import main
main()
"""


def _stopped(sig: signal.Signals, *args: str, again: bool = False) -> subprocess.CompletedProcess[str]:
    proc = subprocess.Popen(
        [sys.executable, "-c", CHILD, "verify", "imagegen-test/any:1", *args],
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO), "IMAGEGEN_DEBUG": "", "CI": "true"},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        # A shell that starts tests in the background has them ignore SIGINT, which exec keeps.
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    assert proc.stderr is not None
    try:
        assert proc.stderr.readline() == "waiting\n"
        proc.send_signal(sig)
        if again:  # once the cleanup has begun
            assert proc.stderr.readline() == "cleaning up\n"
            proc.send_signal(sig)
        stdout, stderr = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    return subprocess.CompletedProcess(proc.args, proc.returncode, stdout, stderr)


@pytest.mark.parametrize(
    ("sig", "code", "words"), [(signal.SIGTERM, 143, "SIGTERM"), (signal.SIGINT, 130, "Ctrl-C")]
)
def test_a_signal_runs_the_cleanup_and_says_so_once(sig: signal.Signals, code: int, words: str) -> None:
    done = _stopped(sig)
    assert done.returncode == code, done.stderr
    assert "Traceback" not in done.stderr and "cleaned up" in done.stderr
    errors = [line for line in done.stderr.splitlines() if line.startswith("error: ")]
    assert len(errors) == 1 and words in errors[0], done.stderr
    assert "\nhint: " in done.stderr and done.stdout == ""


@pytest.mark.parametrize(("sig", "code"), [(signal.SIGTERM, 143), (signal.SIGINT, 130)])
def test_under_json_the_stop_is_one_error_document(sig: signal.Signals, code: int) -> None:
    done = _stopped(sig, "--json")
    assert done.returncode == code, done.stderr
    error = json.loads(done.stdout)["error"]
    assert error["exit_code"] == code and error["message"] and error["hint"]
    assert "error: " not in done.stderr and "Traceback" not in done.stderr


def test_a_second_sigterm_does_not_cut_the_cleanup() -> None:
    done = _stopped(signal.SIGTERM, again=True)
    assert done.returncode == 143, done.stderr
    assert "cleaned up" in done.stderr and "Traceback" not in done.stderr
