"""op_builder's build-log lines stay whole when ops build on several threads at once.

Ops compile on setuptools' thread pool, and both the tests and imagegen's build report read the
log line by line ("building op X", "built X in S"): two threads' lines must never share one."""

from __future__ import annotations

import io
import re
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from op_builder.setup_support import _say

THREADS, LINES = 4, 400
LINE = re.compile(r"op_builder: thread \d+ says line \d+")


@pytest.fixture
def frequent_switches() -> Iterator[None]:
    """Threads switched as often as the interpreter allows, so torn writes would show."""
    before = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    yield
    sys.setswitchinterval(before)


def test_lines_said_from_several_threads_stay_whole(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, frequent_switches: None
) -> None:
    log = tmp_path / "build.log"
    # stderr as Python makes it under PYTHONUNBUFFERED=1 (set in images and CI, and inherited by
    # pip's build): every write straight to the file, so a line written in two parts may be split.
    with io.TextIOWrapper(io.FileIO(log, "w"), encoding="utf-8", write_through=True) as stream:
        monkeypatch.setattr(sys, "stderr", stream)
        start = threading.Barrier(THREADS)

        def say_lines(thread: int) -> None:
            start.wait()
            for line in range(LINES):
                _say(f"thread {thread} says line {line}")

        threads = [threading.Thread(target=say_lines, args=(n,)) for n in range(THREADS)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    lines = log.read_text().splitlines()
    torn = [line for line in lines if not LINE.fullmatch(line)]
    assert not torn, f"{len(torn)} torn lines, such as {torn[:3]}"
    assert len(lines) == THREADS * LINES
