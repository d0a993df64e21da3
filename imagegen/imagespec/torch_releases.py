"""The torch releases imagegen knows, and the Python versions each minor publishes wheels for.

Data only, kept by hand from the releases published on PyPI (``imagegen catalog
--check-upstream`` names a release this list lacks; it never edits it).
"""

from __future__ import annotations

# Every torch release (latest patch first within a minor is not needed: we list them all).
TORCH_RELEASES: tuple[str, ...] = (
    "2.0.0", "2.0.1",
    "2.1.0", "2.1.1", "2.1.2",
    "2.2.0", "2.2.1", "2.2.2",
    "2.3.0", "2.3.1",
    "2.4.0", "2.4.1",
    "2.5.0", "2.5.1",
    "2.6.0",
    "2.7.0", "2.7.1",
    "2.8.0",
    "2.9.0", "2.9.1",
    "2.10.0",
    "2.11.0",
    "2.12.0", "2.12.1",
    "2.13.0",
    "2.14.0", "2.14.1",
    "2.15.0",
)  # fmt: skip

# Python versions each torch minor publishes wheels for: (oldest, newest).
TORCH_PYTHONS: dict[str, tuple[str, str]] = {
    "2.0": ("3.8", "3.11"),
    "2.1": ("3.8", "3.11"),
    "2.2": ("3.8", "3.12"),
    "2.3": ("3.8", "3.12"),
    "2.4": ("3.8", "3.12"),
    "2.5": ("3.9", "3.13"),
    "2.6": ("3.9", "3.13"),
    "2.7": ("3.9", "3.13"),
    "2.8": ("3.9", "3.13"),
    "2.9": ("3.10", "3.14"),
    "2.10": ("3.10", "3.14"),
    "2.11": ("3.10", "3.14"),
    "2.12": ("3.10", "3.14"),
    "2.13": ("3.10", "3.14"),
    "2.14": ("3.10", "3.14"),
    "2.15": ("3.10", "3.14"),
}
