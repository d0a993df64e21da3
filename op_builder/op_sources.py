"""Op packages from outside this distribution: where they are found, and what makes one valid.

An op package is a Python package whose ``builders`` module defines builder classes in
declarative form (``name``, ``sources``, limits, runtime packages), with its C++/CUDA sources
beside them; ours are op packages too (``kernels/optim``, ...), which ``registry`` names itself.
Another is found two ways:

* an installed distribution registers it under the entry-point group ``op_builder.ops``; an
  entry point names a builder class (``my_rmsnorm = my_ops.builders:RMSNormBuilder``) or a
  module, whose builder classes all count;
* a directory is named explicitly: ``DS_OP_SOURCES`` (``os.pathsep``-separated; what
  ``setup.py`` / ``pip wheel`` and every ``python -m op_builder`` command read), or
  ``--op-source DIR`` on the command lines. The directory is the package itself
  (``my_ops/`` with ``__init__.py`` and ``builders.py``); its parent goes on ``sys.path`` so the
  package, its front and its self-test import under their own name.

Every problem (a package that does not import or exits while importing, a builder attribute of
the wrong type, a source that is not there or lies outside the package, a package or op name
Python cannot import, a bad arch limit) is an ``OpSourceError``: exit 2, naming the file. Name
clashes are the registry's to find, since only it sees every op at once.
"""

from __future__ import annotations

import importlib
import importlib.util
import inspect
import keyword
import os
import re
import sys
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Literal

from op_builder import settings
from op_builder.archs import ArchLimits
from op_builder.builder import CPUOpBuilder, CUDAOpBuilder, OpBuilder, SystemLibrary
from op_builder.errors import BadInputError, OpBuilderError
from op_builder.paths import SHARED_INCLUDE_DIR

ENTRY_POINT_GROUP = "op_builder.ops"
SOURCES_VARIABLE = settings.OP_SOURCES.name
BUILDERS_MODULE = "builders"
# The name becomes DS_BUILD_<NAME>, a module name and an image label: keep it to what all three take.
OP_NAME = re.compile(r"[a-z][a-z0-9_]*\Z")
# Top-level packages of this distribution: an op package of one of these names would shadow ours
# in an image (or be shadowed by them), whatever this host has installed.
OUR_PACKAGES = ("kernels", "op_builder", "imagegen")

OriginKind = Literal["builtin", "entry point", "directory"]


class OpSourceError(BadInputError, OpBuilderError):
    """An op package that cannot be used: not importable, an invalid builder, a clashing name."""


@dataclass(frozen=True)
class OpOrigin:
    """Where an op's builder came from."""

    kind: OriginKind
    where: str  # the directory, the entry point ("my_rmsnorm = my_ops.builders:X"), or "op_builder"
    package: str | None = None  # the op package's import name; None for ours
    root: Path | None = None  # the op package's directory; None for ours

    @property
    def external(self) -> bool:
        return self.kind != "builtin"

    def describe(self) -> str:
        return "op_builder" if self.kind == "builtin" else f"{self.kind} {self.where}"

    def to_json(self) -> dict[str, str | None]:
        return {
            "kind": self.kind,
            "where": self.where,
            "package": self.package,
            "root": str(self.root) if self.root else None,
        }


BUILTIN = OpOrigin("builtin", "op_builder")


def split_dirs(text: str) -> tuple[str, ...]:
    """The folders of an ``os.pathsep``-separated list (``DS_OP_SOURCES``, ``IMAGEGEN_OP_SOURCES``)."""
    return tuple(p for p in text.split(os.pathsep) if p.strip())


def sources_from_env(env: Mapping[str, str]) -> tuple[Path, ...]:
    """The directories ``DS_OP_SOURCES`` names, absolute, in order, without repeats."""
    dirs = (_resolved(Path(p)) for p in split_dirs(env.get(SOURCES_VARIABLE, "")))
    return tuple(dict.fromkeys(dirs))


def source_dirs(env: Mapping[str, str], extra: Sequence[str]) -> tuple[Path, ...]:
    """``DS_OP_SOURCES``'s folders, then ``extra``'s (``--op-source``, each checked), without repeats."""
    return tuple(dict.fromkeys([*sources_from_env(env), *(check_package_dir(Path(p)) for p in extra)]))


# ------------------------------------------------------------------ directories


def _resolved(path: Path) -> Path:
    """``path`` made absolute, its links followed; OpSourceError when it cannot be looked up.

    A name longer than the file system allows (OSError), a loop of symbolic links or a ``~user``
    with no home (RuntimeError, from pathlib) would otherwise escape as a traceback, from every
    command that reads ``DS_OP_SOURCES`` or ``--op-source``.
    """
    text = str(path)
    shown = text if len(text) <= 120 else text[:80] + "..." + text[-30:]
    try:
        root = path.expanduser().resolve()
        root.is_dir()  # what follows asks this too: a failure to look it up is met here, once
    except OSError as exc:
        problem = (exc.strerror or str(exc)).lower()
    except RuntimeError as exc:  # "Symlink loop from ...", "Could not determine home directory"
        problem = "a symbolic link in it points back at itself" if "loop" in str(exc).lower() else str(exc)
    else:
        return root
    raise OpSourceError(
        f"op source {shown} cannot be looked up: {problem}",
        hint=f"fix the path where it is named ({SOURCES_VARIABLE} or --op-source): a file name has "
        "at most 255 bytes on most file systems, and a link must not point back at itself",
    )


def check_package_dir(path: Path) -> Path:
    """``path`` resolved, or OpSourceError saying what an op package directory needs."""
    root = _resolved(path)
    if not root.is_dir():
        raise OpSourceError(
            f"op source {path} is not a directory",
            hint="pass the op package's folder (the one holding __init__.py and builders.py)",
        )
    missing = [name for name in ("__init__.py", f"{BUILDERS_MODULE}.py") if not (root / name).is_file()]
    if missing:
        raise OpSourceError(
            f"op source {root} is not an op package: no {' or '.join(missing)}",
            hint="imagegen new-op NAME writes a package to start from",
        )
    if not root.name.isidentifier() or keyword.iskeyword(root.name):
        raise OpSourceError(
            f"op source {root}: {root.name!r} cannot be imported as a Python package",
            hint="rename the folder to a Python identifier that is not a keyword, e.g. "
            + (f"{root.name}_ops" if keyword.iskeyword(root.name) else re.sub(r"\W", "_", root.name)),
        )
    shadowed = _shadowed(root)
    if shadowed is not None:
        raise OpSourceError(
            f"op source {root}: the package name {root.name!r} is taken by {shadowed}",
            hint="rename the op package's folder: it is imported by that name, in the image too",
        )
    return root


def _shadowed(root: Path) -> str | None:
    """What else answers to ``import <root.name>`` (ours, the standard library, an installed
    package), or None when nothing does or it is this folder itself."""
    name = root.name
    if name in OUR_PACKAGES:
        return f"imagegen's own package {name!r}"
    if name in sys.stdlib_module_names:
        return f"the standard library's module {name!r}"
    try:
        spec = importlib.util.find_spec(name)
    except (ImportError, ValueError):  # a broken installed package of that name: still taken
        return f"an installed package {name!r} (which does not import)"
    if spec is None:
        return None
    places = list(spec.submodule_search_locations or [])
    if not places and spec.origin:
        places = [str(Path(spec.origin).parent)]
    if any(Path(place).resolve() == root for place in places):
        return None
    return f"the package {name!r} at {places[0] if places else spec.origin}"


def directory_builders(path: Path) -> list[tuple[OpBuilder, OpOrigin]]:
    """The builders of the op package at ``path``."""
    root = check_package_dir(path)
    _import_path(root)
    module = _import(f"{root.name}.{BUILDERS_MODULE}", root / f"{BUILDERS_MODULE}.py")
    package_file = getattr(sys.modules.get(root.name), "__file__", None)
    if package_file is None or Path(package_file).resolve().parent != root:
        raise OpSourceError(
            f"op source {root}: another package named {root.name!r} was imported first"
            + (f" (from {Path(package_file).parent})" if package_file else ""),
            hint="give the op package a name no other installed package has",
        )
    origin = OpOrigin("directory", str(root), root.name, root)
    return [(builder, origin) for builder in builders_in(module)]


def _import_path(root: Path) -> None:
    parent = str(root.parent)
    if parent not in sys.path:
        sys.path.append(parent)


def _import(module_name: str, file: Path | str) -> ModuleType:
    try:
        return importlib.import_module(module_name)
    except KeyboardInterrupt:
        raise
    # Any failure of the user's module is theirs to see, named; sys.exit() too, which would
    # otherwise end the command with its code (0) and no output.
    except BaseException as exc:
        hint = "fix the module; python -c 'import " + module_name + "' shows the traceback"
        if isinstance(exc, SystemExit):
            hint = "remove the sys.exit() call: every op_builder and imagegen command imports the module"
        raise OpSourceError(
            f"op package module {module_name} ({file}) does not import: {_describe(exc)}", hint=hint
        ) from None


def _describe(exc: BaseException) -> str:
    if isinstance(exc, SystemExit):
        return f"it called sys.exit({exc.code!r}) while importing"
    return f"{type(exc).__name__}: {exc}"


def builders_in(module: ModuleType) -> Iterator[OpBuilder]:
    """Every concrete builder class the module defines (classes without a name are bases)."""
    for _, cls in inspect.getmembers(module, inspect.isclass):
        if cls.__module__ == module.__name__ and issubclass(cls, OpBuilder) and hasattr(cls, "name"):
            yield _instantiate(cls)


def _instantiate(cls: type[OpBuilder]) -> OpBuilder:
    try:
        return cls()
    except KeyboardInterrupt:
        raise
    except BaseException as exc:  # the package's own __init__, if it has one
        file = inspect.getsourcefile(cls) or cls.__module__
        raise OpSourceError(
            f"{cls.__name__} in {file}: making the builder failed: {_describe(exc)}",
            hint="builders are declarative: set class attributes, and leave __init__ to op_builder",
        ) from None


# ------------------------------------------------------------------ installed distributions


def entry_point_builders() -> list[tuple[OpBuilder, OpOrigin]]:
    """The builders installed distributions register under ``op_builder.ops``."""
    # Deferred: scanning the installed distributions costs ~50 ms, paid only when a command
    # needs every op (a load of one of ours never does).
    from importlib.metadata import entry_points

    found: list[tuple[OpBuilder, OpOrigin]] = []
    for point in sorted(entry_points(group=ENTRY_POINT_GROUP), key=lambda p: p.name):
        where = f"{point.name} = {point.value}"
        dist = getattr(point, "dist", None)
        if dist is not None:
            where = f"{dist.metadata['Name']} {dist.version}: {where}"
        try:
            target = point.load()
        except KeyboardInterrupt:
            raise
        except BaseException as exc:  # a broken installed package (sys.exit included): say which one
            raise OpSourceError(
                f"the op package entry point {where} does not load: {_describe(exc)}",
                hint="fix or uninstall that distribution (pip uninstall ...)",
            ) from None
        package = point.value.split(":")[0].split(".")[0]
        module = sys.modules.get(package)
        root = Path(module.__file__).resolve().parent if module and module.__file__ else None
        origin = OpOrigin("entry point", where, package, root)
        if inspect.ismodule(target):
            found += [(builder, origin) for builder in builders_in(target)]
        elif inspect.isclass(target) and issubclass(target, OpBuilder):
            found.append((_instantiate(target), origin))
        else:
            raise OpSourceError(
                f"the op package entry point {where} names {target!r}, not a builder class or module",
                hint="point it at an OpBuilder subclass (module:Class) or at the module defining them",
            )
    return found


# ------------------------------------------------------------------ validity


def check_builder(builder: OpBuilder, origin: OpOrigin) -> None:
    """OpSourceError when ``builder`` cannot be built as declared, naming its file."""
    cls = type(builder)
    file = inspect.getsourcefile(cls) or cls.__module__
    where = f"{cls.__name__} in {file}"
    name = getattr(cls, "name", None)
    if not isinstance(name, str) or not OP_NAME.match(name) or keyword.iskeyword(name):
        raise OpSourceError(
            f"{where}: op name {name!r} is not valid",
            hint="lower case letters, digits and '_', starting with a letter, and not a Python keyword "
            "(it becomes DS_BUILD_<NAME> and the module kernels._ops.<name>)",
        )
    if not isinstance(builder, (CPUOpBuilder, CUDAOpBuilder)):
        raise OpSourceError(
            f"{where}: {name} derives from neither CPUOpBuilder nor CUDAOpBuilder",
            hint="subclass op_builder.CPUOpBuilder (C++ only) or op_builder.CUDAOpBuilder (device code)",
        )
    _check_attribute_types(builder, where)
    if not builder.sources:
        raise OpSourceError(f"{where}: {name} lists no sources", hint="set sources = ('csrc/my_op.cpp', ...)")
    _check_within(builder, origin, where)
    missing = [s for s, path in zip(builder.sources, builder.source_paths()) if not Path(path).is_file()]
    if missing:
        raise OpSourceError(
            f"{where}: {name}'s source {missing[0]} is not in {builder.source_dir()}",
            hint="sources are relative to the op package's folder (or its source_root)",
        )
    if isinstance(builder, CUDAOpBuilder):
        flags = builder.nvcc_flags
        if not (isinstance(flags, tuple) and all(isinstance(f, str) for f in flags)):
            raise OpSourceError(
                f"{where}: {name}'s nvcc_flags {flags!r} is not a tuple of strings",
                hint='e.g. nvcc_flags = ("-ftz=false",)',
            )
        problem = _limits_problem(builder.arch_limits)
        if problem:
            raise OpSourceError(
                f"{where}: {name}'s arch_limits {problem}", hint="e.g. ArchLimits(min_capability=(8, 0))"
            )
    if not isinstance(builder.selftest, (str, type(None))) or (
        builder.selftest and ":" not in builder.selftest
    ):
        raise OpSourceError(
            f"{where}: {name}'s selftest {builder.selftest!r} is not 'module:function'",
            hint=f"e.g. selftest = '{origin.package or 'my_ops'}.selftest:run'",
        )


# The declarative attributes that are tuples of strings, with an example of each.
_STRING_TUPLES = {
    "sources": '("csrc/my_op.cpp",)',
    "include_dirs": '("includes",)',
    "runtime_packages": '("libgomp1",)',
    "defines": '("-DMY_OP_FAST",)',
}


def _check_attribute_types(builder: OpBuilder, where: str) -> None:
    """OpSourceError naming the attribute when a declarative attribute has the wrong type: the
    flag and package code would otherwise fail on it later with a traceback, or (a string where a
    tuple belongs: ``("x.cpp")`` without its comma) read it character by character."""
    for attribute, example in _STRING_TUPLES.items():
        value = getattr(builder, attribute)
        if isinstance(value, tuple) and all(isinstance(item, str) and item for item in value):
            continue
        fix = f"write ({value!r},): the trailing comma makes a tuple" if isinstance(value, str) else ""
        raise OpSourceError(
            f"{where}: {builder.name}'s {attribute} {value!r} is not a tuple of strings",
            hint=fix or f"e.g. {attribute} = {example}",
        )
    if not isinstance(builder.description, str):
        raise OpSourceError(
            f"{where}: {builder.name}'s description {builder.description!r} is not a string",
            hint='e.g. description = "what the op computes"',
        )
    root = type(builder).source_root
    if root is not None and not isinstance(root, (str, os.PathLike)):
        raise OpSourceError(
            f"{where}: {builder.name}'s source_root {root!r} is not a path",
            hint="leave source_root unset: sources are relative to the op package's folder",
        )
    libraries = builder.system_libraries
    if not (isinstance(libraries, tuple) and all(isinstance(lib, SystemLibrary) for lib in libraries)):
        raise OpSourceError(
            f"{where}: {builder.name}'s system_libraries {libraries!r} is not a tuple of SystemLibrary",
            hint="e.g. system_libraries = (SystemLibrary('aio', 'libaio.h', 'io_submit', ...),)",
        )


def _check_within(builder: OpBuilder, origin: OpOrigin, where: str) -> None:
    """OpSourceError for a source or include dir outside the op package's folder (a directory
    package: an image is built from that folder alone, so the build would not find it there), or
    outside the folder the sources are relative to (an installed one). The one folder outside it
    an include dir may be is ``SHARED_INCLUDE_DIR``: its headers come with op_builder itself."""
    base = builder.source_dir()
    limit = origin.root if origin.kind == "directory" and origin.root is not None else base.resolve()
    shared = Path(SHARED_INCLUDE_DIR).resolve()
    for attribute, entries in (("source", builder.sources), ("include dir", builder.include_dirs)):
        for entry in entries:
            found = (base / entry).resolve()
            if found.is_relative_to(limit) or (attribute == "include dir" and found == shared):
                continue
            hint = (
                "an image is built from the package's folder alone: move the file into it and name "
                "it relative to the folder"
            )
            if attribute == "include dir":
                hint += "; for op_abi.h and the other shared headers, name op_builder.SHARED_INCLUDE_DIR"
            raise OpSourceError(
                f"{where}: {builder.name}'s {attribute} {entry} lies outside the op package {limit}",
                hint=hint,
            )


def _limits_problem(limits: ArchLimits) -> str | None:
    if not isinstance(limits, ArchLimits):
        return f"are {limits!r}, not an ArchLimits"
    bounds: Sequence[object] = (limits.min_capability, limits.max_capability)
    for bound in bounds:
        if bound is None:
            continue
        if not (
            isinstance(bound, tuple)
            and len(bound) == 2
            and all(isinstance(part, int) and not isinstance(part, bool) and part >= 0 for part in bound)
        ):
            return f"bound {bound!r} is not a (major, minor) capability such as (8, 0)"
    low, high = limits.min_capability, limits.max_capability
    if low is not None and high is not None and low > high:
        return f"admit nothing: the minimum {low} is above the maximum {high}"
    return None
