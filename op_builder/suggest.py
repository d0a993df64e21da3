"""'Did you mean' suggestions for misspelt names."""

from __future__ import annotations

import difflib
from collections.abc import Iterable


def closest(name: str, choices: Iterable[str], count: int = 3) -> list[str]:
    """The choices nearest to ``name`` (compared case-insensitively), best first."""
    by_lower = {c.lower(): c for c in choices}
    matches = difflib.get_close_matches(name.lower(), list(by_lower), n=count, cutoff=0.6)
    return [by_lower[m] for m in matches]


def did_you_mean(name: str, choices: Iterable[str]) -> str | None:
    """A hint such as ``did you mean 'cpu_adam'?``, or None when nothing is close."""
    matches = closest(name, choices)
    if not matches:
        return None
    return "did you mean " + " or ".join(repr(m) for m in matches) + "?"
