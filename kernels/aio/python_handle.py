"""The ``async_io`` handle in Python: the fallback ``kernels.aio.AsyncIO`` uses when the op cannot load.

Same arguments, offsets, file handling and errors as the compiled ``AsyncIOHandle``
(``kernels/aio/csrc/async_io.cpp``), on ``thread_count`` threads calling os.pwrite /
os.preadv. ``queue_depth``, ``single_submit`` and ``overlap_events`` are accepted and
reported but have no effect: each thread has one request in flight. For the same reason
it does not preallocate the file before O_DIRECT writes as the op does (see
``AsyncIOHandle::preallocate``); the file's bytes and size come out the same.
"""

from __future__ import annotations

import errno
import fcntl
import mmap
import os
import threading
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures import wait as wait_futures
from dataclasses import dataclass, field
from typing import Literal

import torch

from kernels.aio.common import (
    APPEND_MESSAGE,
    DIRECT_IO_ALIGNMENT,
    DIRECT_UNSUPPORTED_HINT,
    FileArg,
    check_offset,
    check_tensor,
    direct_head,
    file_path,
    read_size_error,
    request_block,
    split_range,
    tensor_bytes,
)

__all__ = ["PythonAIOHandle"]

Op = Literal["read", "write"]
_GERUND = {"read": "reading", "write": "writing"}
_ALIGN = DIRECT_IO_ALIGNMENT


@dataclass
class _Operation:
    """One read or write: its descriptors, the ranges being moved, and the tensor kept alive."""

    op: Op
    tensor: torch.Tensor
    nbytes: int
    offset: int  # the file position of the tensor's byte 0
    path: str | None = None  # None when the caller passed a descriptor
    caller_fd: int = -1
    buffered_fd: int = -1
    direct_fd: int | None = None  # set when this operation uses O_DIRECT
    head: int = 0  # bytes before the first aligned file position (O_DIRECT only)
    owned: list[int] = field(default_factory=list)  # what we opened and close; never the caller's
    futures: list[Future[None]] = field(default_factory=list)
    remaining: int = 0  # ranges not yet done; the last one closes the files
    lock: threading.Lock = field(default_factory=threading.Lock)

    @property
    def name(self) -> str:
        return self.path if self.path is not None else f"file descriptor {self.caller_fd}"

    def close(self) -> None:
        for fd in self.owned:
            os.close(fd)
        self.owned.clear()

    def range_done(self) -> None:
        with self.lock:
            self.remaining -= 1
            if self.remaining == 0:
                self.close()

    def failure(self) -> OSError | None:
        errors = [e for e in (f.exception() for f in self.futures) if e is not None]
        if not errors:
            return None
        first = errors[0]
        if isinstance(first, OSError):
            err, why = first.errno or 0, f"{first.strerror or first}"
        else:
            err, why = 0, repr(first)
        message = f"async_io: {self.op} failed: {why}"
        if len(errors) > 1:
            message += f"; {len(errors) - 1} more ranges failed"
        return OSError(err, message, self.path)


class _Counters:
    """The fallback's share of ``IOStats``: one call per request, one request in flight per thread."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.values = {"requests": 0, "direct_requests": 0, "bounced_requests": 0, "plain_calls": 0}

    def add(self, *names: str) -> None:
        with self._lock:
            for name in names:
                self.values[name] += 1

    def snapshot(self) -> dict[str, int]:
        with self._lock:
            v = dict(self.values)
        busy = 1 if v["requests"] else 0
        return {
            **v,
            "submit_calls": v["requests"],
            "overlapped_requests": 0,
            "reap_calls": 0,
            "max_in_flight": busy,
        }


class PythonAIOHandle:
    """The ``AsyncIOHandle`` API in Python (see the module's docstring)."""

    def __init__(
        self,
        block_size: int = 1 << 20,
        queue_depth: int = 32,
        thread_count: int = 1,
        use_direct_io: bool = False,
        single_submit: bool = False,
        overlap_events: bool = True,
    ) -> None:
        if block_size <= 0:
            raise ValueError("block_size must be positive")
        if queue_depth <= 0:
            raise ValueError("queue_depth must be positive")
        if thread_count <= 0:
            raise ValueError("thread_count must be positive")
        self.block_size = block_size
        self.queue_depth = queue_depth
        self.thread_count = thread_count
        self.use_direct_io = use_direct_io
        self.single_submit = single_submit
        self.overlap_events = overlap_events
        self._counters = _Counters()
        self._pool = ThreadPoolExecutor(max_workers=thread_count, thread_name_prefix="async_io")
        self._lock = threading.Lock()
        self._outstanding: list[_Operation] = []

    def __del__(self) -> None:
        # Like the op's handle: a dropped handle still finishes what it queued.
        pool = getattr(self, "_pool", None)  # absent when __init__ raised
        if pool is not None:
            pool.shutdown(wait=True)

    # ---- API
    def async_pwrite(self, tensor: torch.Tensor, file: FileArg, offset: int | None = None) -> int:
        return self._submit_async(self._open("write", tensor, file, offset))

    def async_pread(self, tensor: torch.Tensor, file: FileArg, offset: int | None = None) -> int:
        return self._submit_async(self._open("read", tensor, file, offset))

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

    def sync_pwrite(self, tensor: torch.Tensor, file: FileArg, offset: int | None = None) -> int:
        return self._run_sync(self._open("write", tensor, file, offset))

    def sync_pread(self, tensor: torch.Tensor, file: FileArg, offset: int | None = None) -> int:
        return self._run_sync(self._open("read", tensor, file, offset))

    def stats(self) -> dict[str, int]:
        return self._counters.snapshot()

    # ---- opening: what a caller can fix fails here, before anything is queued
    def _open(self, op: Op, tensor: torch.Tensor, file: FileArg, offset: int | None) -> _Operation:
        check_tensor(tensor)
        at = check_offset(offset)
        nbytes = tensor.numel() * tensor.element_size()
        operation = _Operation(op, tensor, nbytes, at or 0)
        try:
            if isinstance(file, int) and not isinstance(file, bool):  # as is_descriptor
                self._open_descriptor(operation, file, whole=at is None)
            else:
                self._open_path(operation, file_path(file), whole=at is None)
            if op == "read":
                error = read_size_error(operation.name, os.fstat(operation.buffered_fd).st_size, nbytes, at)
                if error is not None:
                    raise error
        except BaseException:
            operation.close()
            raise
        if operation.direct_fd is not None:
            operation.head = direct_head(operation.offset)
        return operation

    def _open_path(self, operation: _Operation, name: str, whole: bool) -> None:
        operation.path = name
        write = operation.op == "write"
        flags = (os.O_WRONLY | os.O_CREAT | (os.O_TRUNC if whole else 0)) if write else os.O_RDONLY
        try:
            fd = os.open(name, flags | os.O_CLOEXEC, 0o666)
        except OSError as exc:
            message = f"async_io: cannot open the file for {_GERUND[operation.op]}: {exc.strerror}"
            raise OSError(exc.errno, message, name) from None
        operation.owned.append(fd)
        operation.buffered_fd = fd
        if self.use_direct_io:
            access = os.O_WRONLY if write else os.O_RDONLY
            operation.direct_fd = _open_owned(operation, name, access | os.O_DIRECT, "open the file")

    def _open_descriptor(self, operation: _Operation, fd: int, whole: bool) -> None:
        # As the op: the caller's descriptor is used as it is, and paired with a reopened
        # one of the other flavour when O_DIRECT is involved.
        operation.caller_fd = fd
        what, write = operation.name, operation.op == "write"
        try:
            if fd < 0:
                raise OSError(errno.EBADF, os.strerror(errno.EBADF))
            flags = fcntl.fcntl(fd, fcntl.F_GETFL)
        except OSError as exc:
            raise OSError(exc.errno, f"async_io: {what} is not open: {exc.strerror}") from None
        mode = flags & os.O_ACCMODE
        if mode not in (os.O_RDWR, os.O_WRONLY if write else os.O_RDONLY):
            raise OSError(errno.EBADF, f"async_io: {what} is not open for {_GERUND[operation.op]}")
        if write and flags & os.O_APPEND:
            raise ValueError(f"async_io: {what} {APPEND_MESSAGE}")
        proc = f"/proc/self/fd/{fd}"
        access = os.O_WRONLY if write else os.O_RDONLY
        if flags & os.O_DIRECT:
            operation.direct_fd = fd
            operation.buffered_fd = _open_owned(operation, proc, access, f"reopen {what} without O_DIRECT")
        else:
            operation.buffered_fd = fd
            if self.use_direct_io:
                operation.direct_fd = _open_owned(operation, proc, access | os.O_DIRECT, f"reopen {what}")
        if write and whole:
            try:
                os.ftruncate(operation.buffered_fd, 0)
            except OSError as exc:
                raise OSError(exc.errno, f"async_io: cannot truncate {what}: {exc.strerror}") from None

    # ---- running
    def _start(self, operation: _Operation) -> None:
        block = request_block(self.block_size, operation.direct_fd is not None)
        ranges = split_range(operation.nbytes, block, self.thread_count, operation.head)
        operation.remaining = len(ranges)
        if not ranges:  # an empty tensor: opening the file was all there was to do
            operation.close()
        view = tensor_bytes(operation.tensor)
        for begin, end in ranges:
            task = _RangeTask(operation, view, begin, end, block, self._counters)
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


def _open_owned(operation: _Operation, name: str, flags: int, what: str) -> int:
    try:
        fd = os.open(name, flags | os.O_CLOEXEC)
    except OSError as exc:
        why = exc.strerror or str(exc)
        direct = bool(flags & os.O_DIRECT)
        if exc.errno == errno.EINVAL and direct:  # e.g. tmpfs
            why += DIRECT_UNSUPPORTED_HINT
        how = " with O_DIRECT: " if direct else ": "
        raise OSError(exc.errno, f"async_io: cannot {what}{how}{why}", operation.path) from None
    operation.owned.append(fd)
    return fd


@dataclass
class _RangeTask:
    """Move bytes [begin, end) of one operation, request by request, as the op's ``Context::transfer``."""

    operation: _Operation
    view: memoryview
    begin: int
    end: int
    block: int
    counters: _Counters

    def __call__(self) -> None:
        op = self.operation
        bounce: mmap.mmap | None = None  # page-aligned, made on first unaligned use
        try:
            at = self.begin
            while at < self.end:
                length = min(self.block, self.end - at)
                pos = op.offset + at
                if op.direct_fd is None:
                    self.counters.add("requests")
                    _transfer(op.op, op.buffered_fd, self.view[at : at + length], pos)
                elif pos % _ALIGN or length < _ALIGN:
                    # A piece O_DIRECT cannot move: up to the next aligned file position, or a
                    # last partial page; a plain call on the buffered descriptor.
                    if pos % _ALIGN:
                        length = min(length, _ALIGN - pos % _ALIGN)
                    self.counters.add("plain_calls")
                    _transfer(op.op, op.buffered_fd, self.view[at : at + length], pos)
                else:
                    length -= length % _ALIGN  # the partial page left goes through the branch above
                    chunk = self.view[at : at + length]
                    if (op.tensor.data_ptr() + at) % _ALIGN == 0:
                        self.counters.add("requests", "direct_requests")
                        _transfer(op.op, op.direct_fd, chunk, pos)
                    else:
                        self.counters.add("requests", "direct_requests", "bounced_requests")
                        bounce = bounce if bounce is not None else mmap.mmap(-1, self.block)
                        _bounced(op.op, op.direct_fd, bounce, chunk, pos)
                at += length
        finally:
            if bounce is not None:
                bounce.close()
            op.range_done()


def _bounced(op: Op, fd: int, bounce: mmap.mmap, chunk: memoryview, pos: int) -> None:
    staging = memoryview(bounce)[: len(chunk)]
    try:
        if op == "write":
            staging[:] = chunk
            _transfer("write", fd, staging, pos)
        else:
            _transfer("read", fd, staging, pos)
            chunk[:] = staging
    finally:
        staging.release()


def _transfer(op: Op, fd: int, buf: memoryview, offset: int) -> None:
    """pwrite / preadv until ``buf`` is done; the kernel may move fewer bytes per call."""
    done = 0
    while done < len(buf):
        part = buf[done:]
        n = os.pwrite(fd, part, offset + done) if op == "write" else os.preadv(fd, [part], offset + done)
        if n == 0:
            # Only a read sees 0: the file got shorter after its size was checked.
            raise OSError(errno.EIO, f"unexpected end of file at byte {offset + done}")
        done += n
