"""imagegen: render, build and verify container images of selected ops."""

from __future__ import annotations

__all__ = ["__version__"]

__version__ = "0.1.0"
