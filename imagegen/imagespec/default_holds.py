"""Catalog defaults kept below the newest torch their target admits, on purpose, and why.

Data kept by a person beside the catalog: ``imagegen catalog --check-upstream`` reports a held
default as held, not missing, for as long as the hold's facts are still the catalog's and the
index's.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class DefaultHold:
    """A default kept below the newest release its target admits, on purpose.

    It holds only while the default is ``default`` and the newest admitted release ``newest``:
    a newer release, or a raised default, makes the choice a person's to make again.
    """

    default: str
    newest: str
    why: str


# `imagegen catalog --check-upstream` reports a hold as held, not missing (target name -> hold).
DEFAULT_HOLDS: dict[str, DefaultHold] = {
    "cpu": DefaultHold(
        "2.13.0",
        "2.15.0",
        "2.13.0 is the newest CPU build an image was verified with here: torch's x86-64 CPU "
        "wheels come only from its own CPU index, which the machines that verify the catalog cannot reach",
    ),
}
