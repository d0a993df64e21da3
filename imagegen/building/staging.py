"""The build context a build hands to the engine: a staged copy, not the checkout.

Staging copies only what the Dockerfile reads (``imagegen.building.build_inputs``: setup.py,
pyproject.toml, README.md, op_builder/, kernels/) plus the extras at their fixed places
(``_imagegen/ca.crt``, ``_imagegen/wheelhouse/``, each op package's files under
``_imagegen/op-sources/``). So a virtual environment or build output in the checkout is never
sent to the daemon, and host paths never appear in the Dockerfile. Wheels are hard-linked
when the file system allows it, so a large torch wheel costs no copy.

The context is staged at a fixed place, a *slot* under ``~/.cache/imagegen/contexts``
(``$XDG_CACHE_HOME`` honoured), not in a fresh temporary folder. BuildKit keys its copy of a
build's context by the context's path: a new path every build meant a new copy every build
(the torch wheel, some 190 MB, each time) that only ``docker builder prune`` ever removed,
while a path it has seen gets only the files that changed. A slot is held under an exclusive
lock for the build, so concurrent builds take different slots, and it is emptied before and
after use, so nothing stays behind.
"""

from __future__ import annotations

import fcntl
import itertools
import os
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO

from imagegen import settings
from imagegen.building.build_inputs import check_sources, copy_build_inputs, source_root
from imagegen.errors import BuildFailedError
from imagegen.imagespec.spec import ImageSpec
from imagegen.render.dockerfile import CA_PATH, TORCH_HEADERS_PATH, WHEELHOUSE_PATH

_WHEEL_SUFFIXES = (".whl", ".tar.gz", ".zip")


def _link_or_copy(src: Path, dst: Path) -> None:
    try:
        os.link(src, dst)
    except OSError:  # another file system, or links not allowed: copy instead
        shutil.copy2(src, dst)


def _link_or_copy_names(src: str, dst: str) -> None:  # shutil.copytree's copy_function
    _link_or_copy(Path(src), Path(dst))


def slots_root() -> Path:
    """Where the context slots live."""
    cache = os.environ.get(settings.XDG_CACHE_HOME.name) or str(Path.home() / ".cache")
    return Path(cache) / "imagegen" / "contexts"


def _take_free_slot(root: Path) -> tuple[IO[str], Path] | None:
    """The first slot no other build holds: its lock file, open and exclusively locked, and
    the slot itself, empty.

    The lock dies with its process, so a killed build frees its slot; what it left there is
    removed now. None where no slot can be had: the cache folder cannot be written (a
    read-only home) or locked (a file system without locks).
    """
    try:
        root.mkdir(parents=True, exist_ok=True)
    except OSError:
        return None
    for n in itertools.count():
        try:
            lock = open(root / f"slot-{n}.lock", "a")  # noqa: SIM115 - held until the slot is given back
        except OSError:
            return None
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:  # another build holds it
            lock.close()
            continue
        except OSError:
            lock.close()
            return None
        slot = root / f"slot-{n}"
        shutil.rmtree(slot, ignore_errors=True)
        try:
            slot.mkdir()
        except OSError:  # what was left there could not be removed: the next slot, then
            lock.close()
            continue
        return lock, slot
    raise AssertionError("unreachable")


@contextmanager
def context_slot(root: Path | None = None) -> Iterator[Path]:
    """An empty folder at a path earlier builds used, held for this build alone; emptied on exit.

    Where no slot can be had, a temporary folder does instead.
    """
    taken = _take_free_slot(root or slots_root())
    if taken is None:
        with tempfile.TemporaryDirectory(prefix="imagegen-context-") as tmp:
            yield Path(tmp)
        return
    lock, slot = taken
    with lock:
        try:
            yield slot
        finally:
            shutil.rmtree(slot, ignore_errors=True)


@contextmanager
def staged_context(
    spec: ImageSpec, root: Path | None = None, torch_headers: Path | None = None
) -> Iterator[Path]:
    """The build context for ``spec``, staged in a slot; emptied on exit (also on Ctrl-C).
    ``torch_headers``: the include folder of ``spec.stable_headers`` (``imagegen.runs.torch_headers``
    finds it), which the context then holds; needed exactly when the spec pins one."""
    if (spec.stable_headers is None) != (torch_headers is None):
        raise ValueError(
            f"the spec pins torch headers {spec.stable_headers}; the context is given {torch_headers}"
        )
    root = root or source_root()
    check_sources(root)
    with context_slot() as slot:
        try:
            context = _stage(spec, root, slot, torch_headers)
        except OSError as exc:
            raise BuildFailedError(
                f"could not stage the build context in {slot}: {exc.strerror or exc}",
                hint=f"check the room and write access there (df -h {slot.parent}), "
                "or set XDG_CACHE_HOME to another folder",
            ) from exc
        yield context


def _stage(spec: ImageSpec, root: Path, slot: Path, torch_headers: Path | None) -> Path:
    context = copy_build_inputs(root, slot)
    if spec.ca_cert is not None:
        (context / CA_PATH).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(spec.ca_cert, context / CA_PATH)
    for package in spec.op_packages:
        package.stage(context)
    if spec.wheelhouses:
        wheels = context / WHEELHOUSE_PATH
        wheels.mkdir(parents=True)
        for folder in spec.wheelhouses:
            for item in sorted(folder.iterdir()):
                staged = wheels / item.name
                if item.is_file() and item.name.endswith(_WHEEL_SUFFIXES) and not staged.exists():
                    _link_or_copy(item, staged)
    if torch_headers is not None:
        shutil.copytree(torch_headers, context / TORCH_HEADERS_PATH, copy_function=_link_or_copy_names)
    return context
