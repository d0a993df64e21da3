"""The digest of each op's sources, from the staged build context (pure but for reading files).

The build stage compiles from ``/src`` (our sources: the Dockerfile template's WORKDIR) and
``/opt/op-sources`` (op packages), which the manifest's ``sources`` and ``include_dirs`` name;
the staged context holds the same files at the repository root and at ``_imagegen/op-sources``.
An op's digest is the sha256 of the sorted lines ``<sha256>  <path>`` of its source files and of
every file under its include folders: any change to what it was compiled from changes it.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from imagegen.imagespec.op_packages import IMAGE_DIR, STAGED_DIR

# Where the build stage's sources are (Dockerfile.j2: WORKDIR /src, COPY op_builder/ kernels/).
BUILD_SOURCE_DIR = "/src"
# Staged files that are not sources: the wheelhouse (hundreds of MB of wheels) and the CA.
_NOT_SOURCES = ("_imagegen/wheelhouse/", "_imagegen/ca.crt")


def context_digests(context: Path) -> dict[str, str]:
    """sha256 of each file of the staged context, by POSIX path relative to it."""
    digests = {}
    for path in sorted(context.rglob("*")):
        relative = path.relative_to(context).as_posix()
        if not path.is_file() or path.is_symlink() or relative.startswith(_NOT_SOURCES):
            continue
        if "__pycache__" in path.parts:
            continue
        digests[relative] = hashlib.sha256(path.read_bytes()).hexdigest()
    return digests


def staged_path(build_path: str) -> str | None:
    """Where a build-stage path is in the staged context; None for a path outside the sources."""
    for prefix, staged in ((BUILD_SOURCE_DIR + "/", ""), (IMAGE_DIR + "/", STAGED_DIR + "/")):
        if build_path.startswith(prefix):
            return staged + build_path[len(prefix) :].strip("/")
    return None


def op_source_digest(flags: Mapping[str, Any], digests: Mapping[str, str]) -> str | None:
    """``sha256:...`` over the op's sources and include folders (manifest ``flags``); None when
    none of them is in the context."""
    sources = [staged_path(str(s)) for s in flags.get("sources") or []]
    folders = [staged_path(str(d)) for d in flags.get("include_dirs") or []]
    names = {s for s in sources if s is not None and s in digests}
    for folder in (f for f in folders if f):
        names.update(n for n in digests if n.startswith(folder.rstrip("/") + "/"))
    if not names:
        return None
    lines = "".join(f"{digests[n]}  {n}\n" for n in sorted(names))
    return "sha256:" + hashlib.sha256(lines.encode()).hexdigest()
