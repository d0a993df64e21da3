"""Asynchronous tensor reads and writes to files: the ``async_io`` op, or a Python fallback.

``AsyncIO`` moves a CPU tensor's bytes (``numel * element_size``, any dtype) to and
from a file. The compiled op uses Linux AIO (libaio) with ``queue_depth`` requests
of ``block_size`` bytes in flight per thread; when it cannot load (libaio missing,
JIT disabled and not installed, no compiler) the same API runs on a thread pool
with ``os.pwrite`` / ``os.preadv``, after one warning that says why.

    io = AsyncIO(thread_count=2)
    io.async_pwrite(weights, "/nvme/w.bin")
    io.async_pwrite(optimizer_state, "/nvme/s.bin")
    io.wait()                       # -> 2, or OSError with the errno text
    io.sync_pread(into, "/nvme/w.bin")

Operations in flight are not ordered with respect to each other: wait() before
reading a file that a queued write produces. A handle that is dropped finishes its
queued operations first, but only wait() reports their errors.
"""

from __future__ import annotations

import ctypes
import errno
import mmap
import os
import threading
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures import wait as wait_futures
from dataclasses import dataclass, field
from types import ModuleType
from typing import Literal, Protocol, Union

import torch

from kernels._op_load import LazyOp
from op_builder import OpLoadError

__all__ = [
    "DIRECT_IO_ALIGNMENT",
    "AsyncIO",
    "Backend",
    "PythonAIOHandle",
    "active_backend",
]

Backend = Literal["kernel", "python"]
PathArg = Union[str, bytes, "os.PathLike[str]", "os.PathLike[bytes]"]

# O_DIRECT wants buffers, offsets and sizes aligned to the device's logical block;
# 4096 covers 512-byte and 4K-sector devices (the op uses the same value).
DIRECT_IO_ALIGNMENT = 4096


class AIOHandle(Protocol):
    """What both backends provide (the compiled ``AsyncIOHandle`` and ``PythonAIOHandle``)."""

    def async_pwrite(self, tensor: torch.Tensor, path: PathArg) -> int: ...
    def async_pread(self, tensor: torch.Tensor, path: PathArg) -> int: ...
    def wait(self) -> int: ...
    def sync_pwrite(self, tensor: torch.Tensor, path: PathArg) -> int: ...
    def sync_pread(self, tensor: torch.Tensor, path: PathArg) -> int: ...


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
    _OP.warn_once("unavailable", message, stacklevel=2)  # the caller of AsyncIO()


def active_backend() -> Backend:
    """The backend ``AsyncIO()`` uses in this process (loads the op on first call)."""
    return "python" if isinstance(_load_kernel(), OpLoadError) else "kernel"


# ---------------------------------------------------------------- the front


class AsyncIO:
    """A handle for tensor file I/O; ``backend`` says which implementation serves it.

    ``backend="auto"`` uses the op and falls back (warning once) when it cannot load;
    ``"kernel"`` raises ``OpLoadError`` instead; ``"python"`` forces the fallback.
    All methods take a CPU, contiguous tensor and a path; async_* and sync_* return
    the number of bytes moved (queued, for async_*).
    """

    backend: Backend

    def __init__(
        self,
        block_size: int = 1 << 20,
        queue_depth: int = 32,
        thread_count: int = 1,
        use_direct_io: bool = False,
        *,
        backend: Literal["auto", "kernel", "python"] = "auto",
    ) -> None:
        args = (block_size, queue_depth, thread_count, use_direct_io)
        self.block_size, self.queue_depth, self.thread_count, self.use_direct_io = args
        self._handle: AIOHandle
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

    def async_pwrite(self, tensor: torch.Tensor, path: PathArg) -> int:
        """Queue a write of the tensor's bytes to ``path`` (created or truncated)."""
        return self._handle.async_pwrite(tensor, path)

    def async_pread(self, tensor: torch.Tensor, path: PathArg) -> int:
        """Queue a read of ``path`` into the tensor; the file must hold exactly its bytes."""
        return self._handle.async_pread(tensor, path)

    def wait(self) -> int:
        """Wait for every queued operation; return how many completed. Raises OSError on I/O errors."""
        return self._handle.wait()

    def sync_pwrite(self, tensor: torch.Tensor, path: PathArg) -> int:
        return self._handle.sync_pwrite(tensor, path)

    def sync_pread(self, tensor: torch.Tensor, path: PathArg) -> int:
        return self._handle.sync_pread(tensor, path)

    def __repr__(self) -> str:
        return f"AsyncIO(backend={self.backend!r})"


# ---------------------------------------------------------------- the fallback


def _split_range(nbytes: int, block: int, parts: int) -> list[tuple[int, int]]:
    """At most ``parts`` ranges of [0, nbytes) that start on multiples of ``block`` (as the op does)."""
    if nbytes <= 0:
        return []
    blocks = -(-nbytes // block)
    per_part = -(-blocks // parts)
    return [(first * block, min(nbytes, (first + per_part) * block)) for first in range(0, blocks, per_part)]


def _tensor_bytes(tensor: torch.Tensor) -> memoryview:
    """A writable view of the tensor's memory, whatever its dtype (bfloat16 and fp8 included)."""
    nbytes = tensor.numel() * tensor.element_size()
    if nbytes == 0:
        return memoryview(bytearray())
    return memoryview((ctypes.c_char * nbytes).from_address(tensor.data_ptr())).cast("B")


def _check_tensor(tensor: torch.Tensor) -> None:
    if tensor.device.type != "cpu":
        raise ValueError(f"async_io: the tensor must be on the CPU, got {tensor.device}")
    if not tensor.is_contiguous():
        raise ValueError("async_io: the tensor must be contiguous")


@dataclass
class _Operation:
    """One read or write: its open files, the ranges being moved, and the tensor kept alive."""

    op: Literal["read", "write"]
    path: str
    tensor: torch.Tensor
    nbytes: int
    fd: int
    direct_fd: int | None
    futures: list[Future[None]] = field(default_factory=list)
    remaining: int = 0  # ranges not yet done; the last one closes the files
    lock: threading.Lock = field(default_factory=threading.Lock)

    def close(self) -> None:
        for fd in (self.fd, self.direct_fd):
            if fd is not None and fd >= 0:
                os.close(fd)
        self.fd, self.direct_fd = -1, None

    def range_done(self) -> None:
        with self.lock:
            self.remaining -= 1
            if self.remaining == 0:
                self.close()

    def failure(self) -> OSError | None:
        errors = [f.exception() for f in self.futures if f.exception() is not None]
        if not errors:
            return None
        first = errors[0]
        if isinstance(first, OSError):
            err = first.errno or 0
            why = f"{first.strerror or first}"
        else:
            err, why = 0, repr(first)
        message = f"async_io: {self.op} failed: {why}"
        if len(errors) > 1:
            message += f"; {len(errors) - 1} more ranges failed"
        return OSError(err, message, self.path)


_GERUND = {"read": "reading", "write": "writing"}


class PythonAIOHandle:
    """The ``AsyncIOHandle`` API in Python: ``thread_count`` threads calling os.pwrite / os.preadv.

    ``queue_depth`` is accepted for the same signature; each thread has one request
    in flight. Direct I/O moves whole aligned blocks through a page-aligned bounce
    buffer on an ``O_DIRECT`` descriptor and the unaligned tail through a plain one.
    """

    def __init__(
        self,
        block_size: int = 1 << 20,
        queue_depth: int = 32,
        thread_count: int = 1,
        use_direct_io: bool = False,
    ) -> None:
        if block_size <= 0:
            raise ValueError("block_size must be positive")
        if queue_depth <= 0:
            raise ValueError("queue_depth must be positive")
        if thread_count <= 0:
            raise ValueError("thread_count must be positive")
        if use_direct_io and block_size % DIRECT_IO_ALIGNMENT != 0:
            raise ValueError(f"use_direct_io needs a block_size that is a multiple of {DIRECT_IO_ALIGNMENT}")
        self.block_size = block_size
        self.queue_depth = queue_depth
        self.thread_count = thread_count
        self.use_direct_io = use_direct_io
        self._pool = ThreadPoolExecutor(max_workers=thread_count, thread_name_prefix="async_io")
        self._lock = threading.Lock()
        self._outstanding: list[_Operation] = []

    def __del__(self) -> None:
        # Like the op's handle: a dropped handle still finishes what it queued.
        pool = getattr(self, "_pool", None)  # absent when __init__ raised
        if pool is not None:
            pool.shutdown(wait=True)

    # ---- API
    def async_pwrite(self, tensor: torch.Tensor, path: PathArg) -> int:
        return self._submit_async(self._open("write", tensor, path))

    def async_pread(self, tensor: torch.Tensor, path: PathArg) -> int:
        return self._submit_async(self._open("read", tensor, path))

    def wait(self) -> int:
        with self._lock:
            done, self._outstanding = self._outstanding, []
        failures = [f for f in (self._finish(op) for op in done) if f is not None]
        if failures:
            first = failures[0]
            if len(failures) > 1:
                first = OSError(
                    first.errno,
                    f"{first.strerror}; {len(failures) - 1} other operations failed too",
                    first.filename,
                )
            raise first
        return len(done)

    def sync_pwrite(self, tensor: torch.Tensor, path: PathArg) -> int:
        return self._run_sync(self._open("write", tensor, path))

    def sync_pread(self, tensor: torch.Tensor, path: PathArg) -> int:
        return self._run_sync(self._open("read", tensor, path))

    # ---- internals
    def _open(self, op: Literal["read", "write"], tensor: torch.Tensor, path: PathArg) -> _Operation:
        """Check the tensor and open the file: what a caller can fix fails here, before queueing."""
        _check_tensor(tensor)
        name = os.fsdecode(path)
        nbytes = tensor.numel() * tensor.element_size()
        flags = (os.O_WRONLY | os.O_CREAT | os.O_TRUNC) if op == "write" else os.O_RDONLY
        try:
            fd = os.open(name, flags | os.O_CLOEXEC, 0o666)
        except OSError as exc:
            raise OSError(
                exc.errno, f"async_io: cannot open the file for {_GERUND[op]}: {exc.strerror}", name
            ) from None
        direct_fd: int | None = None
        try:
            if op == "read":
                size = os.fstat(fd).st_size
                if size != nbytes:
                    what = (
                        "the tensor is too small for the file"
                        if size > nbytes
                        else "the file is smaller than the tensor"
                    )
                    raise ValueError(
                        f"async_io: {what}: {name} holds {size} bytes, "
                        f"the tensor {nbytes} bytes (numel * element_size)"
                    )
            if self.use_direct_io:
                direct_fd = self._open_direct(op, name)
        except BaseException:
            os.close(fd)
            raise
        return _Operation(op, name, tensor, nbytes, fd, direct_fd)

    @staticmethod
    def _open_direct(op: str, name: str) -> int:
        flags = (os.O_WRONLY if op == "write" else os.O_RDONLY) | os.O_DIRECT | os.O_CLOEXEC
        try:
            return os.open(name, flags)
        except OSError as exc:
            why = exc.strerror or str(exc)
            if exc.errno == errno.EINVAL:  # e.g. tmpfs
                why += " (this file system does not support O_DIRECT; use use_direct_io=False)"
            raise OSError(exc.errno, f"async_io: cannot open the file with O_DIRECT: {why}", name) from None

    def _start(self, operation: _Operation) -> None:
        view = _tensor_bytes(operation.tensor)
        ranges = _split_range(operation.nbytes, self.block_size, self.thread_count)
        operation.remaining = len(ranges)
        if not ranges:  # an empty tensor: opening the file was all there was to do
            operation.close()
        for begin, end in ranges:
            task: Callable[[], None] = _RangeTask(operation, view, begin, end, self.block_size)
            operation.futures.append(self._pool.submit(task))

    def _submit_async(self, operation: _Operation) -> int:
        with self._lock:
            self._start(operation)
            self._outstanding.append(operation)
        return operation.nbytes

    def _run_sync(self, operation: _Operation) -> int:
        self._start(operation)
        failure = self._finish(operation)
        if failure is not None:
            raise failure
        return operation.nbytes

    @staticmethod
    def _finish(operation: _Operation) -> OSError | None:
        wait_futures(operation.futures)
        return operation.failure()


@dataclass
class _RangeTask:
    """Move bytes [begin, end) of one operation, block by block."""

    operation: _Operation
    view: memoryview
    begin: int
    end: int
    block: int

    def __call__(self) -> None:
        op = self.operation
        bounce = mmap.mmap(-1, self.block) if op.direct_fd is not None else None  # page-aligned
        try:
            for offset in range(self.begin, self.end, self.block):
                length = min(self.block, self.end - offset)
                chunk = self.view[offset : offset + length]
                if bounce is not None and op.direct_fd is not None and length % DIRECT_IO_ALIGNMENT == 0:
                    self._direct(op.direct_fd, bounce, chunk, offset)
                else:
                    _transfer(op.op, op.fd, chunk, offset)
        finally:
            if bounce is not None:
                bounce.close()
            op.range_done()

    def _direct(self, fd: int, bounce: mmap.mmap, chunk: memoryview, offset: int) -> None:
        staging = memoryview(bounce)[: len(chunk)]
        try:
            if self.operation.op == "write":
                staging[:] = chunk
                _transfer("write", fd, staging, offset)
            else:
                _transfer("read", fd, staging, offset)
                chunk[:] = staging
        finally:
            staging.release()


def _transfer(op: str, fd: int, buf: memoryview, offset: int) -> None:
    """pwrite / preadv until ``buf`` is done; the kernel may move fewer bytes per call."""
    done = 0
    while done < len(buf):
        part = buf[done:]
        n = os.pwrite(fd, part, offset + done) if op == "write" else os.preadv(fd, [part], offset + done)
        if n == 0:
            # Only a read sees 0: the file got shorter after its size was checked.
            raise OSError(errno.EIO, f"unexpected end of file at byte {offset + done}")
        done += n
