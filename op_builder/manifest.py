"""The installed-ops manifest: what an ahead-of-time build put in the wheel.

``setup.py`` writes ``kernels/_ops/manifest.json`` beside the compiled modules;
``load()`` and ``verify`` read it to know which ops are installed, for which torch
and toolkit, with which archs. Reading it is one small JSON parse (no probes), so
loading an installed op stays fast.
"""

from __future__ import annotations

import functools
import json
import os
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from op_builder.errors import OpLoadError
from op_builder.paths import MANIFEST_RELPATH, PACKAGE_ROOT

FORMAT = 1


@dataclass(frozen=True)
class InstalledOp:
    name: str
    module: str
    target: str
    archs: tuple[str, ...]
    flags: Mapping[str, Any] = field(default_factory=dict)
    # A stable build's target ("2.10": it loads on every torch from 2.10 with the build's CUDA
    # major); None (and absent from older manifests): built for the manifest's torch alone.
    stable_abi: str | None = None


@dataclass(frozen=True)
class Manifest:
    torch: str
    cuda: str | None  # toolkit version the ops were compiled with
    hip: str | None
    accelerator: str
    python: str
    ops: Mapping[str, InstalledOp]
    # The platform the ops were built for ("linux/arm64"); None in manifests from before it was kept.
    platform: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "format": FORMAT,
            "torch": self.torch,
            "cuda": self.cuda,
            "hip": self.hip,
            "accelerator": self.accelerator,
            "python": self.python,
            "platform": self.platform,
            "ops": {
                op.name: {
                    "module": op.module,
                    "target": op.target,
                    "archs": list(op.archs),
                    "flags": op.flags,
                    "stable_abi": op.stable_abi,
                }
                for op in self.ops.values()
            },
        }

    @classmethod
    def from_json(cls, data: object) -> Manifest:
        """The manifest ``to_json`` wrote; ValueError saying what is wrong with anything else."""
        if not isinstance(data, Mapping):
            raise ValueError(f"it holds a JSON {_json_kind(data)}, not an object")
        if data.get("format") != FORMAT:
            raise ValueError(f"unsupported manifest format {data.get('format')!r}")
        raw_ops = data.get("ops")
        if not isinstance(raw_ops, Mapping):
            raise ValueError(f"its ops are a JSON {_json_kind(raw_ops)}, not an object")
        ops = {}
        for name, entry in raw_ops.items():
            if not isinstance(entry, Mapping):
                raise ValueError(f"op {name!r} is a JSON {_json_kind(entry)}, not an object")
            archs, flags = entry.get("archs"), entry.get("flags", {})
            if not isinstance(archs, list) or not all(isinstance(a, str) for a in archs):
                raise ValueError(f"op {name!r}: archs {archs!r} is not a list of strings")
            if not isinstance(flags, Mapping):
                raise ValueError(f"op {name!r}: flags {flags!r} is not an object")
            ops[name] = InstalledOp(
                name,
                _text(entry, "module", name),
                _text(entry, "target", name),
                tuple(archs),
                flags,
                _optional_text(entry, "stable_abi"),
            )
        return cls(
            _text(data, "torch"),
            _optional_text(data, "cuda"),
            _optional_text(data, "hip"),
            _text(data, "accelerator"),
            _text(data, "python"),
            ops,
            _optional_text(data, "platform"),
        )


def _json_kind(value: object) -> str:
    """What json.loads made, in JSON's words."""
    if value is None:
        return "null"
    kinds = {dict: "object", list: "array", str: "string", bool: "boolean", int: "number", float: "number"}
    return kinds.get(type(value), type(value).__name__)


def _text(data: Mapping[str, Any], key: str, op: str | None = None) -> str:
    value = data.get(key)
    if not isinstance(value, str):
        where = f"op {op!r}: " if op else ""
        raise ValueError(f"{where}{key} {value!r} is not a string")
    return value


def _optional_text(data: Mapping[str, Any], key: str) -> str | None:
    value = data.get(key)
    if value is not None and not isinstance(value, str):
        raise ValueError(f"{key} {value!r} is not a string or null")
    return value


def manifest_path(root: Path = PACKAGE_ROOT) -> Path:
    return root / MANIFEST_RELPATH


@functools.cache
def read_installed(root: Path = PACKAGE_ROOT) -> Manifest | None:
    """The manifest of this installation, or None when no op was built ahead of time.

    A manifest that exists but cannot be read is an error: silently treating it
    as "nothing installed" would send every load to a JIT build.
    """
    path = manifest_path(root)
    try:
        text = path.read_text()
    except FileNotFoundError:
        return None
    try:
        # ValueError: not JSON (json.JSONDecodeError), or JSON of the wrong shape (from_json).
        return Manifest.from_json(json.loads(text))
    except ValueError as exc:
        raise OpLoadError(
            f"the installed-ops manifest {path} is unreadable: {exc}",
            hint="reinstall the package (the wheel may be damaged)",
        ) from None


def write(manifest: Manifest, path: Path) -> None:
    """Write atomically, so a killed build never leaves half a manifest."""
    path.parent.mkdir(parents=True, exist_ok=True)
    text = json.dumps(manifest.to_json(), indent=2, sort_keys=True) + "\n"
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".manifest-", suffix=".json")
    try:
        with os.fdopen(fd, "w") as handle:
            handle.write(text)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
