"""What GPU code a compiled op module holds, read with the standard library only.

Runtime images have no cuobjdump, so ``read_device_code`` reads the ELF itself (64-bit
little-endian, as on x86-64 and aarch64 Linux; layout from the System V gABI, ``elf(5)``) and
the device-code containers in its sections (``binary_formats``: CUDA fatbinaries, clang
offload bundles; the format sources are cited there). ``audit`` compares what it found with
the arch list an op was planned for, by the same rule as the flags it was built with
(``archs.nvcc_gencode_flags``), so a dropped, duplicated or leaked arch shows as missing or extra.

Which sections count: ``.nv_fatbin`` (what the CUDA runtime registers), ``__nv_relfatbin``
(the per-object images of an ``-rdc`` build, which the runtime can JIT-link; cuobjdump does not
list them in a linked module), ``.hip_fatbin``, and clang's ``__CLANG_OFFLOAD_BUNDLE__<id>``
sections of a ``-fgpu-rdc`` object. Names are spelled as nvcc and clang spell the targets:
``sm_90a``, ``sm_100f``, ``compute_90``, ``lto_90``, ``gfx90a:xnack-`` (target features kept,
as ``--offload-arch`` and ``PYTORCH_ROCM_ARCH`` write them).
"""

from __future__ import annotations

import mmap
import re
import stat
import struct
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from op_builder import binary_formats as formats
from op_builder.archs import nvcc_gencode_flags, parse_cuda_arch_list
from op_builder.binary_formats import Buffer, FormatError, unpack
from op_builder.errors import BadInputError

# e_ident, e_type, e_machine, e_version, e_entry, e_phoff, e_shoff, e_flags, e_ehsize,
# e_phentsize, e_phnum, e_shentsize, e_shnum, e_shstrndx
_EHDR = struct.Struct("<16sHHIQQQIHHHHHH")
# sh_name, sh_type, sh_flags, sh_addr, sh_offset, sh_size, sh_link, sh_info, sh_addralign, sh_entsize
_SHDR = struct.Struct("<IIQQQQIIQQ")
_SHT_NOBITS = 8  # a section with no bytes in the file (.bss)
_SHN_XINDEX = 0xFFFF  # the string table index is in section 0's sh_link (more than 65279 sections)
CORRUPT_HINT = "the file looks truncated or corrupt: rebuild it, or copy it again"
_NOT_ELF_HINT = "pass a compiled op module (the extension's .so) or an object file"


def _natural(name: str) -> tuple[object, ...]:
    """sm_80 before sm_100: numbers compare as numbers."""
    return tuple(int(part) if part.isdigit() else part for part in re.split(r"(\d+)", name))


def _listed(names: Iterable[str]) -> tuple[str, ...]:
    return tuple(sorted(set(names), key=_natural))


@dataclass(frozen=True)
class DeviceCode:
    """The device code of one ELF file, each name once, in arch order.

    ``other``: device code that is neither SASS, PTX nor a gfx target (LTO-IR ``lto_90``, an
    unknown fatbin kind, a non-AMD bundle target). ``unreadable``: why some could not be listed
    (a zstd-compressed offload bundle without ``compression.zstd``); an audit then fails.
    """

    sass: tuple[str, ...] = ()
    ptx: tuple[str, ...] = ()
    gfx: tuple[str, ...] = ()
    other: tuple[str, ...] = ()
    unreadable: tuple[str, ...] = ()

    def names(self) -> frozenset[str]:
        return frozenset((*self.sass, *self.ptx, *self.gfx, *self.other))

    def to_json(self) -> dict[str, list[str]]:
        return {
            "sass": list(self.sass),
            "ptx": list(self.ptx),
            "gfx": list(self.gfx),
            "other": list(self.other),
            "unreadable": list(self.unreadable),
        }


@dataclass(frozen=True)
class Audit:
    """``found`` against ``planned`` (spelled as found: ``sm_80``, ``compute_90``, ``gfx90a``)."""

    found: DeviceCode
    planned: tuple[str, ...]
    missing: tuple[str, ...]
    extra: tuple[str, ...]
    ok: bool

    def to_json(self) -> dict[str, object]:
        return {
            **self.found.to_json(),
            "planned": list(self.planned),
            "missing": list(self.missing),
            "extra": list(self.extra),
            "ok": self.ok,
        }

    @classmethod
    def from_json(cls, raw: Mapping[str, Any]) -> Audit:
        """Read an audit back (what ``verify`` printed in an image); the verdict is recomputed."""

        def names(key: str) -> tuple[str, ...]:
            value = raw.get(key)
            return tuple(str(v) for v in value) if isinstance(value, list) else ()

        found = DeviceCode(names("sass"), names("ptx"), names("gfx"), names("other"), names("unreadable"))
        planned = names("planned")
        return _compare(found, planned)


def planned_names(planned_archs: Sequence[str]) -> tuple[str, ...]:
    """What a module built for ``planned_archs`` must hold: the ``code=`` of each ``-gencode``
    flag the op got (every arch's SASS, one PTX per ``+PTX`` arch), and each gfx target."""
    gfx = [a for a in planned_archs if a.startswith("gfx")]
    cuda = [a for a in planned_archs if not a.startswith("gfx")]
    flags = nvcc_gencode_flags(parse_cuda_arch_list(";".join(cuda))) if cuda else []
    return _listed([*(flag.rsplit("code=", 1)[1] for flag in flags), *gfx])


def audit(found: DeviceCode, planned_archs: Sequence[str]) -> Audit:
    """Compare a module's device code with the arch list the manifest records for its op
    (``"8.0"``, ``"9.0+PTX"``, ``"9.0a"``, ``"10.0f"``, or gfx targets); pure."""
    return _compare(found, planned_names(planned_archs))


def _compare(found: DeviceCode, planned: tuple[str, ...]) -> Audit:
    missing = _listed(set(planned) - found.names())
    extra = _listed(found.names() - set(planned))
    ok = not missing and not extra and not found.unreadable
    return Audit(found, planned, missing, extra, ok)


def format_text(code: DeviceCode) -> str:
    """The human form of ``python -m op_builder binary FILE``."""
    rows = [("SASS", code.sass), ("PTX", code.ptx), ("gfx", code.gfx)]
    if code.other:
        rows.append(("other", code.other))
    lines = [f"{label + ':':<7}{' '.join(names) if names else '-'}" for label, names in rows]
    lines += [f"unreadable: {why}" for why in code.unreadable]
    if not (code.sass or code.ptx or code.gfx or code.other or code.unreadable):
        lines.append("no device code (a CPU-only module)")
    return "\n".join(lines)


def read_device_code(path: str | Path) -> DeviceCode:
    """The SASS, PTX and gfx targets an ELF file (op module, object file) holds.

    Raises BadInputError (exit 2) when the file cannot be read or is not a 64-bit
    little-endian ELF, or when its headers or containers are cut short or corrupt.
    """
    path = Path(path)
    try:
        # Refused before opening: opening a FIFO waits for a writer (forever), and reading a
        # device or a directory is no better.
        mode = path.stat().st_mode
        if not stat.S_ISREG(mode):
            raise BadInputError(
                f"{path} is not a regular file (it is {_file_kind(mode)})",
                hint="pass a compiled module (.so) or an object file",
            )
        with path.open("rb") as file:
            if path.stat().st_size == 0:  # an empty file cannot be mapped
                raise BadInputError(f"{path} is not an ELF file (it is empty)", hint=_NOT_ELF_HINT)
            with mmap.mmap(file.fileno(), 0, access=mmap.ACCESS_READ) as data:
                found = list(_scan(data, path))
    except OSError as err:
        raise BadInputError(f"cannot read {path}: {err.strerror or err}", hint="check the path") from err
    except FormatError as err:
        raise BadInputError(f"{path}: {err}", hint=CORRUPT_HINT) from err
    by_category: dict[str, list[str]] = {}
    for category, name in found:
        by_category.setdefault(category, []).append(name)
    return DeviceCode(
        sass=_listed(by_category.get("sass", ())),
        ptx=_listed(by_category.get("ptx", ())),
        gfx=_listed(by_category.get("gfx", ())),
        other=_listed(by_category.get("other", ())),
        unreadable=tuple(dict.fromkeys(by_category.get("unreadable", ()))),
    )


# e_machine values of the machines ops are built for (elf(5)), named as ``uname -m`` names them.
ELF_MACHINES: dict[int, str] = {62: "x86_64", 183: "aarch64"}


def elf_machine(path: str | Path) -> str:
    """The machine an ELF file's code is for, as ``uname -m`` names it (``aarch64``), from its header;
    ``EM_<n>`` for another machine. BadInputError when the file is not an ELF file or cannot be read."""
    path = Path(path)
    try:
        with path.open("rb") as file:
            head = file.read(20)
    except OSError as err:
        raise BadInputError(f"cannot read {path}: {err.strerror or err}", hint="check the path") from err
    if len(head) < 20 or head[:4] != b"\x7fELF":
        raise BadInputError(f"{path} is not an ELF file", hint=_NOT_ELF_HINT)
    # e_machine: two bytes after e_type, in the file's byte order (EI_DATA: 1 little, 2 big).
    number = int.from_bytes(head[18:20], "little" if head[5] == 1 else "big")
    return ELF_MACHINES.get(number, f"EM_{number}")


def _file_kind(mode: int) -> str:
    kinds = (
        (stat.S_ISDIR, "a directory"),
        (stat.S_ISFIFO, "a FIFO"),
        (stat.S_ISCHR, "a character device"),
        (stat.S_ISBLK, "a block device"),
        (stat.S_ISSOCK, "a socket"),
    )
    return next((name for test, name in kinds if test(mode)), "another kind of file")


def sections(data: Buffer, path: Path) -> Iterator[tuple[str, int, int]]:
    """(name, offset, size) of each section with bytes in the file."""
    end = len(data)
    ident = bytes(data[:16])
    if ident[:4] != b"\x7fELF":
        raise BadInputError(f"{path} is not an ELF file", hint=_NOT_ELF_HINT)
    if ident[4] != 2 or ident[5] != 1:
        width = {1: "32-bit", 2: "64-bit"}.get(ident[4], "unknown-class")
        order = {1: "little-endian", 2: "big-endian"}.get(ident[5], "unknown-order")
        raise BadInputError(
            f"{path} is a {width} {order} ELF file",
            hint="only 64-bit little-endian ELF (x86-64 or aarch64 Linux modules) can be read",
        )
    header = unpack(_EHDR, data, 0, end, "ELF header")
    shoff, shentsize, shnum, shstrndx = header[6], header[11], header[12], header[13]
    if shoff == 0:
        raise FormatError("no section headers (stripped with sstrip?): its sections cannot be found")
    if shentsize != _SHDR.size:
        raise FormatError(f"section header size is {shentsize}, not {_SHDR.size}")
    first = unpack(_SHDR, data, shoff, end, "section header 0")
    shnum = shnum or first[5]  # extended numbering: the count is in section 0's sh_size
    shstrndx = first[6] if shstrndx == _SHN_XINDEX else shstrndx
    if shoff + shnum * _SHDR.size > end:
        raise FormatError(f"the section header table ({shnum} sections) runs past the end of the file")
    table = [_SHDR.unpack_from(data, shoff + i * _SHDR.size) for i in range(shnum)]
    if not 0 < shstrndx < shnum:
        raise FormatError(f"the section name table index {shstrndx} is out of range")
    names_at, names_size = table[shstrndx][4], table[shstrndx][5]
    if names_at + names_size > end:
        raise FormatError("the section name table runs past the end of the file")
    names = bytes(data[names_at : names_at + names_size])
    for name_at, kind, _, _, offset, size, *_ in table:
        stop = names.find(b"\0", name_at)
        name = names[name_at : stop if stop >= 0 else None].decode("ascii", "replace")
        if kind == _SHT_NOBITS or size == 0:
            continue
        if offset + size > end:
            raise FormatError(f"section {name} runs past the end of the file")
        yield name, offset, size


def _scan(data: Buffer, path: Path) -> Iterator[formats.Found]:
    for name, offset, size in sections(data, path):
        if name in formats.FATBIN_SECTIONS:
            yield from formats.fatbin_entries(data, offset, offset + size)
        elif name == formats.BUNDLE_SECTION:
            yield from formats.bundle_targets(data, offset, offset + size)
        elif name.startswith(formats.BUNDLE_PREFIX):
            # A -fgpu-rdc object: one section per target, the bundle id in the section's name.
            target = formats.bundle_target(name[len(formats.BUNDLE_PREFIX) :])
            if target is not None:
                yield target
