"""Where the distribution's files are: a leaf module every other one may import.

Op sources live under ``kernels/csrc`` beside ``op_builder/``, both in a checkout and in an
installed wheel (sources ship as package data).
"""

from __future__ import annotations

from pathlib import Path

PACKAGE_ROOT = Path(__file__).resolve().parent.parent
CSRC = PACKAGE_ROOT / "kernels" / "csrc"
MANIFEST_RELPATH = Path("kernels", "_ops", "manifest.json")
