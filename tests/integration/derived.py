"""Tiny images for the integration tests: a base plus a few files, built from an in-memory
context by one COPY (no RUN step, so no container runs and nothing compiles)."""

from __future__ import annotations

import io
import tarfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any


def _tar_add(
    archive: tarfile.TarFile,
    name: str,
    data: bytes | None = None,
    *,
    link: str | None = None,
    mode: int = 0o644,
) -> None:
    info = tarfile.TarInfo(name)
    if link is not None:
        info.type, info.linkname = tarfile.SYMTYPE, link
        archive.addfile(info)
        return
    assert data is not None
    info.size, info.mode = len(data), mode
    archive.addfile(info, io.BytesIO(data))


def package_files(package: Path) -> Iterator[tuple[str, bytes]]:
    for path in sorted(package.rglob("*.py")):
        if "__pycache__" not in path.parts:
            yield f"{package.name}/{path.relative_to(package)}", path.read_bytes()


def derive(
    client: Any,
    tag: str,
    base: str,
    files: dict[str, bytes],
    links: dict[str, str],
    lines: tuple[str, ...] = (),
    executable: tuple[str, ...] = (),
) -> None:
    """Build ``tag``: ``base`` plus ``files`` and ``links`` (absolute paths) and Dockerfile ``lines``."""
    context = io.BytesIO()
    with tarfile.open(fileobj=context, mode="w") as archive:
        dockerfile = "\n".join([f"FROM {base}", "COPY root/ /", *lines]) + "\n"
        _tar_add(archive, "Dockerfile", dockerfile.encode())
        root = tarfile.TarInfo("root")
        root.type, root.mode = tarfile.DIRTYPE, 0o755
        archive.addfile(root)  # there even when no file is added
        for path, data in files.items():
            _tar_add(archive, "root" + path, data, mode=0o755 if path in executable else 0o644)
        for path, target in links.items():
            _tar_add(archive, "root" + path, link=target)
    context.seek(0)
    client.images.build(fileobj=context, custom_context=True, tag=tag, rm=True, forcerm=True)
