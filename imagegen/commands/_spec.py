"""Turning the shared image options into an ImageSpec (with its warnings printed once)."""

from __future__ import annotations

from imagegen import log
from imagegen.imagespec.spec import ImageSpec, SpecInput, build_spec


def make_spec(inp: SpecInput) -> ImageSpec:
    """Build and validate the spec from the command's option values (the cascade's, resolved once)."""
    spec = build_spec(inp)
    for warning in spec.warnings:
        log.warn(warning)
    return spec
