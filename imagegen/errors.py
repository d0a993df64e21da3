"""Errors of the imagegen CLI, each owning its exit code.

Only the CLI entry point (``imagegen.cli.main``) turns these into process exits, so
library code raises and the user sees one message and a hint, never a traceback.
"""

from __future__ import annotations

from typing import ClassVar


class ImagegenError(Exception):
    """A problem the user can act on; ``exit_code`` is what the CLI exits with."""

    exit_code: ClassVar[int] = 1

    def __init__(self, message: str, hint: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint

    def to_json(self) -> dict[str, object]:
        """The ``{"error": ...}`` payload printed with ``--json``."""
        return {"error": {"message": self.message, "hint": self.hint, "exit_code": self.exit_code}}


class BadInputError(ImagegenError):
    """Unknown op, bad arch list, unsupported CUDA/torch combination, conflicting flags."""

    exit_code: ClassVar[int] = 2


class BuildFailedError(ImagegenError):
    """The image build failed (compiler error, missing base image, ...)."""

    exit_code: ClassVar[int] = 1


class VerificationFailedError(ImagegenError):
    """The image was built but an op did not load from its ahead-of-time module."""

    exit_code: ClassVar[int] = 1


class EngineUnavailableError(ImagegenError):
    """No container engine answers."""

    exit_code: ClassVar[int] = 3
