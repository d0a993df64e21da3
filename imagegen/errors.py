"""Errors of imagegen, each owning its exit code.

They share op_builder's root (``UserFacingError``), and ``BadInputError`` is the same
class in both packages, so an unknown op reported by op_builder and a bad flag reported
by imagegen are one kind of error. Only the CLI entry point (``imagegen.cli``) turns them
into process exits: 0 ok, 1 build or verification failed (or the catalog is behind its
upstream), 2 bad input, 3 no engine (or no package index to check the catalog against).
"""

from __future__ import annotations

from typing import ClassVar

from op_builder.errors import BadInputError, UserFacingError

__all__ = [
    "BadInputError",
    "BuildFailedError",
    "CatalogBehindError",
    "EngineUnavailableError",
    "ImagegenError",
    "IndexUnreachableError",
    "InterruptedByUser",
    "TerminatedBySignal",
    "UserFacingError",
    "VerificationFailedError",
]


class ImagegenError(UserFacingError):
    """A failure of imagegen's own work (building, verifying, talking to the engine).

    ``reported=True``: the command has already printed its whole answer (the JSON document
    of a failed verification, a stale matrix, doctor's findings), which says what went wrong;
    the CLI then only exits with the error's code and prints nothing more.
    """

    def __init__(self, message: str, hint: str | None = None, *, reported: bool = False) -> None:
        super().__init__(message, hint)
        self.reported = reported


class BuildFailedError(ImagegenError):
    """The image build failed (compiler error, missing base image, ...)."""

    exit_code: ClassVar[int] = 1


class VerificationFailedError(ImagegenError):
    """The image was built but an op did not pass verification."""

    exit_code: ClassVar[int] = 1


class EngineUnavailableError(ImagegenError):
    """No container engine answers."""

    exit_code: ClassVar[int] = 3


class IndexUnreachableError(ImagegenError):
    """The package index the catalog is checked against cannot be read."""

    exit_code: ClassVar[int] = 3


class CatalogBehindError(ImagegenError):
    """The upstream check found releases the catalog lacks (already reported)."""

    exit_code: ClassVar[int] = 1


class InterruptedByUser(ImagegenError):
    """Ctrl-C (SIGINT) stopped the command; 128 + SIGINT, as shells report it."""

    exit_code: ClassVar[int] = 130


class TerminatedBySignal(InterruptedByUser):
    """SIGTERM (a CI timeout, a cancelled job, ``timeout``) stopped the command; 128 + SIGTERM."""

    exit_code: ClassVar[int] = 143
