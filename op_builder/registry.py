"""The op registry: every op this process knows, by name, and where each came from.

Ours are op packages of this distribution, one per family folder of ``kernels/`` (``kernels.optim``,
``kernels.aio``, ...): every folder of the ``kernels`` package that is a package with a ``builders``
module is a family, found by listing the folder and importing each one's ``builders`` module, so a
new family needs no edit here. op_builder never imports kernels by a static import, and a builders
module imports neither torch nor the fronts. Other op packages add theirs (``op_sources``):
installed distributions through the ``op_builder.ops`` entry points, directories through
``DS_OP_SOURCES``. ``ALL_OPS`` is a read-only view that follows ``DS_OP_SOURCES`` as it is when
read, so setting the variable (or ``--op-source`` on a command line) is all it takes to see a
package's ops everywhere.

The order every listing shows our ops in (report, plan, verify, list, rendered Dockerfiles) is
declared by the families themselves: CPU ops first, then GPU ops; each by the family's rank (its
builders module's ``FAMILY_RANK``; a family without one comes after those with one, then by folder
name), then in the order the builders module defines them.
"""

from __future__ import annotations

import importlib
import os
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from types import MappingProxyType, ModuleType
from typing import TYPE_CHECKING

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

# The package our op families are folders of.
KERNELS_PACKAGE = "kernels"
# What a family's builders module sets to say where its ops come among ours (see the module's doc).
RANK_ATTRIBUTE = "FAMILY_RANK"


@dataclass(frozen=True)
class Family:
    """One family of our ops: a folder of ``kernels/`` with its builders module."""

    package: str  # the import name, "kernels.optim"
    rank: int | None  # its FAMILY_RANK; None: after every family that has one
    builders: tuple[OpBuilder, ...]  # in the order its builders module defines them


def families_in(package: str = KERNELS_PACKAGE) -> tuple[Family, ...]:
    """The op families of ``package`` (ours: ``kernels``), ordered by rank, then folder name.

    A family is a folder of the package that is itself a package with a ``builders`` module.
    Imports ``package`` and each family's builders module, nothing else; OpSourceError when one
    does not import or declares a rank that is not an integer.
    """
    parent = _import(package)
    folders = [Path(folder) for folder in getattr(parent, "__path__", ())]
    names = sorted({entry.name for folder in folders for entry in folder.iterdir() if _is_family(entry)})
    families = [_family(f"{package}.{name}") for name in names]
    # sorted() is stable: families of one rank (or none) stay in folder-name order.
    return tuple(sorted(families, key=lambda f: (f.rank is None, f.rank or 0)))


def _is_family(entry: Path) -> bool:
    return (
        entry.name.isidentifier()
        and (entry / "__init__.py").is_file()
        and (entry / f"{BUILDERS_MODULE}.py").is_file()
    )


def _family(package: str) -> Family:
    module = _import(f"{package}.{BUILDERS_MODULE}")
    rank = getattr(module, RANK_ATTRIBUTE, None)
    if rank is not None and (isinstance(rank, bool) or not isinstance(rank, int)):
        raise OpSourceError(
            f"{module.__file__}: {RANK_ATTRIBUTE} {rank!r} is not an integer",
            hint=f"e.g. {RANK_ATTRIBUTE} = 50: where the family's ops come among ours, lowest first",
        )
    # builders_in yields them by class name; a module's namespace keeps the order of definition.
    position = {name: i for i, name in enumerate(vars(module))}
    builders = sorted(builders_in(module), key=lambda b: position.get(type(b).__name__, len(position)))
    return Family(package, rank, tuple(builders))


def _import(name: str) -> ModuleType:
    try:
        return importlib.import_module(name)
    except KeyboardInterrupt:
        raise
    # A family that does not import (one being written, say) is named, not a traceback of every
    # command; OP_BUILDER_DEBUG=1 still shows the chained one.
    except BaseException as exc:
        raise OpSourceError(
            f"our op family module {name} does not import: {type(exc).__name__}: {exc}",
            hint=f"fix the module; python -c 'import {name}' shows the traceback",
        ) from exc


def in_listing_order(families: Iterable[Family]) -> list[OpBuilder]:
    """The families' ops in the order every listing shows ours: CPU ops first, then GPU ops,
    each by family (``families`` is in rank order), then as its builders module defines them."""
    return sorted((b for family in families for b in family.builders), key=lambda b: b.target != "cpu")


@cache
def our_families() -> tuple[Family, ...]:
    """Our op families (``kernels/*``), found and imported once per process."""
    return families_in(KERNELS_PACKAGE)


def kernels_folder() -> Path:
    """The folder our families are folders of (the ``kernels`` package's): where a new one goes."""
    return Path(next(iter(_import(KERNELS_PACKAGE).__path__))).resolve()


def our_op_packages() -> tuple[str, ...]:
    """Our families' import names, in rank order (``kernels.optim``, ``kernels.aio``, ...)."""
    return tuple(family.package for family in our_families())


if TYPE_CHECKING:
    # our_op_packages(), for the modules that import the name: read when first asked for, since
    # finding the families imports their builders modules, which importing op_builder must not.
    OUR_OP_PACKAGES: tuple[str, ...]
else:

    def __getattr__(name: str) -> tuple[str, ...]:
        if name == "OUR_OP_PACKAGES":
            return our_op_packages()
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


@cache
def builtin_ops() -> Mapping[str, OpBuilder]:
    """Our ops by name, in listing order: each family's ``builders`` module, imported once."""
    return MappingProxyType({b.name: b for b in in_listing_order(our_families())})


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
