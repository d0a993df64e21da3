"""What the files of an image's Python environment weigh, measured inside the image.

``imagegen size`` runs this module's text with the image's own ``python -c`` in the sealed
container the verifier uses (no network, read-only), so it uses only the standard library and
the op_builder inside the image, and keeps to Python 3.9. It prints one JSON document:

- ``dists``: bytes per installed distribution, each file of the venv given to the distribution
  whose ``RECORD`` lists it (else whose top-level name it sits under; a ``__pycache__/X.*.pyc``
  to the owner of ``X.py``), the op modules left out;
- ``unowned``: site-packages files no distribution claims; ``venv``: the rest of the venv (its
  ``bin/``, ``include/``, ``pyvenv.cfg``); ``paths``: folders a ``.pth`` file puts on ``sys.path``
  from outside the venv (op packages at ``/opt/op-sources``);
- ``ops``: each op of the manifest: its module's path and bytes, and for GPU modules the bytes
  of each device-code entry (``sm_90``, ``compute_90``, ``gfx90a``), read from the ELF.

Sizes are counted as the engine counts a layer (moby ``pkg/directory``): apparent sizes of files
and symbolic links, directories and empty files not counted, a file with several hard links once.
"""

from __future__ import annotations

import csv
import importlib.machinery
import json
import mmap
import os
import stat
import struct
import sys
import sysconfig
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

PROBE_FORMAT = 1

# The CUDA fatbinary's container and entry headers, as op_builder/binary_formats.py documents
# them (its docstring cites the open-source readers and the checks against nvcc 13.0's output):
# container u32 magic, u16 version, u16 header size, u64 size of the entries; entry u16 kind,
# u32 header size at 4, u64 payload size at 8, u32 arch at 28, u64 flags at 40. The reader there
# lists names only; this one adds each entry's bytes (header and payload, as it sits in the file).
_FATBIN_MAGIC = 0xBA55ED50
_CONTAINER = struct.Struct("<IHHQ")
_ENTRY = struct.Struct("<H2xIQ12xI8xQ")
_KINDS = {1: "compute_", 2: "sm_", 8: "lto_"}
_ARCH_SPECIFIC, _FAMILY_SPECIFIC = 0x100000, 0x200000
# A clang offload bundle (ClangOffloadBundler's "Bundled Code Object Layout"): magic, u64 count,
# then per entry u64 offset, u64 size, u64 id length, id.
_BUNDLE_MAGIC = b"__CLANG_OFFLOAD_BUNDLE__"
_BUNDLE_ENTRY = struct.Struct("<QQQ")
_COMPRESSED_BUNDLE = "gfx (compressed bundle)"


class Tally:
    """Bytes under names, each inode counted once across every walk of one probe."""

    def __init__(self) -> None:
        self.seen: set[tuple[int, int]] = set()

    def size(self, path: str) -> int:
        """The bytes the engine counts for ``path``: 0 for directories, empty and seen files."""
        try:
            info = os.lstat(path)
        except OSError:
            return 0
        if stat.S_ISDIR(info.st_mode) or info.st_size == 0:
            return 0
        key = (info.st_dev, info.st_ino)
        if key in self.seen:
            return 0
        self.seen.add(key)
        return int(info.st_size)


def walk_files(root: str) -> Iterator[str]:
    """Every file and symbolic link under ``root`` (links to folders listed, not followed)."""
    for folder, dirs, files in os.walk(root):
        for name in dirs:
            if os.path.islink(os.path.join(folder, name)):
                yield os.path.join(folder, name)
        for name in files:
            yield os.path.join(folder, name)


def dist_name(folder: str) -> str:
    """``torch-2.13.0+cpu.dist-info`` -> ``torch``; ``nvidia_cublas-13.0.dist-info`` -> ``nvidia-cublas``."""
    return folder.split("-", 1)[0].replace("_", "-").replace(".", "-").lower()


def owners(site: str) -> tuple[dict[str, str], dict[str, str]]:
    """(absolute path -> distribution, top-level name -> distribution) from every RECORD.

    A top-level name claimed by more than one distribution (``__pycache__``) is left out: its
    files are matched one by one instead.
    """
    by_path: dict[str, str] = {}
    claims: dict[str, set[str]] = {}
    for entry in sorted(os.listdir(site)):
        if not entry.endswith(".dist-info"):
            continue
        name = dist_name(entry)
        claims.setdefault(entry, set()).add(name)
        try:
            with open(os.path.join(site, entry, "RECORD"), newline="", encoding="utf-8") as record:
                rows = list(csv.reader(record))
        except OSError:
            continue
        for row in rows:
            if not row or not row[0]:
                continue
            path = os.path.normpath(os.path.join(site, row[0]))
            by_path[path] = name
            relative = os.path.relpath(path, site)
            if not relative.startswith(".."):
                claims.setdefault(relative.split(os.sep, 1)[0], set()).add(name)
    top = {first: next(iter(names)) for first, names in claims.items() if len(names) == 1}
    return by_path, top


def owner_of(path: str, site: str, by_path: Mapping[str, str], top: Mapping[str, str]) -> str | None:
    """The distribution a file of site-packages belongs to, or None."""
    if path in by_path:
        return by_path[path]
    parts = os.path.relpath(path, site).split(os.sep)
    if parts[0] in top:
        return top[parts[0]]
    if len(parts) == 2 and parts[0] == "__pycache__":  # a single-file module's bytecode
        source = os.path.join(site, parts[1].split(".", 1)[0] + ".py")
        return by_path.get(source)
    return None


def device_bytes(path: str) -> dict[str, int]:
    """Bytes of each device-code entry of an ELF module, by name as op_builder spells it
    (``sm_90a``, ``compute_90``, ``gfx90a:xnack-``); empty for a CPU-only module."""
    from op_builder import binary

    found: dict[str, int] = {}
    with open(path, "rb") as file, mmap.mmap(file.fileno(), 0, access=mmap.ACCESS_READ) as data:
        for section, offset, size in binary.sections(data, Path(path)):
            if section in (".nv_fatbin", "__nv_relfatbin"):
                _fatbin(data, offset, offset + size, found)
            elif section == ".hip_fatbin":
                _bundles(data, offset, offset + size, found)
    return found


def _next_data(data: Any, pos: int, end: int) -> int:
    while pos < end and data[pos] == 0:  # zero padding between containers
        pos += 1
    return pos


def _fatbin(data: Any, pos: int, end: int, found: dict[str, int]) -> None:
    while (pos := _next_data(data, pos, end)) + _CONTAINER.size <= end:
        magic, _, header, size = _CONTAINER.unpack_from(data, pos)
        if magic != _FATBIN_MAGIC:
            raise ValueError(f"no fatbin container at offset {pos:#x}")
        entry, stop = pos + header, min(pos + header + size, end)
        while entry + _ENTRY.size <= stop:
            kind, entry_header, payload, arch, flags = _ENTRY.unpack_from(data, entry)
            suffix = "a" if flags & _ARCH_SPECIFIC else "f" if flags & _FAMILY_SPECIFIC else ""
            name = f"{_KINDS.get(kind, f'kind{kind}_')}{arch}{suffix}"
            found[name] = found.get(name, 0) + entry_header + payload
            entry += entry_header + payload
        pos = stop


def _bundles(data: Any, pos: int, end: int, found: dict[str, int]) -> None:
    from op_builder.binary_formats import bundle_target

    while (pos := _next_data(data, pos, end)) < end:
        if bytes(data[pos : pos + len(_BUNDLE_MAGIC)]) != _BUNDLE_MAGIC:
            # A compressed bundle (CCOB) names its targets only inside the compressed data.
            found[_COMPRESSED_BUNDLE] = found.get(_COMPRESSED_BUNDLE, 0) + end - pos
            return
        (count,) = struct.unpack_from("<Q", data, pos + len(_BUNDLE_MAGIC))
        at, bundle_end = pos + len(_BUNDLE_MAGIC) + 8, pos
        for _ in range(count):
            offset, size, length = _BUNDLE_ENTRY.unpack_from(data, at)
            target = bundle_target(bytes(data[at + 24 : at + 24 + length]).decode("ascii", "replace"))
            if target is not None:
                found[target[1]] = found.get(target[1], 0) + size
            at += 24 + length
            bundle_end = max(bundle_end, at, pos + offset + size)
        pos = bundle_end


def op_modules(package_root: str, manifest: str) -> dict[str, str]:
    """op -> the path of its compiled module, from the manifest of the ops installed here."""
    try:
        with open(manifest, encoding="utf-8") as file:
            ops = json.load(file).get("ops") or {}
    except (OSError, ValueError):
        return {}
    modules: dict[str, str] = {}
    for name, entry in sorted(ops.items()):
        parts = str(entry.get("module", "")).split(".")
        folder = os.path.join(package_root, *parts[:-1])
        for suffix in importlib.machinery.EXTENSION_SUFFIXES:
            candidate = os.path.join(folder, parts[-1] + suffix)
            if os.path.isfile(candidate):
                modules[name] = os.path.realpath(candidate)
                break
    return modules


def pth_paths(site: str, prefix: str) -> list[str]:
    """Folders the ``.pth`` files of site-packages add to ``sys.path`` from outside ``prefix``."""
    found: list[str] = []
    for entry in sorted(os.listdir(site)):
        if not entry.endswith(".pth"):
            continue
        try:
            with open(os.path.join(site, entry), encoding="utf-8") as file:
                lines = [line.strip() for line in file]
        except OSError:
            continue
        for line in lines:
            inside = line == prefix or line.startswith(prefix.rstrip(os.sep) + os.sep)
            if os.path.isabs(line) and os.path.isdir(line) and not inside and line not in found:
                found.append(line)
    return found


def measure(prefix: str, site: str, package_root: str, manifest: str) -> dict[str, Any]:
    """The probe's document for the venv at ``prefix`` (see the module's docstring)."""
    tally = Tally()
    ops: dict[str, dict[str, Any]] = {}
    modules = op_modules(package_root, manifest)
    for name, path in modules.items():
        entry: dict[str, Any] = {"file": path, "bytes": tally.size(path), "device": {}}
        try:
            entry["device"] = device_bytes(path)
        except Exception as err:  # reported, not fatal: the op's bytes still count
            entry["error"] = f"{type(err).__name__}: {err}"
        ops[name] = entry
    by_path, top = owners(site)
    dists: dict[str, int] = {}
    unowned = venv = 0
    site_prefix = site.rstrip(os.sep) + os.sep
    for path in walk_files(prefix):
        size = tally.size(path)
        if not size:
            continue
        owner = by_path.get(path) or (
            owner_of(path, site, by_path, top) if path.startswith(site_prefix) else None
        )
        if owner is not None:
            dists[owner] = dists.get(owner, 0) + size
        elif path.startswith(site_prefix):
            unowned += size
        else:
            venv += size
    paths = {
        folder: sum(tally.size(path) for path in walk_files(folder)) for folder in pth_paths(site, prefix)
    }
    return {
        "probe": PROBE_FORMAT,
        "prefix": prefix,
        "site_packages": site,
        "dists": dict(sorted(dists.items())),
        "unowned": unowned,
        "venv": venv,
        "paths": paths,
        "ops": ops,
    }


def main() -> None:
    from op_builder.paths import MANIFEST_RELPATH, PACKAGE_ROOT

    site = sysconfig.get_paths()["purelib"]
    document = measure(sys.prefix, site, str(PACKAGE_ROOT), str(PACKAGE_ROOT / MANIFEST_RELPATH))
    json.dump(document, sys.stdout)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
