"""Op packages in images: which files of a package an image is built from, and their digest.

An image's build context holds each package at ``_imagegen/op-sources/<package>/`` (staged by
``imagegen build``); the build stage copies them to ``/opt/op-sources`` and builds their ops
with ``DS_OP_SOURCES`` pointing there, and the runtime keeps them (the fronts and self-tests
are Python the image runs). Only what a build needs is staged: caches, build outputs and VCS
folders never are, nor anything the package's own ``.dockerignore`` excludes. The digest of
exactly those files names the package in the image's labels and tag.
"""

from __future__ import annotations

import fnmatch
import hashlib
import os
import shutil
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from imagegen.errors import BadInputError
from op_builder.op_sources import check_package_dir
from op_builder.registry import Registry, registry_for

STAGED_DIR = "_imagegen/op-sources"
IMAGE_DIR = "/opt/op-sources"
IGNORE_FILE = ".dockerignore"
_ALWAYS_EXCLUDED = (
    "__pycache__",
    "*.pyc",
    "*.so",
    "*.o",
    "build",
    "dist",
    "*.egg-info",
    ".git",
    ".venv",
    ".pytest_cache",
    ".mypy_cache",
    ".ruff_cache",
    IGNORE_FILE,
)


@dataclass(frozen=True)
class OpPackage:
    """One op package an image is built with."""

    name: str  # its import name, and its folder's
    root: Path
    ops: tuple[str, ...]  # its ops, in registry order
    files: tuple[str, ...]  # what is staged, POSIX paths relative to root, sorted
    digest: str  # "sha256:<hex>" over those files' names and bytes

    @property
    def reference(self) -> str:
        """``name=sha256:...``: how the labels and the default tag name the package's sources."""
        return f"{self.name}={self.digest}"

    @property
    def image_path(self) -> str:
        return f"{IMAGE_DIR}/{self.name}"

    @property
    def staged_path(self) -> str:
        return f"{STAGED_DIR}/{self.name}"

    def stage(self, context: Path) -> None:
        """Copy the package's files into the build context ``context``."""
        for relative in self.files:
            target = context / self.staged_path / relative
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(self.root / relative, target)


def resolve_packages(dirs: Sequence[str | Path]) -> tuple[Registry, tuple[OpPackage, ...]]:
    """The registry with these packages' ops, and each package; BadInputError when one is not usable."""
    roots = tuple(dict.fromkeys(check_package_dir(Path(d)) for d in dirs))
    by_name: dict[str, Path] = {}
    for root in roots:
        if root.name in by_name:
            raise BadInputError(
                f"two op packages are named {root.name!r}: {by_name[root.name]} and {root}",
                hint="an image imports each package by its folder's name: rename one",
            )
        by_name[root.name] = root
    registry = registry_for(roots)
    packages = []
    for root in roots:
        ops = tuple(name for name, origin in registry.origins.items() if origin.root == root)
        files = package_files(root)
        packages.append(OpPackage(root.name, root, ops, files, files_digest(root, files)))
    return registry, tuple(packages)


def package_files(root: Path) -> tuple[str, ...]:
    """The files of the package at ``root`` that a build needs, sorted."""
    patterns = [*_ALWAYS_EXCLUDED, *_ignore_patterns(root / IGNORE_FILE)]
    found: list[PurePosixPath] = []
    # An excluded folder (a .git, a venv, build outputs) is not walked into at all.
    for folder, dirs, files in os.walk(root):
        base = PurePosixPath(Path(folder).relative_to(root).as_posix())
        dirs[:] = [d for d in dirs if not _excluded(base / d, patterns)]
        for name in files:
            relative = base / name
            if not (Path(folder, name).is_symlink() or _excluded(relative, patterns)):
                found.append(relative)
    return tuple(str(p) for p in sorted(found))  # path order (by parts), as the digest has it


def files_digest(root: Path, files: Sequence[str]) -> str:
    digest = hashlib.sha256()
    for relative in files:
        digest.update(relative.encode() + b"\0")
        digest.update(hashlib.sha256((root / relative).read_bytes()).digest())
    return "sha256:" + digest.hexdigest()


def _ignore_patterns(path: Path) -> list[str]:
    """The patterns of a .dockerignore-style file: one per line, # comments; no ! exceptions."""
    if not path.is_file():
        return []
    lines = (line.strip() for line in path.read_text(encoding="utf-8").splitlines())
    return [line.strip("/") for line in lines if line and not line.startswith(("#", "!"))]


def _excluded(relative: PurePosixPath, patterns: Sequence[str]) -> bool:
    """A path is excluded when a pattern matches it whole, or matches any folder it sits in."""
    text = str(relative)
    prefixes = ["/".join(relative.parts[: i + 1]) for i in range(len(relative.parts))]
    for pattern in patterns:
        if "/" in pattern:
            if any(fnmatch.fnmatchcase(p, pattern) for p in prefixes):
                return True
        elif any(fnmatch.fnmatchcase(part, pattern) for part in relative.parts) or fnmatch.fnmatchcase(
            text, pattern
        ):
            return True
    return False
