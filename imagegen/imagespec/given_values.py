"""Checks of what was given, before the catalog or a parser reads it: each raises one
``BadInputError`` with a hint (exit 2).

A version longer than any release (``--torch``, ``--cuda``, ``--rocm``, ``--python``, from a flag,
an ``IMAGEGEN_*`` variable or ``--platform-torch``) is refused by its length: a few thousand digits
would otherwise reach ``int`` through ``packaging``, which refuses more than 4300 digits with a
ValueError (Python's int-string conversion limit), and a message would quote all of them. And
options that only one builder reads are refused with the other (``--build-platform`` with the
classic builder), rather than dropped without a word.
"""

from __future__ import annotations

from typing import Protocol

from imagegen.errors import BadInputError

# The longest version imagegen reads is a torch release, X.Y.Z with parts of a few digits; a
# value of more characters is no version of anything it knows.
MAX_VERSION_CHARS = 32

# (field, what it is, the flags and variable it comes from, the form it takes)
_VERSIONS = (
    ("cuda", "CUDA version", "--cuda", "MAJOR.MINOR, e.g. 12.4"),
    ("rocm", "ROCm version", "--rocm", "MAJOR.MINOR, e.g. 6.2"),
    ("python", "Python version", "--python or IMAGEGEN_PYTHON", "MAJOR.MINOR, e.g. 3.11"),
    ("torch", "torch release", "--torch, --platform-torch or IMAGEGEN_TORCH", "X.Y or X.Y.Z, e.g. 2.5.1"),
)


class GivenValues(Protocol):
    """What these checks read of ``SpecInput`` (its fields after the cascade)."""

    @property
    def cuda(self) -> str | None: ...
    @property
    def rocm(self) -> str | None: ...
    @property
    def python(self) -> str | None: ...
    @property
    def torch(self) -> str | None: ...


def shown(value: str, limit: int = 40) -> str:
    """``value`` quoted as a message shows it: whole up to ``limit`` characters, else its start
    and its length."""
    if len(value) <= limit:
        return repr(value)
    return f"{value[: limit - 16]!r}... ({len(value)} characters)"


def versions(values: GivenValues) -> None:
    """Bad input for a version too long to be one."""
    for name, what, source, form in _VERSIONS:
        value = getattr(values, name)
        if value is not None and len(value.strip()) > MAX_VERSION_CHARS:
            raise BadInputError(
                f"{shown(value.strip())} is not a {what}: none is longer than {MAX_VERSION_CHARS} characters",
                hint=f"give {source} as {form}",
            )


def build_platform(given: str | None, chosen: str, platform: str, buildkit: bool) -> None:
    """Bad input for ``--build-platform`` naming another platform than the image's (``chosen``,
    the name checked) without BuildKit: only BuildKit runs stages on another platform, and the
    classic builder, which runs every stage on ``platform``, would ignore it without a word."""
    if given is None or buildkit or chosen == platform:
        return
    raise BadInputError(
        f"--build-platform {chosen} with --no-buildkit: only BuildKit runs the devel and build stages "
        f"on another platform than the image's ({platform}); the classic builder would ignore it",
        hint="drop --no-buildkit (or IMAGEGEN_BUILDKIT=0) to cross-compile, or drop --build-platform "
        f"(or IMAGEGEN_BUILD_PLATFORM) to build every stage on {platform}",
    )
