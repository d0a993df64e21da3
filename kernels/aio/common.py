"""What the ``async_io`` backends share: argument types, range splitting, checks and messages.

The compiled op (``kernels/aio/csrc/``) and the Python fallback (``kernels.aio.python_handle``)
split work and word errors the same way; the rules live here once for the Python side
and are mirrored in ``aio_transfer.h``.
"""

from __future__ import annotations

import ctypes
import os
from dataclasses import dataclass, fields
from typing import Protocol, Union

import torch

# O_DIRECT wants buffers, offsets and sizes aligned to the device's logical block;
# 4096 covers 512-byte and 4K-sector devices (the op uses the same value).
DIRECT_IO_ALIGNMENT = 4096

PathArg = Union[str, bytes, "os.PathLike[str]", "os.PathLike[bytes]"]
# A path (opened and closed by the handle) or an open descriptor (used, never closed).
FileArg = Union[PathArg, int]


@dataclass(frozen=True)
class IOStats:
    """What a handle did since it was made, so the submission settings can be seen at work.

    requests: block requests issued (AIO requests; the fallback's pread/pwrite per block).
    submit_calls: io_submit calls (one per request with ``single_submit``).
    overlapped_requests: requests prepared while earlier ones were still in flight (always 0
    without ``overlap_events``; with it, only as many as the device is slow enough to allow).
    reap_calls: io_getevents calls that returned events.
    max_in_flight: the most requests one worker had in flight (at most ``queue_depth``).
    direct_requests: requests on the O_DIRECT descriptor; bounced_requests: those of them
    staged through an aligned buffer because the tensor's memory was not aligned.
    plain_calls: pieces moved with plain pread/pwrite instead (unaligned heads and tails
    under O_DIRECT, short completions, files without AIO support).
    """

    requests: int = 0
    submit_calls: int = 0
    overlapped_requests: int = 0
    reap_calls: int = 0
    max_in_flight: int = 0
    direct_requests: int = 0
    bounced_requests: int = 0
    plain_calls: int = 0

    @classmethod
    def from_mapping(cls, values: dict[str, int]) -> IOStats:
        return cls(**{f.name: int(values[f.name]) for f in fields(cls)})


class BackendHandle(Protocol):
    """What both backends provide (the compiled ``AsyncIOHandle`` and ``PythonAIOHandle``)."""

    @property
    def block_size(self) -> int: ...
    @property
    def queue_depth(self) -> int: ...
    @property
    def thread_count(self) -> int: ...
    @property
    def use_direct_io(self) -> bool: ...
    @property
    def single_submit(self) -> bool: ...
    @property
    def overlap_events(self) -> bool: ...

    def async_pwrite(self, tensor: torch.Tensor, file: FileArg, offset: int | None = None) -> int: ...
    def async_pread(self, tensor: torch.Tensor, file: FileArg, offset: int | None = None) -> int: ...
    def wait(self) -> int: ...
    def sync_pwrite(self, tensor: torch.Tensor, file: FileArg, offset: int | None = None) -> int: ...
    def sync_pread(self, tensor: torch.Tensor, file: FileArg, offset: int | None = None) -> int: ...
    def stats(self) -> dict[str, int]: ...


def request_block(block_size: int, direct: bool) -> int:
    """The bytes one request moves (as the op's ``aio::request_block``): under O_DIRECT
    ``block_size`` rounded up to whole pages, since O_DIRECT moves nothing less (DeepSpeed's
    handle takes any block size, 1024 in its own tests); otherwise ``block_size``."""
    return -(-block_size // DIRECT_IO_ALIGNMENT) * DIRECT_IO_ALIGNMENT if direct else block_size


def direct_head(offset: int) -> int:
    """Bytes before the first page-aligned file position, for a buffer placed at ``offset``."""
    return -offset % DIRECT_IO_ALIGNMENT


def split_range(nbytes: int, block: int, parts: int, head: int = 0) -> list[tuple[int, int]]:
    """The head [0, head) when there is one, then at most ``parts`` ranges starting ``head``
    plus a multiple of ``block`` into the buffer (as the op's ``aio::split_range``)."""
    head = min(head, max(nbytes, 0))
    out = [(0, head)] if head > 0 else []
    rest = nbytes - head
    if rest <= 0:
        return out
    blocks = -(-rest // block)
    per_part = -(-blocks // parts)
    for first in range(0, blocks, per_part):
        out.append((head + first * block, min(nbytes, head + (first + per_part) * block)))
    return out


def tensor_bytes(tensor: torch.Tensor) -> memoryview:
    """A writable view of the tensor's memory, whatever its dtype (bfloat16 and fp8 included)."""
    nbytes = tensor.numel() * tensor.element_size()
    if nbytes == 0:
        return memoryview(bytearray())
    return memoryview((ctypes.c_char * nbytes).from_address(tensor.data_ptr())).cast("B")


def check_tensor(tensor: torch.Tensor) -> None:
    if tensor.device.type != "cpu":
        raise ValueError(f"async_io: the tensor must be on the CPU, got {tensor.device}")
    if not tensor.is_contiguous():
        raise ValueError("async_io: the tensor must be contiguous")


def check_offset(offset: object) -> int | None:
    """``offset`` as given (None: the tensor is the whole file), or the error the op raises."""
    if offset is None:
        return None
    if not isinstance(offset, int):
        raise TypeError("async_io: offset must be an int or None")
    if offset < 0:
        raise ValueError(f"async_io: offset must be >= 0, got {offset}")
    return offset


def is_descriptor(file: object) -> bool:
    # A bool is an int to Python, never a descriptor here (file_path then refuses it).
    return isinstance(file, int) and not isinstance(file, bool)


def file_path(file: FileArg) -> str:
    """The path ``file`` names; TypeError, worded as ``os.fsdecode``'s, for a non-path (a bool)."""
    if isinstance(file, int):
        raise TypeError(f"expected str, bytes or os.PathLike object, not {type(file).__name__}")
    return os.fsdecode(file)


def read_size_error(name: str, file_bytes: int, nbytes: int, offset: int | None) -> ValueError | None:
    """Why a read of ``nbytes`` at ``offset`` cannot come from a file of ``file_bytes``, or None."""
    holds = f"{name} holds {file_bytes} bytes"
    if offset is None and file_bytes != nbytes:
        what = (
            "the tensor is too small for the file"
            if file_bytes > nbytes
            else "the file is smaller than the tensor"
        )
        return ValueError(f"async_io: {what}: {holds}, the tensor {nbytes} bytes (numel * element_size)")
    if offset is not None and offset + nbytes > file_bytes:
        return ValueError(
            f"async_io: the file is too short for the read: {holds}, "
            f"the read needs bytes [{offset}, {offset + nbytes})"
        )
    return None


DIRECT_UNSUPPORTED_HINT = " (this file system does not support O_DIRECT; use use_direct_io=False)"
APPEND_MESSAGE = (
    "was opened with O_APPEND, which makes every write go to the end of the file "
    "whatever its offset; open it without O_APPEND"
)
