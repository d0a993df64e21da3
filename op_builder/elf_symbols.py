"""The symbols a shared object takes from others: its undefined dynamic symbols, read with the
standard library only (runtime images have no ``nm``). Layout from the System V gABI (``elf(5)``):
``.dynsym`` holds ``Elf64_Sym`` entries, their names in ``.dynstr``."""

from __future__ import annotations

import struct
from pathlib import Path

from op_builder.binary import CORRUPT_HINT, sections
from op_builder.binary_formats import FormatError
from op_builder.errors import BadInputError

# st_name, st_info, st_other, st_shndx, st_value, st_size
_SYM = struct.Struct("<IBBHQQ")
_SHN_UNDEF = 0


def undefined_symbols(path: str | Path) -> tuple[str, ...]:
    """The names ``path`` needs from other libraries, sorted; BadInputError when it cannot be read."""
    path = Path(path)
    try:
        data = path.read_bytes()
    except OSError as err:
        raise BadInputError(f"cannot read {path}: {err.strerror or err}", hint="check the path") from err
    try:
        found = {name: (offset, size) for name, offset, size in sections(data, path)}
        if ".dynsym" not in found or ".dynstr" not in found:
            return ()
        sym_at, sym_size = found[".dynsym"]
        str_at, str_size = found[".dynstr"]
        strings = data[str_at : str_at + str_size]
        names = set()
        for at in range(sym_at, sym_at + sym_size - _SYM.size + 1, _SYM.size):
            name_at, _, _, section, _, _ = _SYM.unpack_from(data, at)
            if section != _SHN_UNDEF or name_at == 0:
                continue
            if name_at >= len(strings):
                raise FormatError(f"a symbol's name is outside .dynstr (offset {name_at})")
            end = strings.find(b"\0", name_at)
            names.add(strings[name_at : end if end >= 0 else None].decode("ascii", "replace"))
    except FormatError as err:
        raise BadInputError(f"{path}: {err}", hint=CORRUPT_HINT) from err
    # A versioned reference reads "GOMP_parallel" here; nm shows it as "GOMP_parallel@GOMP_4.0".
    return tuple(sorted(names))
