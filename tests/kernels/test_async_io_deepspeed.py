"""DeepSpeed's ``aio_handle`` conventions (``kernels.aio.handle``) and page-locked buffers.

Names, argument order, defaults and return values follow DeepSpeed's
``csrc/aio/py_lib/py_ds_aio.cpp`` and ``deepspeed_py_io_handle.cpp``. References are files
read with plain Python and ``/proc/self/status`` (VmLck: the kernel's count of locked memory).
"""

from __future__ import annotations

import errno
import mmap
import os
import threading
import warnings
from pathlib import Path

import pytest
import torch

import kernels.aio.async_io as aio
import kernels.aio.memory as aio_memory
from kernels.aio.handle import AIOHandle, aio_handle

BLOCK = 64 * 1024


def random_bytes(nbytes: int, seed: int = 0) -> torch.Tensor:
    gen = torch.Generator().manual_seed(seed)
    return torch.randint(0, 256, (nbytes,), dtype=torch.uint8, generator=gen)


def as_bytes(tensor: torch.Tensor) -> bytes:
    return tensor.contiguous().reshape(-1).view(torch.uint8).numpy().tobytes()


def o_direct_ok(directory: Path) -> bool:
    probe = directory / "probe"
    probe.write_bytes(b"")
    try:
        os.close(os.open(probe, os.O_RDONLY | os.O_DIRECT))
        return True
    except OSError:
        return False
    finally:
        probe.unlink()


@pytest.fixture
def handle(backend: aio.Backend, tmp_path: Path) -> AIOHandle:
    """DeepSpeed's settings but small blocks; O_DIRECT where the file system has it."""
    return AIOHandle(BLOCK, 8, False, False, 2, use_direct_io=o_direct_ok(tmp_path), backend=backend)


def vm_locked_kb() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmLck:"):
            return int(line.split()[1])
    raise AssertionError("no VmLck in /proc/self/status")


# ---------------------------------------------------------------- settings


def test_defaults_and_getters_are_deepspeeds(backend: aio.Backend) -> None:
    h = aio_handle(backend=backend)  # DeepSpeed's spelling of the class
    assert h.backend == backend
    assert (h.get_block_size(), h.get_queue_depth()) == (1024 * 1024, 128)
    assert (h.get_single_submit(), h.get_overlap_events(), h.get_intra_op_parallelism()) == (False, False, 1)
    assert h.get_alignment() == 512 * h.get_intra_op_parallelism() and h.get_use_direct_io()
    custom = AIOHandle(8192, 16, True, True, 3, use_direct_io=False, backend=backend)
    got = (custom.get_block_size(), custom.get_queue_depth(), custom.get_single_submit())
    assert got == (8192, 16, True)
    assert (custom.get_overlap_events(), custom.get_intra_op_parallelism(), custom.get_use_direct_io()) == (
        True,
        3,
        False,
    )


# ---------------------------------------------------------------- return values


def test_return_values(handle: AIOHandle, tmp_path: Path) -> None:
    a, b = random_bytes(3 * BLOCK + 17, seed=1), random_bytes(BLOCK, seed=2)
    path = tmp_path / "x.bin"
    assert handle.async_pwrite(a, str(path), 0) == 0
    assert handle.async_pwrite(b, str(path), a.nbytes) == 0
    assert handle.wait() == 2
    assert handle.wait() == 0
    assert path.read_bytes() == as_bytes(a) + as_bytes(b)

    back_a, back_b = torch.empty_like(a), torch.empty_like(b)
    assert handle.async_pread(back_a, str(path)) == 0
    # A synchronous call waits for everything queued, and returns that count, as DeepSpeed's.
    assert handle.sync_pread(back_b, str(path), a.nbytes) == 2
    assert torch.equal(back_a, a) and torch.equal(back_b, b)

    # pread / pwrite(buffer, filename, validate, async, file_offset): by position, as DeepSpeed's callers.
    assert handle.pwrite(b, str(path), True, False, 10) == 1
    assert handle.pread(back_b, str(path), True, True, 10) == 0
    assert handle.wait() == 1
    assert torch.equal(back_b, b)
    assert handle.sync_pwrite(a, str(path)) == 1
    assert handle.write(b, str(path), True, 5) == 0
    assert handle.read(back_b, str(path), True, 5) == 0
    assert torch.equal(back_b, b)


def test_pwrite_keeps_the_rest_of_the_file(handle: AIOHandle, tmp_path: Path) -> None:
    path = tmp_path / "keep.bin"
    content = os.urandom(4 * BLOCK)
    path.write_bytes(content)
    small = random_bytes(BLOCK, seed=3)
    handle.sync_pwrite(small, str(path), BLOCK)
    assert path.read_bytes() == content[:BLOCK] + as_bytes(small) + content[2 * BLOCK :]


def test_pread_of_part_of_a_file_and_past_its_end(handle: AIOHandle, tmp_path: Path) -> None:
    path = tmp_path / "part.bin"
    content = os.urandom(3 * BLOCK)
    path.write_bytes(content)
    buf = torch.empty(BLOCK // 4, dtype=torch.float32)
    assert handle.sync_pread(buf, str(path), BLOCK + 8) == 1
    assert as_bytes(buf) == content[BLOCK + 8 : 2 * BLOCK + 8]
    with pytest.raises(ValueError, match=r"too short for the read: .* needs bytes \[196600, 262136\)"):
        handle.async_pread(buf, str(path), 3 * BLOCK - 8)
    assert handle.wait() == 0


def test_async_pwrite_to_a_descriptor(handle: AIOHandle, tmp_path: Path) -> None:
    path = tmp_path / "fd.bin"
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        data = random_bytes(2 * BLOCK + 3, seed=4)
        assert handle.async_pwrite(data, fd, 4096) == 0
        assert handle.wait() == 1
        assert os.pread(fd, 10**6, 0) == bytes(4096) + as_bytes(data)
        back = torch.empty_like(data)
        assert handle.sync_pread(back, fd, 4096) == 1
        assert torch.equal(back, data)
    finally:
        os.close(fd)


def test_async_pwrite_takes_deepspeeds_fd_keyword(handle: AIOHandle, tmp_path: Path) -> None:
    # DeepSpeed's overload for a descriptor names it fd: h.async_pwrite(buffer, fd=f.fileno()).
    path = tmp_path / "fd_keyword.bin"
    data = random_bytes(BLOCK + 5, seed=11)
    with path.open("w+b") as f:
        assert handle.async_pwrite(data, fd=f.fileno()) == 0
        assert handle.async_pwrite(data, fd=f.fileno(), file_offset=len(as_bytes(data))) == 0
        assert handle.wait() == 2
    assert path.read_bytes() == as_bytes(data) * 2
    with pytest.raises(TypeError, match="not both"):
        handle.async_pwrite(data, str(path), fd=3)
    with pytest.raises(TypeError, match="needs a file"):
        handle.async_pwrite(data)
    with pytest.raises(TypeError, match="open file descriptor"):
        handle.async_pwrite(data, fd=str(path))  # type: ignore[arg-type]
    assert handle.wait() == 0  # nothing was queued by the refused calls


@pytest.mark.parametrize("block_size", [1024, 1000, 5000])
def test_deepspeeds_small_block_sizes_with_o_direct(
    backend: aio.Backend, tmp_path: Path, block_size: int
) -> None:
    """DeepSpeed's own tests make ``aio_handle(1024, 2, True, True, 2)``; O_DIRECT needs aligned
    buffers and offsets, not an aligned block size, so the requests that go direct are whole pages."""
    if not o_direct_ok(tmp_path):
        pytest.skip(f"the file system of {tmp_path} has no O_DIRECT")
    handle = AIOHandle(block_size, 2, True, True, 2, backend=backend)
    assert handle.get_block_size() == block_size and handle.get_use_direct_io()
    pages = 8
    data = random_bytes(pages * 4096 + 100, seed=block_size)  # a partial last page too
    path = tmp_path / "small_blocks.bin"
    assert handle.sync_pwrite(data, str(path)) == 1
    assert path.read_bytes() == as_bytes(data)
    back = torch.zeros_like(data)
    assert handle.sync_pread(back, str(path)) == 1
    assert torch.equal(back, data)
    stats = handle.stats()
    # Every whole page went through O_DIRECT in requests of block_size rounded up to pages;
    # only the partial last page moved with a plain call (once for the write, once for the read).
    per_request = -(-block_size // 4096)
    assert stats.direct_requests == stats.requests == 2 * -(-pages // per_request)
    assert stats.plain_calls == 2


@pytest.mark.parametrize("calls", ["sync_pread", "pread", "reads_and_writes"])
def test_concurrent_blocking_calls_each_return_their_own_count_after_their_own_data(
    backend: aio.Backend, tmp_path: Path, calls: str
) -> None:
    """Threads sharing one handle, each with its own file: every blocking call returns 1 (its
    own operation) and only once its bytes have landed, which a call returning early (another
    thread's wait having collected its operation) would show as missing data."""
    threads, rounds, nbytes = 8, 10, 4 << 20
    # Small requests, few in flight: each read takes long enough to be caught unfinished.
    handle = AIOHandle(16 * 1024, 2, False, False, 2, use_direct_io=False, backend=backend)
    contents = [os.urandom(nbytes) for _ in range(threads)]
    paths = [tmp_path / f"thread{i}.bin" for i in range(threads)]
    for path, content in zip(paths, contents):
        path.write_bytes(content)
    start = threading.Barrier(threads)
    problems: list[str] = []

    def read(i: int, buf: torch.Tensor) -> None:
        buf.zero_()
        count = (
            handle.sync_pread(buf, str(paths[i]))
            if calls == "sync_pread" or i % 2
            else handle.pread(buf, str(paths[i]), False, False)
        )
        # The last bytes first: the part of an unfinished read most likely still missing.
        landed = bytes(buf[-64:].numpy()) == contents[i][-64:] and as_bytes(buf) == contents[i]
        if count != 1 or not landed:
            problems.append(f"thread {i}: read returned {count}, data {'in place' if landed else 'missing'}")

    def write(i: int, buf: torch.Tensor, round_: int) -> None:
        buf.copy_(torch.frombuffer(bytearray(contents[(i + round_) % threads]), dtype=torch.uint8))
        count = handle.sync_pwrite(buf, str(paths[i]))
        if count != 1 or paths[i].read_bytes() != contents[(i + round_) % threads]:
            problems.append(f"thread {i}: write returned {count}")
        paths[i].write_bytes(contents[i])  # back to what the readers expect

    def worker(i: int) -> None:
        buf = torch.zeros(nbytes, dtype=torch.uint8)
        try:
            for round_ in range(rounds):
                start.wait()
                if calls == "reads_and_writes" and i % 2 == 0:
                    write(i, buf, round_ + 1)
                else:
                    read(i, buf)
        except Exception as exc:  # reported below, with the thread it happened in
            problems.append(f"thread {i}: {exc!r}")
            start.abort()

    workers = [threading.Thread(target=worker, args=(i,)) for i in range(threads)]
    for thread in workers:
        thread.start()
    for thread in workers:
        thread.join()
    assert not problems, problems[:5]
    assert handle.wait() == 0  # every operation was waited for by the call that queued it


def test_validate_reports_a_mismatch(backend: aio.Backend) -> None:
    # /dev/null takes every write and reads back nothing: validation must notice.
    h = AIOHandle(BLOCK, 4, False, False, 1, use_direct_io=False, backend=backend)
    data = random_bytes(100, seed=5)
    assert h.pwrite(data, "/dev/null", False, False) == 1  # no validation: fine
    with pytest.raises(
        OSError, match=r"validation of the write failed: .*\(0 of 100 bytes read back\)"
    ) as info:
        h.write(data, "/dev/null", True)
    assert info.value.errno == errno.EIO
    h.pwrite(data, "/dev/null", True, True)
    with pytest.raises(OSError, match="validation of the write failed"):
        h.wait()
    assert h.wait() == 0  # reported once


def test_errors_raise_where_deepspeed_returns_minus_one(handle: AIOHandle, tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="cannot open the file for reading"):
        handle.sync_pread(torch.empty(4), str(tmp_path / "missing.bin"))


# ---------------------------------------------------------------- page-locked buffers


def test_locked_tensor_is_aligned_locked_and_freed(backend: aio.Backend) -> None:
    h = AIOHandle(backend=backend)
    before = vm_locked_kb()
    t = h.new_cpu_locked_tensor(300_000, torch.empty(0, dtype=torch.float16))
    assert (t.dtype, t.shape, t.device.type) == (torch.float16, (300_000,), "cpu")
    assert h.is_cpu_locked_tensor(t)
    assert t.data_ptr() % mmap.PAGESIZE == 0
    pages_kb = -(-t.nbytes // mmap.PAGESIZE) * mmap.PAGESIZE // 1024
    assert vm_locked_kb() - before == pages_kb  # under the usual 8 MiB RLIMIT_MEMLOCK, so allowed
    t.fill_(1.5)
    assert h.free_cpu_locked_tensor(t) is True
    assert vm_locked_kb() == before
    assert h.free_cpu_locked_tensor(t) is False  # once only
    assert bool((t == 1.5).all())  # still valid memory: freed when the tensor goes
    assert h.free_cpu_locked_tensor(torch.empty(10, dtype=torch.float16)) is False  # not ours


def test_empty_locked_tensor(backend: aio.Backend) -> None:
    h = AIOHandle(backend=backend)
    t = h.new_cpu_locked_tensor(0, torch.empty(0, dtype=torch.int64))
    assert t.numel() == 0 and t.dtype == torch.int64
    assert h.free_cpu_locked_tensor(t) is True


def test_locked_buffers_go_through_o_direct_without_bouncing(handle: AIOHandle, tmp_path: Path) -> None:
    if not handle.get_use_direct_io():
        pytest.skip(f"the file system of {tmp_path} does not support O_DIRECT")
    buf = handle.new_cpu_locked_tensor(4 * BLOCK // 4, torch.empty(0, dtype=torch.float32))
    buf.copy_(torch.randn(buf.numel()))
    expected = as_bytes(buf)
    assert handle.sync_pwrite(buf, str(tmp_path / "l.bin"), 0) == 1
    assert (tmp_path / "l.bin").read_bytes() == expected
    stats = handle.stats()
    assert stats.direct_requests == stats.requests == 4
    assert stats.bounced_requests == 0 and stats.plain_calls == 0
    handle.free_cpu_locked_tensor(buf)


def test_dropping_the_handle_unlocks_its_tensors(backend: aio.Backend) -> None:
    before = vm_locked_kb()
    h = AIOHandle(backend=backend)
    t = h.new_cpu_locked_tensor(1 << 18, torch.empty(0, dtype=torch.uint8))
    assert vm_locked_kb() > before
    del h
    assert vm_locked_kb() == before
    t.fill_(7)  # the memory itself lives on with the tensor


def test_refused_mlock_warns_once_and_still_gives_an_aligned_tensor(
    backend: aio.Backend, monkeypatch: pytest.MonkeyPatch
) -> None:
    # What an unprivileged user past RLIMIT_MEMLOCK meets (root here is never refused).
    monkeypatch.setattr(aio_memory, "_mlock", lambda address, length: errno.ENOMEM)
    monkeypatch.setattr(aio_memory, "_warned", aio_memory.threading.Event())
    h = AIOHandle(backend=backend)
    with pytest.warns(
        RuntimeWarning, match=r"cannot page-lock 8192 bytes .*RLIMIT_MEMLOCK is .*ulimit -l"
    ) as rec:
        t = h.new_cpu_locked_tensor(2048, torch.empty(0, dtype=torch.float32))
    assert rec[0].filename == __file__  # points at the caller
    assert t.data_ptr() % mmap.PAGESIZE == 0 and t.numel() == 2048
    assert not h.is_cpu_locked_tensor(t)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        h.new_cpu_locked_tensor(10, torch.empty(0))  # no second warning
    assert h.free_cpu_locked_tensor(t) is True


def test_the_documented_kernels_aio_handle_path_is_an_alias_of_the_handle() -> None:
    # The path README and docs named before the ops moved into op packages.
    import kernels.aio_handle as alias

    assert alias.AIOHandle is AIOHandle and alias.aio_handle is aio_handle
    assert alias.__all__ == ["AIOHandle", "aio_handle"]
