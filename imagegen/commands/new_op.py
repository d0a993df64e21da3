"""``imagegen new-op``: write the skeleton of an op package that builds and passes as written.

``imagegen new-op my_op`` writes ``./my_op_ops/``: the builder, a C++ / OpenMP kernel with its
torch binding (``--cuda``: CUDA device code, its launcher header and the binding), a front
with a PyTorch fallback, the self-test, a pytest file, a README and a ``.dockerignore`` that
keeps the last two out of images. The folder is the package
(``--op-source`` takes it as it is), and its name is the package's import name. The op is a
stable-ABI one, as ours are: its binding is written once against ``op_abi.h`` (the builder lists
``op_builder.SHARED_INCLUDE_DIR``) and its builder declares ``stable_abi = "2.10"``.

``imagegen new-op my_op --in-tree`` writes a family of ours instead, in a source checkout:
``kernels/my_op/`` (builders with our shared headers and a ``FAMILY_RANK`` after the others', the
sources, a front over ``kernels._op_load`` with its fallback, the self-test) and its test,
``tests/kernels/test_my_op.py``. The registry finds the family as it is: no list to add it to.

Everything is checked before anything is written: the op's name (lower case, not one that an
op already has), the package's name (an identifier that no importable package has), the target
(absent or an empty folder; in-tree, a folder of ``kernels/`` and a test file not there yet). The
files are written into a temporary folder beside the target, which is then renamed into place, so
an interrupted run leaves no half-written package (an in-tree test file written first is removed).
"""

from __future__ import annotations

import importlib.util
import keyword
import os
import secrets
import shlex
import shutil
import stat
from collections.abc import Mapping, Sequence
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
from op_builder.registry import Family, current, kernels_folder, our_families

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
    # In-tree: the family's test, which goes beside our families' tests (tests/kernels/ of the
    # checkout), not into the package, which ships in the wheel and the images.
    test_file: Path | None = None
    test_text: str = ""

    def next_commands(self) -> tuple[str, ...]:
        where = shlex.quote(str(self.root))
        target = "--cuda 12.8" if self.cuda else "--cpu"
        if self.test_file is not None:
            return (
                f"python -m op_builder selftest {self.op}",
                f"python -m pytest {shlex.quote(str(self.test_file))}",
                f"imagegen build --ops {self.op} {target}",
            )
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
    templates = {
        "__init__.py": "__init__.py.j2",
        "builders.py": "builders.py.j2",
        "front.py": "front.py.j2",
        "selftest.py": "selftest.py.j2",
        "README.md": "README.md.j2",
        ".dockerignore": "dockerignore.j2",
        "tests/__init__.py": "tests__init__.py.j2",
        f"tests/test_{op}.py": "test_op.py.j2",
        **_source_templates(op, cuda),
    }
    return Skeleton(op, package, root, cuda, _render(templates, _context(op, package, cuda)))


def _context(op: str, package: str, cuda: bool) -> dict[str, object]:
    return {
        "name": op,
        "package": package,
        "cuda": cuda,
        "base": "CUDAOpBuilder" if cuda else "CPUOpBuilder",
        "class_name": "".join(part.capitalize() for part in op.split("_")) + "Builder",
        "build_variable": f"DS_BUILD_{op.upper()}",
    }


def _source_templates(op: str, cuda: bool) -> dict[str, str]:
    """The C++ / CUDA sources (and the launcher's header), by path in the package: one shape for
    an op package of one's own and a family of ours."""
    if cuda:
        return {
            f"csrc/{op}.cu": "op.cu.j2",
            f"csrc/{op}_binding.cpp": "op_binding.cpp.j2",
            f"includes/{op}.h": "op.h.j2",
        }
    return {f"csrc/{op}.cpp": "op.cpp.j2"}


def _render(templates: Mapping[str, str], context: Mapping[str, object]) -> dict[str, str]:
    """Each template of ``new_op/`` rendered, by the path it is written to."""
    environment = _environment()
    return {
        path: environment.get_template(f"new_op/{name}").render(context) for path, name in templates.items()
    }


def in_tree_skeleton(op: str, root: Path, cuda: bool, kernels: Path, rank: int) -> Skeleton:
    """The family of ours at ``root``, a new folder of our ``kernels`` package's folder ``kernels``,
    holding op ``op`` with ``FAMILY_RANK = rank``, and its test in the checkout's tests/kernels/;
    BadInputError (exit 2) when it cannot be written there."""
    check_op_name(op)
    check_target(root)
    family = check_family(root, kernels)
    checkout = kernels.parent
    if not (checkout / "pyproject.toml").is_file():
        raise BadInputError(
            f"{kernels} is not in a source checkout (no pyproject.toml beside it): --in-tree adds a "
            "family to the checkout's kernels/",
            hint="run imagegen from the checkout (pip install -e .), or leave --in-tree off for an op "
            "package of your own",
        )
    test_file = checkout / "tests" / "kernels" / f"test_{op}.py"
    if stat_input(test_file, "the test file") is not None or test_file.is_symlink():
        raise BadInputError(
            f"{test_file} exists: nothing was written", hint="pick another op name, or move that file away"
        )
    package = f"{kernels.name}.{family}"
    context = {**_context(op, package, cuda), "root_package": kernels.name, "rank": rank}
    templates = {
        "__init__.py": "in_tree_init.py.j2",
        "builders.py": "in_tree_builders.py.j2",
        "front.py": "in_tree_front.py.j2",
        "selftest.py": "in_tree_selftest.py.j2",
        **_source_templates(op, cuda),
    }
    (test_text,) = _render({"test": "in_tree_test_op.py.j2"}, context).values()
    return Skeleton(op, package, root, cuda, _render(templates, context), test_file, test_text)


def next_rank(families: Sequence[Family]) -> int:
    """A rank after every family's: a new family's ops come after ours of its target."""
    return max((f.rank for f in families if f.rank is not None), default=0) + 10


def check_family(root: Path, kernels: Path) -> str:
    """The family's name (its folder's), or BadInputError when the folder cannot be one."""
    if root.resolve().parent != kernels.resolve():
        raise BadInputError(
            f"{root} is not a folder of {kernels}: the registry finds our op families there",
            hint=f"leave -o off ({kernels.name}/NAME), or name a new folder of {kernels}",
        )
    family = root.name
    if not family.isidentifier() or keyword.iskeyword(family):
        raise BadInputError(
            f"the folder name {family!r} cannot be a Python package's name",
            hint="name the folder like a Python module: letters, digits and '_' (e.g. -o kernels/my_ops)",
        )
    module = kernels / f"{family}.py"
    if module.exists():
        raise BadInputError(
            f"{kernels.name}.{family} is a module already ({module})",
            hint=f"name the family's folder something else (-o {kernels.name}/OTHER)",
        )
    return family


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
    """Write the files into a temporary folder beside the target, then rename it into place; an
    in-tree family's test file first, removed again when the family cannot be written."""
    test = package.test_file
    if test is None:
        _write_folder(package)
        return
    make_dirs(test.parent)
    _create(test, package.test_text)
    try:
        _write_folder(package)
    except BaseException:
        test.unlink(missing_ok=True)
        raise


def _create(path: Path, text: str) -> None:
    """A new file ``path`` holding ``text``: never over a file, even one that appeared since the
    checks; removed again when it cannot be written whole."""
    try:
        with open(path, "x", encoding="utf-8") as out:
            try:
                out.write(text)
            except BaseException:
                path.unlink(missing_ok=True)
                raise
    except OSError as exc:
        raise _cannot_write(path, exc) from None


def _cannot_write(path: Path, exc: OSError) -> BadInputError:
    reason = (exc.strerror or str(exc)).lower()
    return BadInputError(
        f"cannot write {path}: {reason}; nothing was written",
        hint="check the folder's permissions and the free space",
    )


def _write_folder(package: Skeleton) -> None:
    """The package's files into a temporary folder beside the target, renamed into place."""
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


@table_options("new-op")  # --cuda (a CUDA op, not a target), --output, --in-tree: the table's rows
def new_op(
    name: NameArgument,
    cuda_op: bool = False,
    op_output: Path | None = None,
    in_tree: bool = False,
    json: JsonOption = False,
) -> None:
    """Write a working op package to start from: builder, kernel and binding, front, self-test, tests."""
    if in_tree:
        kernels = kernels_folder()
        root = op_output if op_output is not None else kernels / name
        package = in_tree_skeleton(name, root, cuda_op, kernels, next_rank(our_families()))
    else:
        package = skeleton(name, op_output if op_output is not None else Path(f"{name}_ops"), cuda_op)
    write(package)
    files = sorted(package.files)
    if json:
        document = {
            "package": package.package,
            "op": package.op,
            "target": "gpu" if package.cuda else "cpu",
            "path": str(package.root.resolve()),
            "files": files,
            "next": list(package.next_commands()),
        }
        if package.test_file is not None:
            document["test"] = str(package.test_file.resolve())
        emit_json(document)
        return
    kind = "CUDA" if cuda_op else "CPU"
    what = "op family" if in_tree else "op package"
    print(f"wrote the {what} {package.package} ({kind} op {package.op}) in {package.root}:")
    for relative in files:
        print(f"  {relative}")
    if package.test_file is not None:
        print(f"and its test: {package.test_file}")
    print("next:")
    for command in package.next_commands():
        print(f"  {command}")
