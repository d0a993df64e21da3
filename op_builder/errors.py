"""The one error root of the distribution, and op_builder's errors.

Every error a user can act on derives from ``UserFacingError``, which owns its exit code
and an optional hint. imagegen's errors derive from it too, so a user sees one kind of
error whichever layer raised it, and only the two entry points (``python -m op_builder``
and the ``imagegen`` CLI) turn errors into exits: 0 ok, 1 failed, 2 bad input, 3 no engine.
"""

from __future__ import annotations

from typing import ClassVar


class UserFacingError(Exception):
    """Root of every error the entry points report as one message and a hint."""

    exit_code: ClassVar[int] = 1

    def __init__(self, message: str, hint: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint

    def to_json(self) -> dict[str, object]:
        """The ``{"error": ...}`` payload printed with ``--json``."""
        return {"error": {"message": self.message, "hint": self.hint, "exit_code": self.exit_code}}


class BadInputError(UserFacingError):
    """Unknown op, malformed arch list, bad environment value, conflicting options.

    One class for both packages: imagegen re-exports it.
    """

    exit_code: ClassVar[int] = 2


class OpBuilderError(UserFacingError):
    """Base class of op_builder's own failures (public: ``except OpBuilderError`` catches them)."""


class UnknownOpError(BadInputError, OpBuilderError):
    """A name that is not in ``ALL_OPS``."""


class ArchError(BadInputError, OpBuilderError):
    """An arch list that cannot be parsed or that the toolkit cannot build."""


class ToolchainError(OpBuilderError):
    """A compiler, toolkit or library the build needs is missing or mismatched."""

    exit_code: ClassVar[int] = 2


class OpLoadError(OpBuilderError):
    """An op could not be imported (not installed, JIT disabled, build failed)."""

    exit_code: ClassVar[int] = 1
