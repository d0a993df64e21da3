"""The op registry: every op this process knows, by name, and where each came from.

Ours are fixed; op packages add theirs (``op_sources``): installed distributions through the
``op_builder.ops`` entry points, directories through ``DS_OP_SOURCES``. ``ALL_OPS`` is a
read-only view that follows ``DS_OP_SOURCES`` as it is when read, so setting the variable (or
``--op-source`` on a command line) is all it takes to see a package's ops everywhere.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType

from op_builder.builder import OpBuilder
from op_builder.errors import UnknownOpError
from op_builder.op_sources import (
    BUILTIN,
    SOURCES_VARIABLE,
    OpOrigin,
    OpSourceError,
    check_builder,
    directory_builders,
    entry_point_builders,
    sources_from_env,
)
from op_builder.ops.async_io import AsyncIOBuilder
from op_builder.ops.cpu_adagrad import CPUAdagradBuilder
from op_builder.ops.cpu_adam import CPUAdamBuilder
from op_builder.ops.cpu_lion import CPULionBuilder
from op_builder.ops.fp_quantizer import FPQuantizerBuilder
from op_builder.ops.fused_optim import FusedAdamBuilder, FusedLambBuilder, FusedLionBuilder
from op_builder.ops.quantizer import QuantizerBuilder
from op_builder.ops.transformer import TransformerBuilder
from op_builder.suggest import did_you_mean

_BUILDERS: tuple[OpBuilder, ...] = (
    CPUAdamBuilder(),
    CPUAdagradBuilder(),
    CPULionBuilder(),
    AsyncIOBuilder(),
    FusedAdamBuilder(),
    FusedLambBuilder(),
    FusedLionBuilder(),
    TransformerBuilder(),
    QuantizerBuilder(),
    FPQuantizerBuilder(),
)

BUILTIN_OPS: Mapping[str, OpBuilder] = MappingProxyType({b.name: b for b in _BUILDERS})


@dataclass(frozen=True)
class Registry:
    """Every known op in order (ours first, then each package's), with its origin."""

    ops: Mapping[str, OpBuilder]
    origins: Mapping[str, OpOrigin]


_ENTRY_POINTS: list[tuple[OpBuilder, OpOrigin]] | None = None
_BY_SOURCES: dict[tuple[Path, ...], Registry] = {}


def registry_for(sources: Sequence[Path] = ()) -> Registry:
    """Ours, the installed packages' and those in the ``sources`` directories (a folder named
    twice counts once); OpSourceError for a package that cannot be used or a name two ops share."""
    key = tuple(dict.fromkeys(Path(s).expanduser().resolve() for s in sources))
    found = _BY_SOURCES.get(key)
    if found is None:
        found = _BY_SOURCES[key] = _assemble(key)
    return found


def _assemble(sources: tuple[Path, ...]) -> Registry:
    global _ENTRY_POINTS
    if _ENTRY_POINTS is None:
        _ENTRY_POINTS = entry_point_builders()
    ops: dict[str, OpBuilder] = dict(BUILTIN_OPS)
    origins: dict[str, OpOrigin] = dict.fromkeys(BUILTIN_OPS, BUILTIN)
    seen_dirs = {origin.root for _, origin in _ENTRY_POINTS}
    extra = [pair for path in sources if path not in seen_dirs for pair in directory_builders(path)]
    for builder, origin in (*_ENTRY_POINTS, *extra):
        check_builder(builder, origin)
        if builder.name in ops:
            first = origins[builder.name]
            raise OpSourceError(
                f"op {builder.name!r} from {origin.describe()} clashes with the op of that name from "
                + first.describe(),
                hint="rename one of them (its builder's name attribute): op names are unique",
            )
        ops[builder.name] = builder
        origins[builder.name] = origin
    return Registry(MappingProxyType(ops), MappingProxyType(origins))


def current() -> Registry:
    """The registry for this process's ``DS_OP_SOURCES``."""
    return registry_for(sources_from_env(os.environ))


class _CurrentOps(Mapping[str, OpBuilder]):
    """``current().ops``, read afresh on every use (a Mapping, read-only)."""

    def __getitem__(self, name: str) -> OpBuilder:
        return current().ops[name]

    def __iter__(self) -> Iterator[str]:
        return iter(current().ops)

    def __len__(self) -> int:
        return len(current().ops)

    def __repr__(self) -> str:
        return f"ALL_OPS({list(self)})"


ALL_OPS: Mapping[str, OpBuilder] = _CurrentOps()


def origin_of(name: str) -> OpOrigin:
    return current().origins[name]


def get_builder(name: str) -> OpBuilder:
    """The builder for ``name``; UnknownOpError (with a suggestion) otherwise."""
    builtin = BUILTIN_OPS.get(name)
    if builtin is not None and not os.environ.get(SOURCES_VARIABLE):
        # Loading one of ours must not pay for scanning every installed distribution.
        return builtin
    check_op_names([name])
    return ALL_OPS[name]


def check_op_names(names: Iterable[str], registry: Registry | None = None) -> None:
    """The one unknown-op check: UnknownOpError with "did you mean" for the first unknown name."""
    known = (registry or current()).ops
    for name in names:
        if name not in known:
            raise UnknownOpError(
                f"unknown op {name!r}",
                hint=did_you_mean(name, known) or "known ops: " + ", ".join(known),
            )
