"""The build context a build hands to the engine: a staged copy, not the checkout.

Staging copies only what the Dockerfile reads (``imagegen.sources``: setup.py,
pyproject.toml, README.md, op_builder/, kernels/) plus the extras at their fixed places
(``_imagegen/ca.crt``, ``_imagegen/wheelhouse/``, each op package's files under
``_imagegen/op-sources/``). So a virtual environment or build output in the checkout is never
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

from imagegen.render import CA_PATH, WHEELHOUSE_PATH
from imagegen.sources import check_sources, copy_build_inputs, source_root
from imagegen.spec import ImageSpec

_WHEEL_SUFFIXES = (".whl", ".tar.gz", ".zip")


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
        context = copy_build_inputs(root, Path(tmp))
        if spec.ca_cert is not None:
            (context / CA_PATH).parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(spec.ca_cert, context / CA_PATH)
        for package in spec.op_packages:
            package.stage(context)
        if spec.wheelhouse is not None:
            wheels = context / WHEELHOUSE_PATH
            wheels.mkdir(parents=True)
            for item in sorted(spec.wheelhouse.iterdir()):
                if item.is_file() and item.name.endswith(_WHEEL_SUFFIXES):
                    _link_or_copy(item, wheels / item.name)
        yield context
