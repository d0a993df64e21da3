"""Asynchronous tensor reads and writes to files: the ``async_io`` op, or a Python fallback.

``AsyncIO`` (``kernels.aio.async_io``, where the whole API is described) moves tensors to and
from files through Linux AIO, or through a thread pool (``kernels.aio.python_handle``) when the
op cannot load; ``kernels.aio.handle`` holds DeepSpeed's ``aio_handle`` conventions over it.

An op package: ``builders.py``, ``csrc/`` and ``includes/``, the fronts, and ``selftest.py``. The
names below are imported on first use, so that importing the package (op_builder does, for its
builders) imports neither torch nor the fronts.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from kernels._lazy import LazyExports

if TYPE_CHECKING:
    from kernels.aio.async_io import (
        DIRECT_IO_ALIGNMENT,
        AsyncIO,
        Backend,
        FileArg,
        IOStats,
        PathArg,
        PythonAIOHandle,
        active_backend,
    )

__all__ = [
    "DIRECT_IO_ALIGNMENT",
    "AsyncIO",
    "Backend",
    "FileArg",
    "IOStats",
    "PathArg",
    "PythonAIOHandle",
    "active_backend",
]

_EXPORTS = LazyExports(__name__, {"async_io": tuple(__all__)})


def __getattr__(name: str) -> Any:
    return _EXPORTS.get(name)
