"""The build context ``imagegen build`` hands to the engine: a staged copy, not the checkout.

Staging copies only what the Dockerfile reads (setup.py, pyproject.toml, README.md,
op_builder/, kernels/) plus the extras at their fixed places (``_imagegen/ca.crt``,
``_imagegen/wheelhouse/``). So a virtual environment or build output in the checkout is never
sent to the daemon, and host paths never appear in the Dockerfile. Wheels are hard-linked
when the file system allows it, so a large torch wheel costs no copy.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from imagegen.errors import BadInputError
from imagegen.render import CA_PATH, WHEELHOUSE_PATH
from imagegen.spec import ImageSpec

SOURCE_FILES = ("setup.py", "pyproject.toml", "README.md")
SOURCE_DIRS = ("op_builder", "kernels")
_IGNORE = shutil.ignore_patterns("__pycache__", "*.pyc", "*.so", "*.o", "build", "*.egg-info")
_WHEEL_SUFFIXES = (".whl", ".tar.gz", ".zip")


def source_root() -> Path:
    """The checkout this imagegen runs from (the parent of the imagegen package)."""
    return Path(__file__).resolve().parents[2]


def check_sources(root: Path) -> None:
    missing = [n for n in (*SOURCE_FILES, *SOURCE_DIRS) if not (root / n).exists()]
    if missing:
        raise BadInputError(
            f"the project's sources are not at {root} (missing: {', '.join(missing)})",
            hint="run imagegen build from a checkout of this project (pip install -e '.[cli]')",
        )


def _link_or_copy(src: Path, dst: Path) -> None:
    try:
        os.link(src, dst)
    except OSError:  # another file system, or links not allowed: copy instead
        shutil.copy2(src, dst)


@contextmanager
def staged_context(spec: ImageSpec, root: Path | None = None) -> Iterator[Path]:
    """A temporary build context for ``spec``; removed on exit (also on Ctrl-C)."""
    root = root or source_root()
    check_sources(root)
    with tempfile.TemporaryDirectory(prefix="imagegen-context-") as tmp:
        context = Path(tmp)
        for name in SOURCE_FILES:
            shutil.copy2(root / name, context / name)
        for name in SOURCE_DIRS:
            shutil.copytree(root / name, context / name, ignore=_IGNORE)
        if spec.ca_cert is not None:
            (context / CA_PATH).parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(spec.ca_cert, context / CA_PATH)
        if spec.wheelhouse is not None:
            wheels = context / WHEELHOUSE_PATH
            wheels.mkdir(parents=True)
            for item in sorted(spec.wheelhouse.iterdir()):
                if item.is_file() and item.name.endswith(_WHEEL_SUFFIXES):
                    _link_or_copy(item, wheels / item.name)
        yield context
