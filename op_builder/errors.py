"""Errors raised by the op build system.

Every error carries the exit code the command-line front uses for it and an
optional hint, so the one place that exits (``op_builder.__main__``) can print a
clear message instead of a traceback.
"""

from __future__ import annotations


class OpBuilderError(Exception):
    """Base class: a problem the user can act on."""

    exit_code = 1

    def __init__(self, message: str, hint: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint


class BadInputError(OpBuilderError):
    """Unknown op, malformed arch list, bad environment value."""

    exit_code = 2


class UnknownOpError(BadInputError):
    """A name that is not in ``ALL_OPS``."""


class ArchError(BadInputError):
    """An arch list that cannot be parsed or that the toolkit cannot build."""


class ToolchainError(OpBuilderError):
    """A compiler, toolkit or library the build needs is missing or mismatched."""

    exit_code = 2


class OpLoadError(OpBuilderError):
    """An op could not be imported (not installed, JIT disabled, build failed)."""

    exit_code = 1
