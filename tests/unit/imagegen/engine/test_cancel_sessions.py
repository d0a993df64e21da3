"""``imagegen.engine.process.cancel_sessions``: a cancelled command's whole process group is gone
when it returns, not only the command: ``docker buildx build`` runs its plugin as a child that can
outlive the CLI by a moment (a SIGTERM test once found it still building). Real processes: a
leader that exits at SIGINT and a child in its group that takes a moment to, or never does."""

from __future__ import annotations

import subprocess
import sys
import time
import uuid

from imagegen.engine.process import cancel_sessions
from tests._processes import processes_mentioning

# The leader starts the child (same process group, same stdout), says so, and exits at SIGINT;
# the child, at SIGINT, takes LINGER seconds to exit, or ignores it when LINGER is "never".
LEADER = """
import signal, subprocess, sys
child = subprocess.Popen([sys.executable, "-c", sys.argv[1], sys.argv[2], sys.argv[3]])
print("leader ready", flush=True)
signal.sigwait([signal.SIGINT])
"""
CHILD = """
import signal, sys, time
def stop(*_):
    if sys.argv[2] == "never":
        return
    time.sleep(float(sys.argv[2]))
    sys.exit(0)
signal.signal(signal.SIGINT, stop)
print("child ready", flush=True)
while True:
    time.sleep(0.05)
"""


def _start(linger: str) -> tuple[subprocess.Popen[bytes], str]:
    marker = f"cancel-test-{uuid.uuid4().hex}"
    leader = subprocess.Popen(
        [sys.executable, "-c", LEADER, CHILD, marker, linger],
        stdout=subprocess.PIPE,
        start_new_session=True,
    )
    assert leader.stdout is not None
    # Both have said so (the child once its SIGINT handler is in place), in either order.
    assert sorted(leader.stdout.readline() for _ in range(2)) == [b"child ready\n", b"leader ready\n"]
    return leader, marker


def test_a_child_that_outlives_its_leader_is_waited_for() -> None:
    leader, marker = _start("1.0")
    started = time.monotonic()
    cancel_sessions([leader], grace_s=10)
    assert time.monotonic() - started >= 0.9  # it waited for the child's second
    assert leader.returncode is not None
    assert processes_mentioning(marker) == []


def test_a_child_that_ignores_the_cancel_is_killed_after_the_grace() -> None:
    leader, marker = _start("never")
    started = time.monotonic()
    cancel_sessions([leader], grace_s=1.0)
    assert time.monotonic() - started < 8
    assert processes_mentioning(marker) == []
