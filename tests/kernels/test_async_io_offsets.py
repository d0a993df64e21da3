"""async_io at file offsets, through open descriptors, with O_DIRECT, and its submission settings.

Both backends run every test that does not name one. References are the files as plain
Python reads them (``Path.read_bytes``, ``os.pread``) and bytes built here, never our code.
"""

from __future__ import annotations

import errno
import os
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch

import kernels.aio.async_io as aio

BLOCK = 64 * 1024
ALIGN = aio.DIRECT_IO_ALIGNMENT


def random_bytes(nbytes: int, seed: int = 0) -> torch.Tensor:
    gen = torch.Generator().manual_seed(seed)
    return torch.randint(0, 256, (nbytes,), dtype=torch.uint8, generator=gen)


def as_bytes(tensor: torch.Tensor) -> bytes:
    return tensor.contiguous().reshape(-1).view(torch.uint8).numpy().tobytes()


def supports_o_direct(directory: Path) -> bool:
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


@pytest.fixture
def direct_dir(tmp_path: Path) -> Path:
    if not supports_o_direct(tmp_path):
        pytest.skip(f"the file system of {tmp_path} does not support O_DIRECT")
    return tmp_path


@pytest.fixture
def fd_of(tmp_path: Path) -> Iterator[dict[str, int]]:
    """Descriptors opened by a test, closed after it (the handle must never close them)."""
    fds: dict[str, int] = {}
    yield fds
    for fd in fds.values():
        os.close(fd)


# ---------------------------------------------------------------- offsets


def test_several_tensors_in_one_file(backend: aio.Backend, tmp_path: Path) -> None:
    io = aio.AsyncIO(block_size=BLOCK, queue_depth=4, thread_count=2, backend=backend)
    parts = [random_bytes(3 * BLOCK + 5, seed=1), torch.randn(10_001), torch.arange(777, dtype=torch.int16)]
    offsets = [0, parts[0].nbytes, parts[0].nbytes + parts[1].nbytes]
    path = tmp_path / "state.bin"
    for tensor, offset in zip(parts, offsets):
        assert io.async_pwrite(tensor, path, offset=offset) == tensor.nbytes
    assert io.wait() == 3
    expected = b"".join(as_bytes(t) for t in parts)
    assert path.read_bytes() == expected

    backs = [torch.empty_like(t) for t in parts]
    for back, offset in zip(backs, offsets):
        io.async_pread(back, path, offset=offset)
    assert io.wait() == 3
    for back, tensor in zip(backs, parts):
        assert as_bytes(back) == as_bytes(tensor)

    # Rewriting the middle tensor leaves its neighbours' bytes and the file size alone.
    new_middle = torch.randn(10_001)
    io.sync_pwrite(new_middle, path, offset=offsets[1])
    assert path.read_bytes() == as_bytes(parts[0]) + as_bytes(new_middle) + as_bytes(parts[2])


def test_read_into_a_buffer_smaller_than_the_file(backend: aio.Backend, tmp_path: Path) -> None:
    content = os.urandom(5 * BLOCK + 123)
    path = tmp_path / "big.bin"
    path.write_bytes(content)
    io = aio.AsyncIO(block_size=BLOCK, thread_count=2, backend=backend)
    head = torch.empty(BLOCK + 7, dtype=torch.uint8)
    assert io.sync_pread(head, path, offset=0) == BLOCK + 7
    assert as_bytes(head) == content[: BLOCK + 7]
    middle = torch.empty(1000, dtype=torch.float32)  # 4000 bytes from an odd offset
    io.sync_pread(middle, path, offset=2 * BLOCK + 3)
    assert as_bytes(middle) == content[2 * BLOCK + 3 : 2 * BLOCK + 4003]
    last = torch.empty(123, dtype=torch.uint8)
    io.sync_pread(last, path, offset=len(content) - 123)  # ends exactly at the end of the file
    assert as_bytes(last) == content[-123:]


def test_a_write_past_the_end_extends_the_file(backend: aio.Backend, tmp_path: Path) -> None:
    io = aio.AsyncIO(block_size=BLOCK, backend=backend)
    path = tmp_path / "sparse.bin"
    path.write_bytes(b"abc")
    data = random_bytes(BLOCK + 1, seed=2)
    io.sync_pwrite(data, path, offset=10_000)
    assert path.read_bytes() == b"abc" + bytes(10_000 - 3) + as_bytes(data)


def test_offset_none_is_the_whole_file_and_offset_zero_is_not(backend: aio.Backend, tmp_path: Path) -> None:
    io = aio.AsyncIO(block_size=BLOCK, backend=backend)
    path = tmp_path / "f.bin"
    path.write_bytes(b"x" * 1000)
    io.sync_pwrite(torch.zeros(10, dtype=torch.uint8), path, offset=0)
    assert path.read_bytes() == bytes(10) + b"x" * 990  # the rest is kept
    io.sync_pwrite(torch.ones(10, dtype=torch.uint8), path)
    assert path.read_bytes() == bytes([1]) * 10  # truncated, as before offsets existed
    with pytest.raises(ValueError, match="tensor is too small for the file"):
        io.sync_pread(torch.empty(4, dtype=torch.uint8), path)  # whole-file reads still need equal sizes


def test_reading_past_the_end_is_a_clear_error(backend: aio.Backend, tmp_path: Path) -> None:
    io = aio.AsyncIO(backend=backend)
    path = tmp_path / "ten.bin"
    path.write_bytes(bytes(range(10)))
    message = r"too short for the read: .*ten.bin holds 10 bytes, the read needs bytes \[4, 12\)"
    with pytest.raises(ValueError, match=message):
        io.async_pread(torch.empty(2, dtype=torch.float32), path, offset=4)
    assert io.wait() == 0  # nothing was queued


def test_bad_offsets(backend: aio.Backend, tmp_path: Path) -> None:
    io = aio.AsyncIO(backend=backend)
    with pytest.raises(ValueError, match="offset must be >= 0, got -1"):
        io.sync_pwrite(torch.ones(4), tmp_path / "a.bin", offset=-1)
    with pytest.raises(TypeError, match="offset must be an int or None"):
        io.sync_pwrite(torch.ones(4), tmp_path / "a.bin", offset=1.5)  # type: ignore[arg-type]
    assert not (tmp_path / "a.bin").exists()  # refused before the file was opened


# ---------------------------------------------------------------- descriptors


def test_descriptor_round_trip_leaves_it_open(
    backend: aio.Backend, tmp_path: Path, fd_of: dict[str, int]
) -> None:
    io = aio.AsyncIO(block_size=BLOCK, thread_count=2, backend=backend)
    path = tmp_path / "fd.bin"
    fd = fd_of["rw"] = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    first, second = random_bytes(2 * BLOCK + 9, seed=3), random_bytes(BLOCK, seed=4)
    io.async_pwrite(first, fd, offset=0)
    io.async_pwrite(second, fd, offset=first.nbytes + 100)
    assert io.wait() == 2
    assert os.pread(fd, 10**7, 0) == as_bytes(first) + bytes(100) + as_bytes(second)
    back = torch.empty_like(second)
    assert io.sync_pread(back, fd, offset=first.nbytes + 100) == second.nbytes
    assert torch.equal(back, second)
    os.fstat(fd)  # still open: the handle never closes a caller's descriptor


def test_descriptor_whole_file_write_truncates(
    backend: aio.Backend, tmp_path: Path, fd_of: dict[str, int]
) -> None:
    path = tmp_path / "fd.bin"
    path.write_bytes(b"y" * 5000)
    fd = fd_of["w"] = os.open(path, os.O_WRONLY)
    aio.AsyncIO(backend=backend).sync_pwrite(torch.ones(3, dtype=torch.uint8), fd)
    assert path.read_bytes() == b"\x01\x01\x01"


def test_descriptor_errors(backend: aio.Backend, tmp_path: Path, fd_of: dict[str, int]) -> None:
    io = aio.AsyncIO(backend=backend)
    path = tmp_path / "e.bin"
    path.write_bytes(bytes(16))
    closed = os.open(path, os.O_RDONLY)
    os.close(closed)
    with pytest.raises(OSError, match=f"file descriptor {closed} is not open: Bad file descriptor") as info:
        io.sync_pread(torch.empty(16, dtype=torch.uint8), closed)
    assert info.value.errno == errno.EBADF and info.value.filename is None
    fd_of["w"] = os.open(path, os.O_WRONLY)
    with pytest.raises(OSError, match="is not open for reading"):
        io.sync_pread(torch.empty(16, dtype=torch.uint8), fd_of["w"])
    fd_of["r"] = os.open(path, os.O_RDONLY)
    with pytest.raises(OSError, match="is not open for writing"):
        io.sync_pwrite(torch.empty(16, dtype=torch.uint8), fd_of["r"], offset=0)
    fd_of["a"] = os.open(path, os.O_WRONLY | os.O_APPEND)
    with pytest.raises(ValueError, match="O_APPEND"):
        io.sync_pwrite(torch.empty(16, dtype=torch.uint8), fd_of["a"], offset=0)
    with pytest.raises(
        ValueError, match=r"file descriptor \d+ holds 16 bytes, the read needs bytes \[8, 24\)"
    ):
        io.sync_pread(torch.empty(16, dtype=torch.uint8), fd_of["r"], offset=8)
    with pytest.raises(TypeError):
        io.sync_pread(torch.empty(16, dtype=torch.uint8), True)  # type: ignore[arg-type]
    assert path.read_bytes() == bytes(16)


# ---------------------------------------------------------------- O_DIRECT


def placed(nbytes: int, offset: int, aligned: bool) -> torch.Tensor:
    """A uint8 tensor whose memory lines up with file position ``offset`` (address % 4096 ==
    offset % 4096, so aligned file pages are aligned memory), or is one byte off."""
    storage = torch.empty(nbytes + 2 * ALIGN, dtype=torch.uint8)
    shift = (offset - storage.data_ptr()) % ALIGN + (0 if aligned else 1)
    return storage[shift : shift + nbytes]


@pytest.mark.parametrize("aligned_memory", [True, False])
@pytest.mark.parametrize(
    ("offset", "nbytes"), [(0, 4 * BLOCK), (3 * ALIGN, 2 * BLOCK + 100), (1000, 3 * BLOCK)]
)
def test_direct_io_at_offsets(
    backend: aio.Backend, direct_dir: Path, aligned_memory: bool, offset: int, nbytes: int
) -> None:
    io = aio.AsyncIO(block_size=BLOCK, queue_depth=4, thread_count=2, use_direct_io=True, backend=backend)
    path = direct_dir / "direct.bin"
    before = os.urandom(offset)
    path.write_bytes(before)
    data = random_bytes(nbytes, seed=offset + nbytes)
    source = placed(nbytes, offset, aligned_memory)
    source.copy_(data)
    io.sync_pwrite(source, path, offset=offset)
    assert path.read_bytes() == before + as_bytes(data)
    source.zero_()
    io.sync_pread(source, path, offset=offset)
    assert torch.equal(source, data)

    # Every whole aligned page went through O_DIRECT; only the partial pages at either
    # end moved with plain calls, and only memory not lined up with them needed bounce buffers.
    stats = io.stats()
    partial_pages = (offset % ALIGN != 0) + ((offset + nbytes) % ALIGN != 0)
    assert stats.plain_calls == 2 * partial_pages  # the write and the read
    assert stats.direct_requests == stats.requests > 0
    assert stats.bounced_requests == (0 if aligned_memory else stats.direct_requests)


def test_a_descriptor_opened_with_o_direct(
    backend: aio.Backend, direct_dir: Path, fd_of: dict[str, int]
) -> None:
    # The handle is not in direct mode, but the caller's descriptor is: it is used for the
    # aligned pages and a reopened buffered one for the rest.
    io = aio.AsyncIO(block_size=BLOCK, backend=backend)
    path = direct_dir / "odirect.bin"
    fd = fd_of["d"] = os.open(path, os.O_RDWR | os.O_CREAT | os.O_DIRECT, 0o600)
    data = random_bytes(2 * BLOCK + 11, seed=9)
    io.sync_pwrite(data, fd, offset=5)
    assert path.read_bytes() == bytes(5) + as_bytes(data)
    back = torch.empty_like(data)
    io.sync_pread(back, fd, offset=5)
    assert torch.equal(back, data)
    assert io.stats().direct_requests > 0 and io.stats().plain_calls == 4


def test_direct_io_where_the_file_system_refuses_it(backend: aio.Backend) -> None:
    if not os.path.isdir("/dev/shm") or supports_o_direct(Path("/dev/shm")):
        pytest.skip("needs a tmpfs /dev/shm without O_DIRECT")
    io = aio.AsyncIO(block_size=BLOCK, use_direct_io=True, backend=backend)
    path = Path("/dev/shm") / f"aio-test-{os.getpid()}-{backend}.bin"
    try:
        with pytest.raises(OSError, match="does not support O_DIRECT; use use_direct_io=False"):
            io.sync_pwrite(torch.ones(10), path)
    finally:
        path.unlink(missing_ok=True)


# ---------------------------------------------------------------- submission settings


def test_settings_are_reported(backend: aio.Backend) -> None:
    io = aio.AsyncIO(8192, 3, 2, True, True, False, backend=backend)
    got = (
        io.block_size,
        io.queue_depth,
        io.thread_count,
        io.use_direct_io,
        io.single_submit,
        io.overlap_events,
    )
    assert got == (8192, 3, 2, True, True, False)


def test_block_size_sets_the_requests(backend: aio.Backend, tmp_path: Path) -> None:
    io = aio.AsyncIO(block_size=BLOCK, thread_count=1, backend=backend)
    io.sync_pwrite(random_bytes(10 * BLOCK + 1), tmp_path / "b.bin")
    assert io.stats().requests == 11


@pytest.mark.parametrize("single_submit", [False, True])
def test_kernel_batches_without_overlap(kernel_ready: None, single_submit: bool, tmp_path: Path) -> None:
    # overlap_events=False: queue_depth requests are submitted, then all reaped, then the next batch.
    io = aio.AsyncIO(BLOCK, 4, 1, False, single_submit, False, backend="kernel")
    io.sync_pwrite(random_bytes(10 * BLOCK), tmp_path / "s.bin")
    stats = io.stats()
    assert stats.requests == 10
    assert stats.max_in_flight == 4  # queue_depth
    assert stats.reap_calls == 3  # batches of 4, 4, 2, each reaped whole
    assert stats.overlapped_requests == 0
    assert stats.submit_calls == (10 if single_submit else 3)


def test_kernel_starts_one_worker_per_thread(kernel_ready: None) -> None:
    def threads() -> int:
        return len(os.listdir("/proc/self/task"))

    before = threads()
    io = aio.AsyncIO(thread_count=3, backend="kernel")
    assert threads() == before + 3
    del io
    assert threads() == before
