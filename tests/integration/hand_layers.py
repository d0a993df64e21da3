"""Hand-made layer tars and images for the tests of the layer readers: members written with
tarfile exactly as a hostile or unusual tool might write them, and an image of them loaded into
the engine from a `docker save`-style archive, so the engine itself applies them."""

from __future__ import annotations

import hashlib
import io
import json
import tarfile
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Member:
    """One tar member: ``kind`` file, dir, symlink or hardlink; ``link`` a link's target."""

    name: str
    kind: str = "file"
    data: bytes = b""
    link: str = ""
    mode: int = 0o644
    uid: int = 0
    gid: int = 0


def file(name: str, data: bytes = b"x\n", **extra: Any) -> Member:
    return Member(name, "file", data, **extra)


def folder(name: str, mode: int = 0o755, **extra: Any) -> Member:
    return Member(name, "dir", mode=mode, **extra)


def symlink(name: str, target: str) -> Member:
    return Member(name, "symlink", link=target, mode=0o777)


def hardlink(name: str, target: str) -> Member:
    return Member(name, "hardlink", link=target)


def layer_tar(members: Sequence[Member]) -> bytes:
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for member in members:
            info = tarfile.TarInfo(member.name)
            info.mode, info.uid, info.gid, info.mtime = member.mode, member.uid, member.gid, 1
            if member.kind == "file":
                info.size = len(member.data)
                tar.addfile(info, io.BytesIO(member.data))
                continue
            info.type = {"dir": tarfile.DIRTYPE, "symlink": tarfile.SYMTYPE, "hardlink": tarfile.LNKTYPE}[
                member.kind
            ]
            info.linkname = member.link
            tar.addfile(info)
    return out.getvalue()


def image_archive(layers: Sequence[bytes], tag: str, config: dict[str, Any] | None = None) -> bytes:
    """A `docker load` archive (Docker's layout) of an image made of ``layers``, bottom first,
    with ``config`` as its configuration's ``config`` (default: ``Cmd`` true)."""
    diff_ids = ["sha256:" + hashlib.sha256(layer).hexdigest() for layer in layers]
    config = json.dumps(
        {
            "architecture": "amd64",
            "os": "linux",
            "config": config if config is not None else {"Cmd": ["true"]},
            "rootfs": {"type": "layers", "diff_ids": diff_ids},
            "history": [{"created_by": "hand-made layer"} for _ in layers],
        }
    ).encode()
    config_name = hashlib.sha256(config).hexdigest() + ".json"
    names = [f"{d.split(':')[1]}/layer.tar" for d in diff_ids]
    manifest = json.dumps([{"Config": config_name, "RepoTags": [tag], "Layers": names}]).encode()
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w") as tar:
        for name, data in [*zip(names, layers), (config_name, config), ("manifest.json", manifest)]:
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return out.getvalue()
