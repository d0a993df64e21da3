"""The op registry: every op this process knows, by name, and where each came from.

Ours are op packages of this distribution (``kernels.optim``, ``kernels.aio``, ...), named here
by import name and found by importing each one's ``builders`` module: op_builder never imports
kernels by a static import, and a builders module imports neither torch nor the fronts. Other op
packages add theirs (``op_sources``): installed distributions through the ``op_builder.ops``
entry points, directories through ``DS_OP_SOURCES``. ``ALL_OPS`` is a
read-only view that follows ``DS_OP_SOURCES`` as it is when read, so setting the variable (or
``--op-source`` on a command line) is all it takes to see a package's ops everywhere.
"""

from __future__ import annotations

import importlib
import os
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from types import MappingProxyType

from op_builder.builder import OpBuilder
from op_builder.errors import UnknownOpError
from op_builder.op_sources import (
    BUILDERS_MODULE,
    BUILTIN,
    SOURCES_VARIABLE,
    OpOrigin,
    OpSourceError,
    builders_in,
    check_builder,
    directory_builders,
    entry_point_builders,
    sources_from_env,
)
from op_builder.suggest import did_you_mean

# The distribution's own op packages, by import name: each is a folder of kernels/ with its
# builders, sources, front and self-test (an op package like any other, found without a scan).
OUR_OP_PACKAGES = ("kernels.optim", "kernels.aio", "kernels.transformer", "kernels.quantization")
# The order every listing shows our ops in (report, plan, verify); an op missing here comes last.
OUR_ORDER = (
    "cpu_adam",
    "cpu_adagrad",
    "cpu_lion",
    "async_io",
    "fused_adam",
    "fused_lamb",
    "fused_lion",
    "transformer",
    "quantizer",
    "fp_quantizer",
)


@cache
def builtin_ops() -> Mapping[str, OpBuilder]:
    """Our ops by name, in ``OUR_ORDER``: each package's ``builders`` module, imported once."""
    found = [
        builder
        for package in OUR_OP_PACKAGES
        for builder in builders_in(importlib.import_module(f"{package}.{BUILDERS_MODULE}"))
    ]
    rank = {name: i for i, name in enumerate(OUR_ORDER)}
    found.sort(key=lambda b: rank.get(b.name, len(rank)))
    return MappingProxyType({b.name: b for b in found})


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
    ours = builtin_ops()
    ops: dict[str, OpBuilder] = dict(ours)
    origins: dict[str, OpOrigin] = dict.fromkeys(ours, BUILTIN)
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
    builtin = builtin_ops().get(name)
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
