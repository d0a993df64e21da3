"""DeepSpeed's way to reach its AIO handle: ``AsyncIOBuilder().load().aio_handle(...)``."""

from __future__ import annotations

from types import SimpleNamespace

from kernels.aio.handle import AIOHandle


class AsyncIOBuilder:
    """Stands in for ``deepspeed.ops.op_builder.AsyncIOBuilder``: ``load()`` gives an object whose
    ``aio_handle`` is ours (``kernels.aio.handle.AIOHandle``, DeepSpeed's arguments and returns).

    The op itself loads (AOT, else JIT, else the Python fallback with a warning) on the handle's
    first transfer, as every front here does, so ``load()`` never compiles.
    """

    NAME = "async_io"

    def is_compatible(self, verbose: bool = False) -> bool:
        # The handle always works: without libaio it runs its Python fallback (and says so).
        return True

    def load(self, verbose: bool = True) -> SimpleNamespace:
        return SimpleNamespace(aio_handle=AIOHandle)
