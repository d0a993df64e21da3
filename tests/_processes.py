"""The processes still running that name something: what a cancelled build must not leave."""

from __future__ import annotations

import os
from pathlib import Path


def processes_mentioning(text: str) -> list[int]:
    """The pids (this one's aside) whose command line holds ``text`` (a build left running would)."""
    found = []
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            if text.encode() in cmdline.read_bytes():
                found.append(int(cmdline.parent.name))
        except OSError:  # the process ended meanwhile
            continue
    return [pid for pid in found if pid != os.getpid()]
