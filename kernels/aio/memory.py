"""Page-locked CPU tensors that an async_io handle allocates and frees (DeepSpeed's
``new_cpu_locked_tensor`` / ``free_cpu_locked_tensor``).

Like DeepSpeed's ``aio_handle``, the memory is page-aligned (so O_DIRECT moves it
without a bounce buffer) and ``mlock``'ed (so the kernel never pages it out while a
request is in flight). It is not CUDA-registered: ``tensor.is_pinned()`` stays False,
as it does for DeepSpeed's; and torch's own ``pin_memory=True`` needs an accelerator,
which a CPU build of torch refuses ("no pinned memory allocator is available").

When ``mlock`` is refused (``RLIMIT_MEMLOCK``, ``ulimit -l``: often 8 MiB for a user
without ``CAP_IPC_LOCK``) the tensor is still made, page-aligned but pageable, after one
warning that says why; ``is_locked()`` tells which a tensor got.

Freeing unlocks the pages and forgets the tensor; the memory itself goes back to the
system when the last reference to the tensor does, so a tensor still in use is never
left pointing at freed memory (DeepSpeed frees at once).

``is_managed()`` asks every live handle, as DeepSpeed's process-wide pinned-tensor manager
answers ``aio_handle.is_pinned``: its swappers allocate buffers with one handle and check
them, or views of them, with another.
"""

from __future__ import annotations

import ctypes
import mmap
import os
import threading
import warnings
import weakref
from dataclasses import dataclass
from functools import cache

import torch

from kernels._op_load import _outside_stacklevel

__all__ = ["LockedTensors", "free_managed", "is_managed"]

_warned = threading.Event()


@cache
def _libc() -> ctypes.CDLL:
    return ctypes.CDLL(None, use_errno=True)


def _mlock(address: int, length: int) -> int:
    """0, or the errno ``mlock`` failed with."""
    if _libc().mlock(ctypes.c_void_p(address), ctypes.c_size_t(length)) == 0:
        return 0
    return ctypes.get_errno()


def _munlock(address: int, length: int) -> None:
    _libc().munlock(ctypes.c_void_p(address), ctypes.c_size_t(length))


def _memlock_limit() -> str:
    import resource  # Unix only, like the rest of async_io

    soft, _ = resource.getrlimit(resource.RLIMIT_MEMLOCK)
    return "unlimited" if soft == resource.RLIM_INFINITY else f"{soft} bytes"


@dataclass
class _Block:
    mapping: mmap.mmap
    length: int  # bytes mapped: the tensor's bytes rounded up to whole pages
    locked: bool
    nbytes: int  # the tensor's bytes: what a view must lie within to count as managed


class LockedTensors:
    """The page-locked tensors one handle made, by address; thread-safe."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._blocks: dict[int, _Block] = {}
        _live.add(self)

    def new(self, num_elem: int, example_tensor: torch.Tensor) -> torch.Tensor:
        """A 1-D CPU tensor of ``num_elem`` elements of ``example_tensor``'s dtype (contents undefined)."""
        if num_elem < 0:
            raise ValueError(f"async_io: num_elem must be >= 0, got {num_elem}")
        dtype = example_tensor.dtype
        nbytes = num_elem * torch.empty((), dtype=dtype).element_size()
        # An anonymous mapping is page-aligned and whole pages long; at least one page so
        # that even an empty tensor has an address of its own to be freed by.
        length = max(-(-nbytes // mmap.PAGESIZE), 1) * mmap.PAGESIZE
        mapping = mmap.mmap(-1, length)
        # The tensor keeps the mapping alive. frombuffer refuses count=0, so an empty
        # tensor is an empty view of a one-byte one (its storage still has the address).
        raw = torch.frombuffer(mapping, dtype=torch.uint8, count=max(nbytes, 1))
        tensor = raw[:nbytes].view(dtype)
        address = _address(tensor)
        err = _mlock(address, length)
        if err:
            self._warn_unlocked(length, err)
        with self._lock:
            self._blocks[address] = _Block(mapping, length, locked=err == 0, nbytes=nbytes)
        return tensor

    def free(self, tensor: torch.Tensor) -> bool:
        """Unlock and forget a tensor ``new`` made; False (and nothing done) for any other tensor."""
        with self._lock:
            block = self._blocks.pop(_address(tensor), None)
        if block is None:
            return False
        if block.locked:
            _munlock(_address(tensor), block.length)
        return True

    def is_locked(self, tensor: torch.Tensor) -> bool:
        """Whether ``tensor`` is one this handle made and its pages are locked."""
        with self._lock:
            block = self._blocks.get(_address(tensor))
        return block is not None and block.locked

    def holds(self, tensor: torch.Tensor) -> bool:
        """Whether all of ``tensor``'s bytes lie within one tensor ``new`` made (a view of it counts).

        As DeepSpeed's ``is_managed``: by ``data_ptr()``, so an empty tensor (whose data_ptr
        is 0) never counts, and whether mlock was refused does not matter (the memory is
        page-aligned all the same, so the handle moves it without a bounce buffer).
        """
        if tensor.device.type != "cpu":
            return False
        start = int(tensor.data_ptr())
        if start == 0:
            return False
        end = start + tensor.numel() * tensor.element_size()
        with self._lock:
            return any(
                address <= start and end <= address + block.nbytes for address, block in self._blocks.items()
            )

    def free_all(self) -> None:
        with self._lock:
            blocks, self._blocks = self._blocks, {}
        for address, block in blocks.items():
            if block.locked:
                _munlock(address, block.length)

    @staticmethod
    def _warn_unlocked(length: int, err: int) -> None:
        if _warned.is_set():
            return
        _warned.set()
        warnings.warn(
            f"async_io: cannot page-lock {length} bytes (mlock: {os.strerror(err)}; "
            f"RLIMIT_MEMLOCK is {_memlock_limit()}): the tensor is page-aligned but may be paged out. "
            "Raise the limit (ulimit -l, or memlock in /etc/security/limits.conf) or grant CAP_IPC_LOCK.",
            RuntimeWarning,
            stacklevel=_outside_stacklevel(),  # the user's call, through either handle
        )


# Every live handle's tensors, for is_managed (a dropped handle has unlocked its own).
_live: weakref.WeakSet[LockedTensors] = weakref.WeakSet()


def is_managed(tensor: torch.Tensor) -> bool:
    """Whether ``tensor`` lies within a tensor some live handle made (see ``LockedTensors.holds``)."""
    return any(registry.holds(tensor) for registry in list(_live))


def free_managed(tensor: torch.Tensor) -> bool:
    """Free ``tensor`` through whichever live handle made it, as DeepSpeed's process-wide manager
    lets any handle free any locked tensor; False when none did."""
    return any(registry.free(tensor) for registry in list(_live))


def _address(tensor: torch.Tensor) -> int:
    # data_ptr(), except that an empty tensor's is 0: its storage still knows where it is.
    return int(tensor.untyped_storage().data_ptr()) + int(tensor.storage_offset()) * tensor.element_size()
