"""The shapes of build output lines, shared by the live display and the failure parser.

BuildKit's ``--progress=plain``: ``#8 12.3 text`` (a step's output), ``#8 [stage 1/3] RUN ...``
(its title), ``#8 DONE 0.4s`` / ``#8 CACHED`` (its end), ``#8 ERROR: why``. The classic
builder: ``Step 2/5 : RUN ...``, then the step's output as it is.
"""

from __future__ import annotations

import re

BK_OUTPUT = re.compile(r"^#(\d+) \d+(?:\.\d+)? (.*)$")
BK_HEADER = re.compile(r"^#(\d+) \[([^\]]+)\] (.*)$")
BK_ERROR = re.compile(r"^#(\d+) ERROR: (.*)$")
CLASSIC_STEP = re.compile(r"^Step \d+/\d+ : (.*)$")


def strip_buildkit(line: str) -> str:
    """A BuildKit output line without its ``#N seconds`` prefix; any other line as it is."""
    m = BK_OUTPUT.match(line)
    return m.group(2) if m else line
