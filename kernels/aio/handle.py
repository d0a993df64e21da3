"""DeepSpeed's ``aio_handle`` over ``kernels.aio.AsyncIO``: its names, argument order, defaults
and return values, so training code written for DeepSpeed's async I/O runs unchanged.

    h = AIOHandle(block_size=1 << 20, queue_depth=128, single_submit=False,
                  overlap_events=False, intra_op_parallelism=1)
    buf = h.new_cpu_locked_tensor(n, torch.empty(0, dtype=torch.float16))
    h.async_pwrite(buf, "/nvme/x.bin", 0)   # -> 0
    h.wait()                                 # -> 1, the number of completed operations
    h.sync_pread(buf, "/nvme/x.bin")         # -> 1 (the wait() it ends with)

Where DeepSpeed and this differ, on purpose:

- Errors raise (OSError with errno text, ValueError for a bad size or offset) where
  DeepSpeed prints to stderr and returns -1 or fails an assert.
- ``validate=True`` compares the buffer with the file as plain reads see it when the
  operation completes (in wait()), and raises OSError(EIO) naming the first differing
  byte where DeepSpeed prints "Fail".
- ``async`` is a Python keyword, so that argument is ``async_op`` (DeepSpeed's callers
  pass it by position, which works the same).
- O_DIRECT is on by default, as DeepSpeed always opens files with it, but unaligned
  buffers and offsets work (bounce buffers, plain calls for partial pages) instead of
  failing with EINVAL; ``use_direct_io=False`` is for file systems without O_DIRECT
  (tmpfs). Sizes need not divide by ``intra_op_parallelism``.
- Every method takes a path or an open descriptor (DeepSpeed: async_pwrite only, whose
  keyword for it, ``fd=``, works here too), and ``wait()`` with nothing queued returns 0
  (DeepSpeed asserts).
- Any ``block_size`` works with O_DIRECT, as DeepSpeed's (its tests use 1024): the requests
  that go direct are whole pages (see ``kernels.aio``).
- ``read``/``write`` ("non-parallel" in DeepSpeed) use the handle's threads like the rest.

As DeepSpeed's, the handle is safe to share between threads: a blocking call (``pread`` /
``pwrite`` without ``async_op``, ``sync_*``) holds the handle's lock from queueing its operation
until its wait() is done, and ``async_*`` and ``wait()`` take the same lock, so one thread's
wait never collects another's blocking operation and each blocking call returns after its own
data has landed. A non-contiguous buffer is moved through a contiguous copy (DeepSpeed's
bounce buffer), copied back into it when a read completes (in wait()); and ``is_pinned``
is True for a view of any live handle's ``new_cpu_locked_tensor`` (one process-wide
manager in DeepSpeed).
"""

from __future__ import annotations

import errno
import os
import threading
from dataclasses import dataclass
from typing import Literal

import torch

from kernels.aio.async_io import AsyncIO, Backend
from kernels.aio.common import FileArg, IOStats, file_path, is_descriptor, tensor_bytes
from kernels.aio.memory import free_managed, is_managed

__all__ = ["AIOHandle", "aio_handle"]


@dataclass(frozen=True)
class _Check:
    """An operation queued with validate=True: what to compare once it is done."""

    op: Literal["read", "write"]
    buffer: torch.Tensor
    file: FileArg
    offset: int


class AIOHandle:
    """DeepSpeed's ``aio_handle`` (see the module's docstring); ``backend`` as ``AsyncIO``'s."""

    def __init__(
        self,
        block_size: int = 1024 * 1024,
        queue_depth: int = 128,
        single_submit: bool = False,
        overlap_events: bool = False,
        intra_op_parallelism: int = 1,
        *,
        use_direct_io: bool = True,
        backend: Literal["auto", "kernel", "python"] = "auto",
    ) -> None:
        self._io = AsyncIO(
            block_size,
            queue_depth,
            intra_op_parallelism,
            use_direct_io,
            single_submit,
            overlap_events,
            backend=backend,
        )
        # Held from queueing to the end of the wait in blocking calls, and by wait() and
        # async_* (DeepSpeed's _handle_mutex); it also guards the two lists below.
        self._lock = threading.Lock()
        self._checks: list[_Check] = []
        # Reads into non-contiguous buffers: (buffer, the contiguous copy read into), copied back in wait().
        self._copy_backs: list[tuple[torch.Tensor, torch.Tensor]] = []

    @property
    def backend(self) -> Backend:
        return self._io.backend

    # ---- DeepSpeed's getters
    def get_block_size(self) -> int:
        return self._io.block_size

    def get_queue_depth(self) -> int:
        return self._io.queue_depth

    def get_single_submit(self) -> bool:
        return self._io.single_submit

    def get_overlap_events(self) -> bool:
        return self._io.overlap_events

    def get_intra_op_parallelism(self) -> int:
        return self._io.thread_count

    def get_alignment(self) -> int:
        """DeepSpeed's figure, 512 bytes per thread: its swap code sizes and places buffers in
        multiples of it. Transfers here need no alignment (O_DIRECT's 4096 is handled inside)."""
        return self.get_intra_op_parallelism() * 512

    def get_use_direct_io(self) -> bool:
        return self._io.use_direct_io

    def stats(self) -> IOStats:
        return self._io.stats()

    # ---- transfers; DeepSpeed's return values
    def read(self, buffer: torch.Tensor, filename: FileArg, validate: bool, file_offset: int = 0) -> int:
        """Read ``buffer.nbytes`` bytes from ``file_offset`` and wait for just this; returns 0."""
        staged = _contiguous(buffer)
        self._io.sync_pread(staged, filename, file_offset)
        if staged is not buffer:
            buffer.copy_(staged)
        if validate:
            _validate(_Check("read", staged, filename, file_offset))
        return 0

    def write(self, buffer: torch.Tensor, filename: FileArg, validate: bool, file_offset: int = 0) -> int:
        """Write the buffer at ``file_offset`` (keeping the rest of the file), wait for it; returns 0."""
        staged = _contiguous(buffer)
        self._io.sync_pwrite(staged, filename, file_offset)
        if validate:
            _validate(_Check("write", staged, filename, file_offset))
        return 0

    def pread(
        self, buffer: torch.Tensor, filename: FileArg, validate: bool, async_op: bool, file_offset: int = 0
    ) -> int:
        """Queue a read; if not ``async_op``, wait() and return its count (every queued op), else 0."""
        staged = _contiguous(buffer)
        with self._lock:
            self._io.async_pread(staged, filename, file_offset)
            if staged is not buffer:
                self._copy_backs.append((buffer, staged))
            return self._queued(_Check("read", staged, filename, file_offset), validate, async_op)

    def pwrite(
        self, buffer: torch.Tensor, filename: FileArg, validate: bool, async_op: bool, file_offset: int = 0
    ) -> int:
        """Queue a write; if not ``async_op``, wait() and return its count (every queued op), else 0."""
        staged = _contiguous(buffer)  # kept alive by the queued operation until it completes
        with self._lock:
            self._io.async_pwrite(staged, filename, file_offset)
            return self._queued(_Check("write", staged, filename, file_offset), validate, async_op)

    def sync_pread(self, buffer: torch.Tensor, filename: FileArg, file_offset: int = 0) -> int:
        return self.pread(buffer, filename, False, False, file_offset)

    def sync_pwrite(self, buffer: torch.Tensor, filename: FileArg, file_offset: int = 0) -> int:
        return self.pwrite(buffer, filename, False, False, file_offset)

    def async_pread(self, buffer: torch.Tensor, filename: FileArg, file_offset: int = 0) -> int:
        return self.pread(buffer, filename, False, True, file_offset)

    def async_pwrite(
        self,
        buffer: torch.Tensor,
        filename: FileArg | None = None,
        file_offset: int = 0,
        *,
        fd: int | None = None,
    ) -> int:
        """Queue a write to ``filename`` (a path or descriptor) or, by DeepSpeed's keyword, to the
        open descriptor ``fd``; exactly one of the two."""
        if fd is None:
            if filename is None:
                raise TypeError("async_pwrite needs a file: filename (a path or descriptor) or fd=")
            return self.pwrite(buffer, filename, False, True, file_offset)
        if filename is not None:
            raise TypeError("async_pwrite takes filename or fd=, not both")
        if not is_descriptor(fd):
            raise TypeError(f"async_pwrite: fd must be an open file descriptor (an int), got {fd!r}")
        return self.pwrite(buffer, fd, False, True, file_offset)

    def wait(self) -> int:
        """Wait for every queued operation; returns how many completed (0 if none were queued)."""
        with self._lock:
            return self._wait_locked()

    def _wait_locked(self) -> int:
        checks, self._checks = self._checks, []
        copy_backs, self._copy_backs = self._copy_backs, []
        completed = self._io.wait()
        for buffer, staged in copy_backs:
            buffer.copy_(staged)
        for check in checks:
            _validate(check)
        return completed

    # ---- page-locked buffers
    def new_cpu_locked_tensor(self, num_elem: int, example_tensor: torch.Tensor) -> torch.Tensor:
        return self._io.new_cpu_locked_tensor(num_elem, example_tensor)

    def free_cpu_locked_tensor(self, tensor: torch.Tensor) -> bool:
        """Free a locked tensor this or any live handle made (DeepSpeed's manager is process-wide)."""
        return free_managed(tensor)  # every handle's registry, this one's included

    def is_pinned(self, buffer: torch.Tensor) -> bool:
        """DeepSpeed's: whether ``buffer`` needs no bounce copy: torch-pinned, or within (a view of)
        a ``new_cpu_locked_tensor`` of any live handle, as DeepSpeed's process-wide manager."""
        return buffer.device.type == "cpu" and (buffer.is_pinned() or is_managed(buffer))

    def is_cpu_locked_tensor(self, tensor: torch.Tensor) -> bool:
        """Not DeepSpeed's: whether this handle made ``tensor`` and mlock accepted its pages."""
        return self._io.is_cpu_locked_tensor(tensor)

    def _queued(self, check: _Check, validate: bool, async_op: bool) -> int:
        """With the lock held: note the check, and for a blocking call wait under the same hold."""
        if validate:
            self._checks.append(check)
        return 0 if async_op else self._wait_locked()

    def __repr__(self) -> str:
        return f"AIOHandle(backend={self.backend!r})"


# DeepSpeed's spelling: AsyncIOBuilder().load().aio_handle(...)
aio_handle = AIOHandle


def _contiguous(buffer: torch.Tensor) -> torch.Tensor:
    """The buffer, or for a non-contiguous one a contiguous copy of it, which the I/O moves instead."""
    # DeepSpeed copies an unpinned buffer into a bounce buffer (and back after a read), so strided
    # buffers work there; ours checks contiguity, so the copy is made here. Not on a GPU: the
    # backends' CPU check says so.
    return buffer if buffer.is_contiguous() or buffer.device.type != "cpu" else buffer.contiguous()


def _validate(check: _Check) -> None:
    """Compare the buffer with the file's bytes at its offset, read with plain os.pread."""
    expected = bytes(tensor_bytes(check.buffer))
    # A descriptor is read through a fresh one of its own: it may be write-only or O_DIRECT.
    name = f"/proc/self/fd/{check.file!r}" if is_descriptor(check.file) else file_path(check.file)
    fd = os.open(name, os.O_RDONLY | os.O_CLOEXEC)
    try:
        found = _pread_all(fd, len(expected), check.offset)
    finally:
        os.close(fd)
    if found == expected:
        return
    where = next(
        (i for i, (a, b) in enumerate(zip(found, expected)) if a != b), min(len(found), len(expected))
    )
    raise OSError(
        errno.EIO,
        f"async_io: validation of the {check.op} failed: the file's byte {check.offset + where} "
        f"(buffer byte {where}) differs from the buffer's ({len(found)} of {len(expected)} bytes read back)",
        name,
    )


def _pread_all(fd: int, nbytes: int, offset: int) -> bytes:
    parts: list[bytes] = []
    got = 0
    while got < nbytes:
        part = os.pread(fd, nbytes - got, offset + got)
        if not part:
            break
        parts.append(part)
        got += len(part)
    return b"".join(parts)
