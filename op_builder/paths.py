"""Where the distribution's files are: a leaf module every other one may import.

``PACKAGE_ROOT`` holds ``op_builder/`` and ``kernels/`` side by side, in a checkout and in an
installed wheel (our ops' sources ship as package data in their folders under ``kernels/``).
"""

from __future__ import annotations

from pathlib import Path

PACKAGE_ROOT = Path(__file__).resolve().parent.parent
MANIFEST_RELPATH = Path("kernels", "_ops", "manifest.json")
