"""``imagegen new-op``: write the skeleton of an op package that builds and passes as written.

``imagegen new-op my_op`` writes ``./my_op_ops/``: the builder, a C++ / OpenMP kernel with its
torch binding (``--cuda``: CUDA device code, its launcher header and the binding), a front
with a PyTorch fallback, the self-test, a pytest file, a README and a ``.dockerignore`` that
keeps the last two out of images. The folder is the package
(``--op-source`` takes it as it is), and its name is the package's import name.

Everything is checked before anything is written: the op's name (lower case, not one that an
op already has), the package's name (an identifier that no importable package has), the target
(absent or an empty folder). The files are written into a temporary folder beside the target,
which is then renamed into place, so an interrupted run leaves no half-written package.
"""

from __future__ import annotations

import importlib.util
import keyword
import os
import secrets
import shlex
import shutil
import stat
from collections.abc import Mapping
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Annotated

import jinja2
import typer

from imagegen.commands._options import JsonOption, table_options
from imagegen.commands._output import emit_json
from imagegen.errors import BadInputError
from imagegen.files import make_dirs, stat_input
from op_builder.op_sources import OP_NAME
from op_builder.registry import current

NameArgument = Annotated[
    str,
    typer.Argument(metavar="NAME", help="The op's name: lower case, digits, '_' (becomes DS_BUILD_<NAME>)."),
]


@dataclass(frozen=True)
class Skeleton:
    """An op package to write: where, under which names, and each file's text by relative path."""

    op: str
    package: str
    root: Path
    cuda: bool
    files: Mapping[str, str]

    def next_commands(self) -> tuple[str, ...]:
        where = shlex.quote(str(self.root))
        target = "--cuda 12.8" if self.cuda else "--cpu"
        return (
            f"python -m op_builder selftest {self.op} --op-source {where}",
            f"python -m pytest {shlex.quote(str(self.root / 'tests'))}",
            f"imagegen build --op-source {where} --ops {self.op} {target}",
        )


def skeleton(op: str, root: Path, cuda: bool) -> Skeleton:
    """The package for op ``op`` at ``root``; BadInputError (exit 2) when it cannot be written there."""
    check_op_name(op)
    package = root.name
    # Where before what: a path the file system cannot take is the error to report, whatever
    # the folder's name would clash with.
    check_target(root)
    check_package_name(package, root)
    context = {
        "name": op,
        "package": package,
        "cuda": cuda,
        "base": "CUDAOpBuilder" if cuda else "CPUOpBuilder",
        "class_name": "".join(part.capitalize() for part in op.split("_")) + "Builder",
        "build_variable": f"DS_BUILD_{op.upper()}",
    }
    templates = {
        "__init__.py": "__init__.py.j2",
        "builders.py": "builders.py.j2",
        "front.py": "front.py.j2",
        "selftest.py": "selftest.py.j2",
        "README.md": "README.md.j2",
        ".dockerignore": "dockerignore.j2",
        "tests/__init__.py": "tests__init__.py.j2",
        f"tests/test_{op}.py": "test_op.py.j2",
    }
    if cuda:
        templates[f"csrc/{op}.cu"] = "op.cu.j2"
        templates[f"csrc/{op}_binding.cpp"] = "op_binding.cpp.j2"
        templates[f"includes/{op}.h"] = "op.h.j2"
    else:
        templates[f"csrc/{op}.cpp"] = "op.cpp.j2"
    environment = _environment()
    files = {
        path: environment.get_template(f"new_op/{name}").render(context) for path, name in templates.items()
    }
    return Skeleton(op, package, root, cuda, files)


def check_op_name(op: str) -> None:
    # op_builder's rule for every op name; the skeleton also uses it as a Python function name,
    # hence no keywords.
    if not OP_NAME.match(op) or keyword.iskeyword(op):
        raise BadInputError(
            f"{op!r} is not a valid op name",
            hint="use lower case letters, digits and '_', starting with a letter (e.g. acme_rmsnorm); "
            "it becomes DS_BUILD_<NAME> and a Python function name",
        )
    # Ours, installed op packages' (entry points) and DS_OP_SOURCES' ops: names are unique.
    taken = current()
    if op in taken.ops:
        raise BadInputError(
            f"op {op!r} exists already (from {taken.origins[op].describe()})",
            hint=f"op names are unique across every op package: pick another, e.g. acme_{op}",
        )


def check_package_name(package: str, root: Path) -> None:
    if not package.isidentifier() or keyword.iskeyword(package):
        raise BadInputError(
            f"the folder name {package!r} of {root} cannot be a Python package's name",
            hint="name the folder like a Python module: letters, digits and '_' (e.g. -o my_ops)",
        )
    try:
        spec = importlib.util.find_spec(package)
        origin = spec.origin if spec is not None else None
    except ValueError:  # imported already, without a spec (__main__)
        origin = "imported"
    # A namespace package (origin None) is only a folder on sys.path, perhaps the empty target.
    if origin is not None:
        raise BadInputError(
            f"a package named {package!r} is importable already ({origin}): the op package would "
            "clash with it",
            hint="name the folder something no installed package is called (-o DIR)",
        )


def check_target(root: Path) -> None:
    found = stat_input(root, "the folder")  # a name too long for the file system: bad input
    if found is None and not root.is_symlink():
        return
    if found is None or not stat.S_ISDIR(found.st_mode):
        raise BadInputError(f"{root} exists and is not a folder", hint="pick another folder (-o DIR)")
    if any(root.iterdir()):
        raise BadInputError(
            f"{root} exists and is not empty: nothing was written",
            hint="pick a new folder (-o DIR), or remove that one first",
        )


def write(package: Skeleton) -> None:
    """Write the files into a temporary folder beside the target, then rename it into place."""
    parent = package.root.parent
    make_dirs(parent)
    staging = parent / f".{package.root.name[:200]}.{secrets.token_hex(4)}.tmp"
    try:
        for relative, text in package.files.items():
            path = staging / relative
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text, encoding="utf-8")
        # rename(2) replaces an empty folder, and fails if the target gained files meanwhile.
        os.replace(staging, package.root)
    except OSError as exc:
        shutil.rmtree(staging, ignore_errors=True)
        reason = (exc.strerror or str(exc)).lower()
        raise BadInputError(
            f"cannot write {package.root}: {reason}; nothing was written",
            hint="check the folder's permissions and the free space, or pick another (-o DIR)",
        ) from None
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise


@lru_cache(maxsize=1)
def _environment() -> jinja2.Environment:
    return jinja2.Environment(
        loader=jinja2.PackageLoader("imagegen.commands", "templates"),
        undefined=jinja2.StrictUndefined,  # a missing value is a bug, not an empty line
        keep_trailing_newline=True,
        trim_blocks=True,
        lstrip_blocks=True,
        autoescape=False,
    )


@table_options("new-op")  # --cuda (a CUDA op, not a target) and --output: the table's rows
def new_op(
    name: NameArgument,
    cuda_op: bool = False,
    op_output: Path | None = None,
    json: JsonOption = False,
) -> None:
    """Write a working op package to start from: builder, kernel and binding, front, self-test, tests."""
    package = skeleton(name, op_output if op_output is not None else Path(f"{name}_ops"), cuda_op)
    write(package)
    files = sorted(package.files)
    if json:
        emit_json({
            "package": package.package,
            "op": package.op,
            "target": "gpu" if package.cuda else "cpu",
            "path": str(package.root.resolve()),
            "files": files,
            "next": list(package.next_commands()),
        })  # fmt: skip
        return
    kind = "CUDA" if cuda_op else "CPU"
    print(f"wrote the op package {package.package} ({kind} op {package.op}) in {package.root}:")
    for relative in files:
        print(f"  {relative}")
    print("next:")
    for command in package.next_commands():
        print(f"  {command}")
