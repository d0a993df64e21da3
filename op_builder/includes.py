"""What a C++ / CUDA source includes, read from the text: one scanner for the JIT cache's key
(``loader.build_key``: which project headers a change must rebuild for) and the compile cost
(``parallel_build.op_cost``: does a TU parse torch's whole C++ API).

A header can be named by a macro as well as by an ``#include`` line: the CPU optimizers name
their kernel header once (``#define CPU_OPTIM_KERNEL "cpu_adam_impl.h"``) and a shared
dispatcher includes it for every instruction set (``#include CPU_OPTIM_KERNEL``). A string
macro that names a header found in the search folders counts as included: at worst an op
rebuilds for a header it names but never includes, never the other way round.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

_INCLUDE = re.compile(rb'^\s*#\s*include\s*[<"]([^>"]+)[>"]', re.MULTILINE)
_HEADER_MACRO = re.compile(rb'^\s*#\s*define\s+\w+\s+[<"]([^>"\s]+\.(?:h|hh|hpp|cuh|inc))[>"]', re.MULTILINE)


@dataclass(frozen=True)
class Includes:
    files: tuple[Path, ...]  # the sources and every project header found, resolved, sorted
    names: frozenset[str]  # every name included or macro-named, found or not (<vector> too)


def scan(sources: Iterable[Path], search: Sequence[Path]) -> Includes:
    """Follow ``sources``' includes transitively through the headers found next to the including
    file or in ``search``; system and torch headers are named, not followed."""
    seen: dict[Path, None] = {}
    names: set[str] = set()
    pending = list(sources)
    while pending:
        path = pending.pop()
        if path in seen or not path.is_file():
            continue
        seen[path] = None
        text = path.read_bytes()
        for raw in (*_INCLUDE.findall(text), *_HEADER_MACRO.findall(text)):
            name = raw.decode(errors="replace")
            names.add(name)
            for folder in (path.parent, *search):
                if (folder / name).is_file():
                    pending.append((folder / name).resolve())
                    break
    return Includes(tuple(sorted(seen)), frozenset(names))
