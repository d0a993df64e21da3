"""Turning the shared image options into an ImageSpec (with its warnings printed once)."""

from __future__ import annotations

import os

from imagegen import log
from imagegen.imagespec.spec import ImageSpec, SpecInput, build_spec


def make_spec(inp: SpecInput) -> ImageSpec:
    """Build and validate the spec from the command's option values and the process environment."""
    spec = build_spec(inp, os.environ)
    for warning in spec.warnings:
        log.warn(warning)
    return spec
