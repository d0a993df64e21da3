"""An image's layers read straight from a local engine's overlay2 folders, when it has them.

An engine on this machine with the ``overlay2`` storage driver keeps each layer of an image as a
folder of its own (``GraphDriver.Data``: ``UpperDir``, the top layer, and ``LowerDir``, the rest,
top first). Reading those folders gives what the export gives (``imagegen.engine.layers``) for
only the layers asked for, without the engine writing the whole image out first: verifying a
5 GB image then reads its few added layers, not its 5 GB. overlay2 keeps a whiteout as a
character device 0/0 and an opaque folder as the ``trusted.overlay.opaque`` attribute ``y``.

``layer_dirs`` answers None wherever this does not hold (a remote engine, another driver, folders
this process cannot read), and the caller reads the export instead.
"""

from __future__ import annotations

import hashlib
import os
import stat
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from imagegen import settings
from imagegen.engine.layers import DATA_LIMIT, Layer, LayerEntry, Select

_OPAQUE_ATTRIBUTE = "trusted.overlay.opaque"
_BLOCK = 1 << 20


def layer_dirs(info: Mapping[str, Any], env: Mapping[str, str] = os.environ) -> list[str] | None:
    """The image's layer folders, bottom first (one per ``RootFS.Layers`` entry), or None."""
    host = env.get(settings.DOCKER_HOST.name, "")
    driver = info.get("GraphDriver") or {}
    if (host and not host.startswith("unix://")) or driver.get("Name") != "overlay2":
        return None
    data = driver.get("Data") or {}
    upper = str(data.get("UpperDir") or "")
    lower = [d for d in str(data.get("LowerDir") or "").split(":") if d]
    folders = [*reversed(lower), upper]
    layers = (info.get("RootFS") or {}).get("Layers") or []
    if not upper or len(folders) != len(layers):
        return None
    if not all(os.path.isdir(f) and os.access(f, os.R_OK | os.X_OK) for f in folders):
        return None
    return folders


def _digest(path: str, keep: bool) -> tuple[str, bytes | None]:
    digest, kept = hashlib.sha256(), []
    with open(path, "rb") as handle:
        while block := handle.read(_BLOCK):
            digest.update(block)
            kept += [block] if keep else []
    return digest.hexdigest(), b"".join(kept) if keep else None


def _entry(
    real: str, path: str, info: os.stat_result, hash_file: Select, keep_data: Select
) -> list[LayerEntry]:
    mode = info.st_mode
    if stat.S_ISCHR(mode) and info.st_rdev == 0:
        return [LayerEntry(path, "whiteout")]
    permissions, uid, gid = stat.S_IMODE(mode), info.st_uid, info.st_gid
    if stat.S_ISDIR(mode):
        entries = [LayerEntry(path, "dir", mode=permissions, uid=uid, gid=gid)]
        try:
            opaque = os.getxattr(real, _OPAQUE_ATTRIBUTE, follow_symlinks=False) == b"y"
        except OSError:
            opaque = False
        return [*entries, LayerEntry(path, "opaque")] if opaque else entries
    if stat.S_ISLNK(mode):
        return [LayerEntry(path, "symlink", target=os.readlink(real), mode=permissions, uid=uid, gid=gid)]
    if stat.S_ISREG(mode):
        keep = info.st_size <= DATA_LIMIT and keep_data(path)
        sha256 = data = None
        if keep or hash_file(path):
            sha256, data = _digest(real, keep)
        return [
            LayerEntry(
                path, "file", info.st_size, sha256=sha256, data=data, mode=permissions, uid=uid, gid=gid
            )
        ]
    return [LayerEntry(path, "other", mode=permissions, uid=uid, gid=gid)]


def read_dir_layer(diff_id: str, folder: str, hash_file: Select, keep_data: Select) -> Layer:
    """One layer's folder as the entries its tar would hold (folders before what they hold)."""
    entries: list[LayerEntry] = []
    pending = [("", folder)]
    while pending:
        path, real = pending.pop()
        with os.scandir(real) as listing:
            children = sorted(listing, key=lambda child: child.name, reverse=True)
        for child in reversed(children):
            child_path = f"{path}/{child.name}"
            info = child.stat(follow_symlinks=False)
            entries += _entry(child.path, child_path, info, hash_file, keep_data)
        pending += [(f"{path}/{c.name}", c.path) for c in children if c.is_dir(follow_symlinks=False)]
    return Layer(diff_id, tuple(entries))


def dir_links(folders: Sequence[str]) -> Callable[[str], str | None]:
    """Where the symbolic link at ``path`` leads in the image the folders make (None: not a link)."""

    def target(path: str) -> str | None:
        for folder in reversed(folders):
            try:
                info = os.lstat(folder + path)
            except FileNotFoundError:
                continue
            except OSError:
                return None
            return os.readlink(folder + path) if stat.S_ISLNK(info.st_mode) else None
        return None

    return target
