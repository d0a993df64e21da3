"""async_io: tensors written to files and read back, through the op and through the Python fallback.

The reference for every write is the file itself (read with plain Python) and for
every read the bytes that were written; the two backends also read each other's files.
"""

from __future__ import annotations

import errno
import gc
import os
import warnings
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest
import torch

import kernels.aio.async_io as aio
from kernels._op_load import LazyOp
from op_builder import OpLoadError

BLOCK = 64 * 1024  # small blocks keep the files small while still spanning many requests
SIZES = [1, BLOCK - 1, BLOCK + 1, 3 * 1024 * 1024 + 12345]


def random_bytes(nbytes: int, seed: int = 0) -> torch.Tensor:
    gen = torch.Generator().manual_seed(seed)
    return torch.randint(0, 256, (nbytes,), dtype=torch.uint8, generator=gen)


def tensor_bytes(tensor: torch.Tensor) -> bytes:
    """The tensor's memory as Python bytes (via a uint8 view, so any dtype works)."""
    return tensor.contiguous().reshape(-1).view(torch.uint8).numpy().tobytes()


@pytest.mark.parametrize("thread_count", [1, 2])
@pytest.mark.parametrize("nbytes", SIZES)
def test_round_trip(backend: aio.Backend, thread_count: int, nbytes: int, tmp_path: Path) -> None:
    io = aio.AsyncIO(block_size=BLOCK, queue_depth=4, thread_count=thread_count, backend=backend)
    assert io.backend == backend
    data = random_bytes(nbytes, seed=nbytes)
    path = tmp_path / "t.bin"

    assert io.sync_pwrite(data, path) == nbytes
    assert path.stat().st_size == nbytes
    assert path.read_bytes() == tensor_bytes(data)

    back = torch.zeros_like(data)
    assert io.sync_pread(back, path) == nbytes
    assert torch.equal(back, data)


def test_default_block_size_with_a_partial_last_block(backend: aio.Backend, tmp_path: Path) -> None:
    io = aio.AsyncIO(thread_count=2, backend=backend)  # 1 MiB blocks
    data = torch.randn(5 * (1 << 20) // 4 + 3)  # 5 MiB + 12 bytes of float32
    path = tmp_path / "f32.bin"
    io.sync_pwrite(data, path)
    assert path.stat().st_size == data.numel() * 4
    back = torch.empty_like(data)
    io.sync_pread(back, path)
    assert tensor_bytes(back) == tensor_bytes(data)


def test_async_submit_several_then_one_wait(backend: aio.Backend, tmp_path: Path) -> None:
    io = aio.AsyncIO(block_size=BLOCK, queue_depth=8, thread_count=2, backend=backend)
    tensors = [
        torch.randn(100_003, dtype=torch.float32),
        torch.randn(7, 333, dtype=torch.float64),
        torch.randn(BLOCK + 5).to(torch.bfloat16),
        torch.arange(-50, 50, dtype=torch.int16),
        random_bytes(2 * BLOCK, seed=1),
        torch.tensor(3.5),  # 0-d
        torch.empty(0),  # nothing to move, still a file
    ]
    paths = [tmp_path / f"{i}.bin" for i in range(len(tensors))]
    sizes = [t.numel() * t.element_size() for t in tensors]
    for t, p, n in zip(tensors, paths, sizes):
        assert io.async_pwrite(t, p) == n
    assert io.wait() == len(tensors)
    for t, p, n in zip(tensors, paths, sizes):
        assert p.stat().st_size == n
        assert p.read_bytes() == tensor_bytes(t)

    backs = [torch.empty_like(t) for t in tensors]
    for b, p in zip(backs, paths):
        io.async_pread(b, p)
    assert io.wait() == len(tensors)
    for t, b in zip(tensors, backs):
        assert tensor_bytes(b) == tensor_bytes(t)
    assert io.wait() == 0  # nothing left


def test_kernel_and_fallback_read_each_others_files(kernel_ready: None, tmp_path: Path) -> None:
    kernel = aio.AsyncIO(block_size=BLOCK, thread_count=2, backend="kernel")
    python = aio.AsyncIO(block_size=BLOCK, thread_count=2, backend="python")
    data = random_bytes(5 * BLOCK + 17, seed=7)
    for writer, reader in ((kernel, python), (python, kernel)):
        path = tmp_path / f"{writer.backend}.bin"
        writer.sync_pwrite(data, path)
        back = torch.empty_like(data)
        reader.sync_pread(back, path)
        assert torch.equal(back, data)


def test_dropping_a_handle_finishes_its_queued_writes(backend: aio.Backend, tmp_path: Path) -> None:
    io = aio.AsyncIO(block_size=BLOCK, thread_count=2, backend=backend)
    data = random_bytes(8 * BLOCK + 3, seed=5)
    io.async_pwrite(data, tmp_path / "dropped.bin")
    del io
    gc.collect()
    assert (tmp_path / "dropped.bin").read_bytes() == tensor_bytes(data)


def _supports_o_direct(directory: Path) -> bool:
    probe = directory / "o_direct_probe"
    probe.write_bytes(b"")
    try:
        os.close(os.open(probe, os.O_RDONLY | os.O_DIRECT))
    except OSError as exc:
        if exc.errno == errno.EINVAL:
            return False
        raise
    finally:
        probe.unlink()
    return True


@pytest.mark.parametrize("aligned", [True, False])
def test_direct_io_round_trip(backend: aio.Backend, aligned: bool, tmp_path: Path) -> None:
    if not _supports_o_direct(tmp_path):
        pytest.skip(f"the file system of {tmp_path} does not support O_DIRECT")
    io = aio.AsyncIO(block_size=BLOCK, queue_depth=4, thread_count=2, use_direct_io=True, backend=backend)
    nbytes = 3 * BLOCK + 1001  # an unaligned tail
    data = random_bytes(nbytes, seed=3)
    # An unaligned tensor (one byte into a buffer) makes the op use its bounce buffers.
    storage = torch.empty(nbytes + 4096 + 1, dtype=torch.uint8)
    shift = (-storage.data_ptr()) % 4096 + (0 if aligned else 1)
    source = storage[shift : shift + nbytes]
    source.copy_(data)
    path = tmp_path / "direct.bin"
    io.sync_pwrite(source, path)
    assert path.stat().st_size == nbytes
    assert path.read_bytes() == tensor_bytes(data)
    source.zero_()
    io.sync_pread(source, path)
    assert torch.equal(source, data)


def test_reading_a_missing_file_raises_file_not_found(backend: aio.Backend, tmp_path: Path) -> None:
    io = aio.AsyncIO(backend=backend)
    missing = tmp_path / "nope.bin"
    with pytest.raises(FileNotFoundError, match="cannot open the file for reading") as info:
        io.async_pread(torch.empty(4), missing)
    assert info.value.filename == str(missing)
    with pytest.raises(FileNotFoundError):
        io.sync_pread(torch.empty(4), missing)
    assert io.wait() == 0  # the failed submission queued nothing


def test_size_mismatch_is_a_clear_error(backend: aio.Backend, tmp_path: Path) -> None:
    io = aio.AsyncIO(backend=backend)
    path = tmp_path / "ten.bin"
    path.write_bytes(bytes(range(10)))
    with pytest.raises(ValueError, match=r"tensor is too small for the file.*10 bytes, the tensor 8 bytes"):
        io.sync_pread(torch.empty(2, dtype=torch.float32), path)
    with pytest.raises(ValueError, match=r"file is smaller than the tensor.*10 bytes, the tensor 12 bytes"):
        io.sync_pread(torch.empty(3, dtype=torch.float32), path)


def test_rejects_non_contiguous_tensors(backend: aio.Backend, tmp_path: Path) -> None:
    io = aio.AsyncIO(backend=backend)
    with pytest.raises(ValueError, match="contiguous"):
        io.sync_pwrite(torch.randn(8, 8).t(), tmp_path / "t.bin")


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs /dev/full")
def test_io_errors_surface_in_wait_with_errno_text(backend: aio.Backend) -> None:
    io = aio.AsyncIO(block_size=4096, backend=backend)
    # /dev/full opens for writing and fails every write with ENOSPC.
    io.async_pwrite(torch.ones(10_000), "/dev/full")
    with pytest.raises(OSError, match="No space left on device") as info:
        io.wait()
    assert info.value.errno == errno.ENOSPC
    assert io.wait() == 0  # the failed operation is not reported twice


def test_bad_handle_arguments(backend: aio.Backend) -> None:
    with pytest.raises(ValueError, match="block_size"):
        aio.AsyncIO(block_size=0, backend=backend)
    # Any positive block size is taken with O_DIRECT, as DeepSpeed's handle takes 1024: its
    # direct requests are whole pages (tests/kernels/test_async_io_deepspeed.py).
    assert aio.AsyncIO(block_size=1000, use_direct_io=True, backend=backend).block_size == 1000


@pytest.fixture
def op_unavailable(monkeypatch: pytest.MonkeyPatch) -> Iterator[OpLoadError]:
    """The front as it is on a host where the op cannot load."""
    error = OpLoadError("async_io cannot be built here: libaio is missing", hint="install libaio-dev")

    def cannot_load() -> ModuleType:
        raise error

    op = LazyOp("async_io")  # a fresh load state: nothing loaded, failed or warned yet
    monkeypatch.setattr(op, "_import", cannot_load)
    monkeypatch.setattr(aio, "_OP", op)
    yield error


def test_fallback_warns_once_with_the_reason(op_unavailable: OpLoadError, tmp_path: Path) -> None:
    with pytest.warns(RuntimeWarning, match="libaio is missing.*install libaio-dev"):
        io = aio.AsyncIO(block_size=BLOCK)
    assert io.backend == "python"
    assert aio.active_backend() == "python"
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        again = aio.AsyncIO()  # no second warning
    data = random_bytes(BLOCK + 1)
    again.sync_pwrite(data, tmp_path / "x.bin")
    assert (tmp_path / "x.bin").read_bytes() == tensor_bytes(data)
    with pytest.raises(OpLoadError, match="libaio is missing"):
        aio.AsyncIO(backend="kernel")


def test_auto_uses_the_kernel_when_it_loads(kernel_ready: None) -> None:
    assert aio.active_backend() == "kernel"
    assert aio.AsyncIO().backend == "kernel"
