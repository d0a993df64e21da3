"""The two device-code containers a host ELF embeds, parsed from a buffer (standard library only).

CUDA **fatbinary** (sections ``.nv_fatbin``, and ``__nv_relfatbin`` with ``-rdc``). NVIDIA does
not document it; the layout below is the one the open-source readers use
(n-eiling/cuda-fatbin-decompression ``fatbin-decompress.h``, jiegec/fatbinary ``src/lib.rs``),
checked against what CUDA 13.0's nvcc/fatbinary write (``tests/aot/test_binary.py`` compiles them):

- container: ``u32 magic 0xBA55ED50, u16 version (1), u16 header size (16), u64 size of the
  entries``; containers follow one another, one per translation unit plus one per device link;
- entry: a 64-byte header (longer when it carries options or a name; its own ``header size``
  says how long) then ``size`` bytes of payload. ``u16 kind`` at 0 (1 = PTX, 2 = ELF/SASS,
  8 = LTO-IR from ``code=lto_XY``), ``u32 header size`` at 4, ``u64 size`` at 8, ``u32 arch``
  (the SM number, 90 for sm_90) at 28, ``u64 flags`` at 40. Flags 0x2000 / 0x8000 mark a
  compressed payload (``-compress-mode=speed`` / ``size``); the header itself is never compressed.
  The ``a`` and ``f`` variants share the arch number and differ only in the flags: 0x100000 for
  ``sm_90a`` / ``compute_90a``, 0x200000 for ``sm_100f`` (found by compiling each and comparing;
  the cubin inside an ``f`` entry carries no such mark, so cuobjdump lists it as plain ``sm_100``).

Clang **offload bundle** (section ``.hip_fatbin``; clang's ClangOffloadBundler documentation,
"Bundled Code Object Layout"): ``"__CLANG_OFFLOAD_BUNDLE__"``, ``u64 count``, then per entry
``u64 offset, u64 size, u64 id length, id`` with ids ``<kind>-<triple>[-<target id>]``
(``hipv4-amdgcn-amd-amdhsa--gfx90a:xnack-``, ``host-x86_64-unknown-linux``). Bundles are
padded with zeros to 4096 bytes in the section. A **compressed** bundle (LLVM's
``CompressedOffloadBundle`` in OffloadBundle.h) is ``"CCOB", u16 version, u16 method
(llvm::compression::Format: 0 zlib, 1 zstd)``, then v1 ``u32 uncompressed size, u64 hash``,
v2 ``u32 total size, u32 uncompressed size, u64 hash``, v3 the same with u64 sizes; the ids are
inside the compressed data, so only zlib (and zstd where the stdlib has ``compression.zstd``,
Python 3.14) can be listed.
"""

from __future__ import annotations

import importlib
import mmap
import re
import struct
import zlib
from collections.abc import Generator, Iterator
from typing import Union

Buffer = Union[bytes, mmap.mmap]
Found = tuple[str, str]  # (category, name): ("sass", "sm_90a"), ("gfx", "gfx90a"), ("unreadable", why)
_Parsed = Generator[Found, None, int]  # yields what it found, returns where the container ends

FATBIN_SECTIONS = (".nv_fatbin", "__nv_relfatbin")
BUNDLE_SECTION = ".hip_fatbin"
BUNDLE_MAGIC = b"__CLANG_OFFLOAD_BUNDLE__"
BUNDLE_PREFIX = BUNDLE_MAGIC.decode()  # also the name prefix of a -fgpu-rdc object's sections
_FATBIN_MAGIC = 0xBA55ED50
_CCOB_MAGIC = b"CCOB"

_CONTAINER = struct.Struct("<IHHQ")
_ENTRY = struct.Struct("<HHIQIIHHIIIQQQ")  # 64 bytes; fields as in the docstring
_KINDS = {1: ("ptx", "compute_"), 2: ("sass", "sm_"), 8: ("other", "lto_")}
_ARCH_SPECIFIC, _FAMILY_SPECIFIC = 0x100000, 0x200000
_BUNDLE_ENTRY = struct.Struct("<QQQ")
_CCOB_HEADERS = {1: struct.Struct("<4sHHIQ"), 2: struct.Struct("<4sHHIIQ"), 3: struct.Struct("<4sHHQQQ")}
_NONZERO = re.compile(rb"[^\x00]")
# A target id: the processor then its features, each with + or - (``gfx90a:sramecc+:xnack-``).
_TARGET_ID = re.compile(r"(?:^|-)(gfx\w+(?::\w+[+-])*)$")


class FormatError(Exception):
    """Data that does not parse; binary.py turns it into a BadInputError naming the file."""


def unpack(layout: struct.Struct, data: Buffer, pos: int, end: int, what: str) -> tuple[int, ...]:
    """``layout`` at ``pos``, refusing to read past ``end`` (so a cut file is a FormatError)."""
    if pos < 0 or pos + layout.size > end:
        raise FormatError(f"{what} at offset {pos:#x} runs past the end of its data")
    return tuple(layout.unpack_from(data, pos))


def _skip_zeros(data: Buffer, pos: int, end: int) -> int:
    """The next non-zero byte: the linker and the bundler pad between containers with zeros."""
    match = _NONZERO.search(data, pos, end)
    return end if match is None else int(match.start())


def fatbin_entries(data: Buffer, pos: int, end: int) -> Iterator[Found]:
    """Every entry of every fatbinary container in ``data[pos:end]``."""
    while (pos := _skip_zeros(data, pos, end)) < end:
        magic, version, header_size, size = unpack(_CONTAINER, data, pos, end, "fatbin header")
        if magic != _FATBIN_MAGIC:
            raise FormatError(f"unrecognized data at offset {pos:#x} where a fatbin container should be")
        if version != 1 or header_size < _CONTAINER.size:
            raise FormatError(f"fatbin container at {pos:#x} has version {version}, header {header_size}")
        entry, stop = pos + header_size, pos + header_size + size
        if stop > end:
            raise FormatError(f"fatbin container at offset {pos:#x} runs past the end of its section")
        while entry < stop:
            kind, _, entry_header, payload, *_, arch, _, _, flags, _, _ = unpack(
                _ENTRY, data, entry, stop, "fatbin entry"
            )
            if entry_header < _ENTRY.size or entry + entry_header + payload > stop:
                raise FormatError(f"fatbin entry at offset {entry:#x} runs past its container")
            suffix = "a" if flags & _ARCH_SPECIFIC else "f" if flags & _FAMILY_SPECIFIC else ""
            category, prefix = _KINDS.get(kind, ("other", f"kind{kind}_"))
            yield category, f"{prefix}{arch}{suffix}"
            entry += entry_header + payload
        pos = stop


def bundle_target(bundle_id: str) -> Found | None:
    """What one bundle id names: a gfx target (features kept, as ``--offload-arch`` spells
    them), None for the host entry, ``other`` for any other device."""
    if bundle_id.startswith("host-"):
        return None
    match = _TARGET_ID.search(bundle_id)
    if "amdgcn" in bundle_id and match is not None:
        return "gfx", match[1]
    return "other", bundle_id


def bundle_targets(data: Buffer, pos: int, end: int) -> Iterator[Found]:
    """Every device target of every offload bundle (plain or compressed) in ``data[pos:end]``."""
    while (pos := _skip_zeros(data, pos, end)) < end:
        if bytes(data[pos : pos + len(BUNDLE_MAGIC)]) == BUNDLE_MAGIC:
            pos = yield from _bundle(data, pos, end)
        elif bytes(data[pos : pos + len(_CCOB_MAGIC)]) == _CCOB_MAGIC:
            pos = yield from _compressed_bundle(data, pos, end)
        else:
            raise FormatError(f"unrecognized data at offset {pos:#x} where an offload bundle should be")


def _bundle(data: Buffer, start: int, end: int) -> _Parsed:
    """One bundle's targets; returns where the bundle ends (its last code object's end)."""
    (count,) = unpack(struct.Struct("<Q"), data, start + len(BUNDLE_MAGIC), end, "bundle header")
    pos = start + len(BUNDLE_MAGIC) + 8
    if count * _BUNDLE_ENTRY.size > end - pos:
        raise FormatError(f"offload bundle at offset {start:#x} claims {count} entries")
    bundle_end = pos
    for _ in range(count):
        offset, size, id_length = unpack(_BUNDLE_ENTRY, data, pos, end, "bundle entry")
        pos += _BUNDLE_ENTRY.size
        if pos + id_length > end or start + offset + size > end:
            raise FormatError(f"offload bundle entry at offset {pos:#x} runs past its section")
        found = bundle_target(bytes(data[pos : pos + id_length]).decode("ascii", "replace"))
        if found is not None:
            yield found
        pos += id_length
        bundle_end = max(bundle_end, pos, start + offset + size)
    return bundle_end


def _compressed_bundle(data: Buffer, start: int, end: int) -> _Parsed:
    """A CCOB: decompressed and listed when the stdlib can; otherwise one ``unreadable`` note."""
    (_, version, method) = unpack(struct.Struct("<4sHH"), data, start, end, "compressed bundle header")
    layout = _CCOB_HEADERS.get(version)
    if layout is None:
        raise FormatError(f"compressed offload bundle at offset {start:#x} has unknown version {version}")
    fields = unpack(layout, data, start, end, "compressed bundle header")
    stop = end if version == 1 else start + fields[3]  # v1 has no total size
    if stop > end or stop < start + layout.size:
        raise FormatError(f"compressed offload bundle at offset {start:#x} runs past its section")
    body = bytes(data[start + layout.size : stop])
    try:
        if method == 0:
            inflater = zlib.decompressobj()
            plain = inflater.decompress(body)
            stop -= len(inflater.unused_data)  # v1: the stream's own end is the bundle's end
        elif method == 1:
            plain = _zstd_decompress(body)
        else:
            raise LookupError("unknown compression method")
    except (zlib.error, ValueError, LookupError) as err:
        why = f"compressed offload bundle at {start:#x} (v{version}, method {method}) not read: {err}"
        yield "unreadable", why
        return end if version == 1 else stop
    yield from bundle_targets(plain, 0, len(plain))
    return stop


def _zstd_decompress(body: bytes) -> bytes:
    """zstd is in the standard library from Python 3.14 (``compression.zstd``) only."""
    try:
        module = importlib.import_module("compression.zstd")
    except ImportError as err:
        raise LookupError("zstd needs compression.zstd (Python 3.14 or newer)") from err
    try:
        return bytes(module.decompress(body))
    except Exception as err:  # compression.zstd.ZstdError, which older Pythons cannot name
        raise ValueError(str(err)) from err
