"""Asynchronous tensor reads and writes to files: the ``async_io`` op, or a Python fallback.

``AsyncIO`` moves a CPU tensor's bytes (``numel * element_size``, any dtype) to and
from a file. The compiled op uses Linux AIO (libaio) with ``queue_depth`` requests
of ``block_size`` bytes in flight per thread; when it cannot load (libaio missing,
JIT disabled and not installed, no compiler) the same API runs on a thread pool
with ``os.pwrite`` / ``os.preadv`` (``kernels.aio.python_handle``), after one warning that says why.

    io = AsyncIO(thread_count=2)
    io.async_pwrite(weights, "/nvme/w.bin")         # the tensor is the whole file
    io.async_pwrite(moments, "/nvme/s.bin", offset=0)
    io.async_pwrite(variance, "/nvme/s.bin", offset=moments.nbytes)  # one file, two tensors
    io.wait()                       # -> 3, or OSError with the errno text
    io.sync_pread(into, "/nvme/w.bin")

The file is a path or an open descriptor (``os.open``'s int: used, never closed, and
it must stay open until the operation is done). ``offset=None`` (the default) means the
tensor is the whole file: a write truncates it, a read needs the sizes equal.
``offset=N`` places the tensor's bytes at N: a write leaves the rest of the file alone
(extending it as needed), a read needs the file to hold [N, N + nbytes).

With ``use_direct_io`` (or a descriptor opened with ``O_DIRECT``) every whole aligned
page moves through ``O_DIRECT``; what is not aligned (the bytes before the first
4096-aligned file position, a last partial page) moves through a buffered descriptor,
and a tensor whose memory is not 4096-aligned is staged through aligned bounce
buffers. Any ``block_size`` is accepted: O_DIRECT requests are ``block_size`` rounded up to
whole pages (1024 -> 4096), since O_DIRECT moves nothing less. ``stats()`` shows which path
the bytes took.

Operations in flight are not ordered with respect to each other: wait() before
reading a file that a queued write produces. A handle that is dropped finishes its
queued operations first, but only wait() reports their errors. DeepSpeed's
``aio_handle`` conventions are in ``kernels.aio.handle``.
"""

from __future__ import annotations

from types import ModuleType
from typing import Literal

import torch

from kernels._op_load import LazyOp
from kernels.aio.common import DIRECT_IO_ALIGNMENT, BackendHandle, FileArg, IOStats, PathArg
from kernels.aio.memory import LockedTensors
from kernels.aio.python_handle import PythonAIOHandle
from op_builder import OpLoadError

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

Backend = Literal["kernel", "python"]


# ---------------------------------------------------------------- loading the op

_OP = LazyOp("async_io")


def _load_kernel() -> ModuleType | OpLoadError:
    """The compiled module, or why it cannot load; tried once per process, on first use."""
    try:
        return _OP.load()
    except OpLoadError as exc:
        return exc


def _warn_fallback(error: OpLoadError) -> None:
    hint = f" ({error.hint})" if error.hint else ""
    message = f"async_io op unavailable, using the slower Python thread-pool fallback: {error.message}{hint}"
    _OP.warn_once("unavailable", message)  # points at the first frame outside kernels/


def active_backend() -> Backend:
    """The backend ``AsyncIO()`` uses in this process (loads the op on first call)."""
    return "python" if isinstance(_load_kernel(), OpLoadError) else "kernel"


# ---------------------------------------------------------------- the front


def _offset_arg(offset: int | None) -> tuple[int, ...]:
    # The offset is passed only when given, so a handle called as before offsets existed
    # (tensor, path) sees the same call (wrappers of the compiled handle rely on it).
    return () if offset is None else (offset,)


class AsyncIO:
    """A handle for tensor file I/O; ``backend`` says which implementation serves it.

    ``backend="auto"`` uses the op and falls back (warning once) when it cannot load;
    ``"kernel"`` raises ``OpLoadError`` instead; ``"python"`` forces the fallback.
    All transfers take a CPU, contiguous tensor, a file (path or descriptor) and an
    optional offset (see the module's docstring); async_* and sync_* return the number
    of bytes moved (queued, for async_*).

    single_submit: hand io_submit one request per call instead of a batch.
    overlap_events: prepare new requests as soon as any completes (False: submit
    ``queue_depth`` requests, reap them all, then the next batch). The fallback reports
    both, and ``queue_depth``, but has one request in flight per thread.
    """

    backend: Backend

    def __init__(
        self,
        block_size: int = 1 << 20,
        queue_depth: int = 32,
        thread_count: int = 1,
        use_direct_io: bool = False,
        single_submit: bool = False,
        overlap_events: bool = True,
        *,
        backend: Literal["auto", "kernel", "python"] = "auto",
    ) -> None:
        args = (block_size, queue_depth, thread_count, use_direct_io, single_submit, overlap_events)
        self._locked = LockedTensors()
        self._handle: BackendHandle
        if backend == "python":
            self._handle, self.backend = PythonAIOHandle(*args), "python"
            return
        loaded = _load_kernel()
        if isinstance(loaded, OpLoadError):
            if backend == "kernel":
                raise OpLoadError(loaded.message, hint=loaded.hint)
            _warn_fallback(loaded)
            self._handle, self.backend = PythonAIOHandle(*args), "python"
            return
        self._handle, self.backend = loaded.AsyncIOHandle(*args), "kernel"

    def __del__(self) -> None:
        locked = getattr(self, "_locked", None)  # absent when __init__ raised early
        if locked is not None:
            locked.free_all()

    # ---- transfers
    def async_pwrite(self, tensor: torch.Tensor, file: FileArg, offset: int | None = None) -> int:
        """Queue a write of the tensor's bytes to ``file`` (at ``offset``, or as the whole file)."""
        return self._handle.async_pwrite(tensor, file, *_offset_arg(offset))

    def async_pread(self, tensor: torch.Tensor, file: FileArg, offset: int | None = None) -> int:
        """Queue a read of ``file`` (from ``offset``, or the whole file) into the tensor."""
        return self._handle.async_pread(tensor, file, *_offset_arg(offset))

    def wait(self) -> int:
        """Wait for every queued operation; return how many completed. Raises OSError on I/O errors."""
        return self._handle.wait()

    def sync_pwrite(self, tensor: torch.Tensor, file: FileArg, offset: int | None = None) -> int:
        return self._handle.sync_pwrite(tensor, file, *_offset_arg(offset))

    def sync_pread(self, tensor: torch.Tensor, file: FileArg, offset: int | None = None) -> int:
        return self._handle.sync_pread(tensor, file, *_offset_arg(offset))

    # ---- page-locked buffers (see kernels.aio.memory)
    def new_cpu_locked_tensor(self, num_elem: int, example_tensor: torch.Tensor) -> torch.Tensor:
        """A page-aligned, mlock'ed 1-D tensor of ``num_elem`` elements of ``example_tensor``'s dtype."""
        return self._locked.new(num_elem, example_tensor)

    def free_cpu_locked_tensor(self, tensor: torch.Tensor) -> bool:
        """Unlock a tensor this handle made (True), or do nothing for any other (False)."""
        return self._locked.free(tensor)

    def is_cpu_locked_tensor(self, tensor: torch.Tensor) -> bool:
        """Whether this handle made ``tensor`` and its pages are locked (mlock may have been refused)."""
        return self._locked.is_locked(tensor)

    # ---- settings, as the backend holds them
    @property
    def block_size(self) -> int:
        return self._handle.block_size

    @property
    def queue_depth(self) -> int:
        return self._handle.queue_depth

    @property
    def thread_count(self) -> int:
        return self._handle.thread_count

    @property
    def use_direct_io(self) -> bool:
        return self._handle.use_direct_io

    @property
    def single_submit(self) -> bool:
        return self._handle.single_submit

    @property
    def overlap_events(self) -> bool:
        return self._handle.overlap_events

    def stats(self) -> IOStats:
        """What this handle's transfers did so far (see ``IOStats``)."""
        return IOStats.from_mapping(self._handle.stats())

    def __repr__(self) -> str:
        return f"AsyncIO(backend={self.backend!r})"
