"""Our DeepSpeed-compat AIO handle against DeepSpeed's own, on the same files.

``kernels.compat.deepspeed.AsyncIOBuilder().load().aio_handle`` (``kernels.aio.handle.AIOHandle``,
on both of our backends) is run side by side with DeepSpeed's compiled ``aio_handle``
(``deepspeed.ops.op_builder.AsyncIOBuilder().load()``, JIT-built once and cached in
``~/.cache/torch_extensions``). DeepSpeed is the reference throughout: the getters, the return
values and the pinned-tensor answers are compared with what its handle gives for the same
calls, files written by one are read back by the other byte for byte, and the file bytes are
also checked against the tensors' own bytes read with plain Python. Errors are compared with
what DeepSpeed was seen to do (0.19.8): it returns -1 for a file it cannot open, and fails an
``assert`` (aborting the process) for a read past the end of the file, so that case runs it
in a subprocess.

DeepSpeed's handle has a narrower contract than ours, which these tests stay within: it always
opens with O_DIRECT and ignores the result codes of its AIO requests, so a size or offset that
is not a multiple of the device's logical block (or a buffer that is not page-aligned, for
``read`` / ``write``) is silently not transferred while the call reports success. Every
transfer here therefore moves whole 4096-byte pages at page-aligned offsets, split evenly over
the threads (sizes a multiple of ``THREADS * 4096``). Where the two differ on purpose, the test
asserts both sides (and says why).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import torch

import kernels.aio.async_io as aio
from kernels.compat.deepspeed import AsyncIOBuilder as CompatAsyncIOBuilder
from op_builder.toolchain import probe_library
from tests.kernels._deepspeed import import_deepspeed

PAGE = 4096
THREADS = 2
# (block_size, queue_depth, single_submit, overlap_events, intra_op_parallelism): small blocks,
# so that every transfer below is several requests per thread.
SETTINGS = (4 * PAGE, 4, False, True, THREADS)
# What DeepSpeed's own AIO tests make (tests/unit/ops/aio): a block below a page, with O_DIRECT.
DEEPSPEED_TEST_SETTINGS = (1024, 2, True, True, 2)


DeepSpeedAsyncIOBuilder = import_deepspeed("ops.op_builder", "our AIO handle").AsyncIOBuilder

# Slow tier (`make parity`): DeepSpeed's async_io op JIT-builds on first use, three to four
# minutes on 2 cores, and every test here compares with it.
pytestmark = pytest.mark.slow


# ---------------------------------------------------------------- fixtures and helpers


@pytest.fixture(scope="module")
def ds_op() -> ModuleType:
    """DeepSpeed's async_io op, built (or loaded from the cache) once for the module.

    As ``kernel_ready`` in conftest.py for our op: skip only where libaio really is absent;
    DeepSpeed installed and libaio present but the op failing to build or load is a failure.
    """
    try:
        module: ModuleType = DeepSpeedAsyncIOBuilder().load(verbose=False)
    except Exception as exc:  # a failed JIT build surfaces as RuntimeError, ImportError, ...
        if probe_library("aio", "libaio.h", "io_submit").ok:
            pytest.fail(f"libaio is installed but DeepSpeed's async_io op does not build or load: {exc!r}")
        pytest.skip(f"DeepSpeed's async_io op needs libaio (apt install libaio-dev): {exc!r}")
    return module


@pytest.fixture(scope="module")
def ds_handle(ds_op: ModuleType) -> Any:
    """One DeepSpeed handle for the module. Every test waits for what it queues on it: DeepSpeed
    asserts (aborting the process) when a handle with pending operations is destroyed."""
    return ds_op.aio_handle(*SETTINGS)


@pytest.fixture
def ours(backend: aio.Backend) -> Any:
    """Our handle through the compat builder, with DeepSpeed's settings, on each backend."""
    return CompatAsyncIOBuilder().load().aio_handle(*SETTINGS, backend=backend)


@pytest.fixture
def io_dir(tmp_path: Path) -> Path:
    """tmp_path, where it supports O_DIRECT: DeepSpeed's handle opens every file with it."""
    probe = tmp_path / "o_direct_probe"
    probe.write_bytes(b"")
    try:
        os.close(os.open(probe, os.O_RDONLY | os.O_DIRECT))
    except OSError as exc:
        pytest.skip(f"the file system of {tmp_path} has no O_DIRECT, which DeepSpeed's handle needs: {exc}")
    finally:
        probe.unlink()
    return tmp_path


def random_tensor(nbytes: int, dtype: torch.dtype, seed: int) -> torch.Tensor:
    """Random bits as ``dtype`` (NaN patterns included: everything is compared as bytes)."""
    gen = torch.Generator().manual_seed(seed)
    return torch.randint(0, 256, (nbytes,), dtype=torch.uint8, generator=gen).view(dtype)


def as_bytes(tensor: torch.Tensor) -> bytes:
    return tensor.contiguous().reshape(-1).view(torch.uint8).numpy().tobytes()


# Three tensors of different dtypes laid end to end in one file, at page-aligned offsets.
PARTS = {
    "fp32": random_tensor(12 * PAGE, torch.float32, seed=1),
    "bf16": random_tensor(4 * PAGE, torch.bfloat16, seed=2),
    "uint8": random_tensor(2 * PAGE, torch.uint8, seed=3),
}
OFFSETS = {"fp32": 0, "bf16": 12 * PAGE, "uint8": 16 * PAGE}
FILE_BYTES = b"".join(as_bytes(t) for t in PARTS.values())


def write_parts(handle: Any, path: Path) -> None:
    """The three ways to write at an offset, one per tensor (their returns: test_return_values_agree)."""
    handle.sync_pwrite(PARTS["fp32"], str(path), OFFSETS["fp32"])
    handle.pwrite(PARTS["bf16"], str(path), False, False, OFFSETS["bf16"])
    handle.async_pwrite(PARTS["uint8"], str(path), OFFSETS["uint8"])
    handle.wait()


def check_reads_back(handle: Any, path: Path) -> None:
    """Read ``path`` (written by the other handle) whole, per part, and in part, comparing bytes."""
    whole = torch.empty(len(FILE_BYTES), dtype=torch.uint8)
    handle.sync_pread(whole, str(path))
    assert as_bytes(whole) == FILE_BYTES
    for name, tensor in PARTS.items():
        back = torch.empty_like(tensor)
        handle.sync_pread(back, str(path), OFFSETS[name])
        assert as_bytes(back) == as_bytes(tensor), name
    # A buffer smaller than the file, at an offset inside one part and across two.
    middle = torch.empty(4 * PAGE // 4, dtype=torch.float32)
    handle.async_pread(middle, str(path), 4 * PAGE)
    across = torch.empty(2 * PAGE // 2, dtype=torch.bfloat16)
    handle.async_pread(across, str(path), 11 * PAGE)
    handle.wait()
    assert as_bytes(middle) == FILE_BYTES[4 * PAGE : 8 * PAGE]
    assert as_bytes(across) == FILE_BYTES[11 * PAGE : 13 * PAGE]


# ---------------------------------------------------------------- settings


@pytest.mark.parametrize(
    "args",
    [
        (),
        SETTINGS,
        (PAGE, 1, True, False, 1),
        (1 << 20, 32, True, True, 3),
        (8 * PAGE, 128, False, False, 4),
        DEEPSPEED_TEST_SETTINGS,
    ],
    ids=["defaults", "settings", "small", "odd-threads", "four-threads", "deepspeeds-tests"],
)
def test_getters_report_deepspeeds_knobs(
    ds_op: ModuleType, backend: aio.Backend, args: tuple[Any, ...]
) -> None:
    theirs = ds_op.aio_handle(*args)
    mine = CompatAsyncIOBuilder().load().aio_handle(*args, backend=backend)
    for getter in (
        "get_block_size",
        "get_queue_depth",
        "get_single_submit",
        "get_overlap_events",
        "get_intra_op_parallelism",
    ):
        assert getattr(mine, getter)() == getattr(theirs, getter)(), getter


def test_get_alignment_is_deepspeeds(ds_op: ModuleType) -> None:
    for threads in (1, 2, 3):
        theirs = ds_op.aio_handle(PAGE, 4, False, False, threads)
        mine = CompatAsyncIOBuilder().load().aio_handle(PAGE, 4, False, False, threads, backend="python")
        assert mine.get_alignment() == theirs.get_alignment()


# ---------------------------------------------------------------- files across the two


def test_deepspeed_writes_ours_reads(ds_handle: Any, ours: Any, io_dir: Path) -> None:
    path = io_dir / "by_deepspeed.bin"
    write_parts(ds_handle, path)
    assert path.read_bytes() == FILE_BYTES  # DeepSpeed wrote what it was given
    check_reads_back(ours, path)


def test_ours_writes_deepspeed_reads(ds_handle: Any, ours: Any, io_dir: Path) -> None:
    path = io_dir / "by_ours.bin"
    write_parts(ours, path)
    assert path.read_bytes() == FILE_BYTES
    check_reads_back(ds_handle, path)


def test_writes_over_an_existing_file_keep_the_rest_alike(ds_handle: Any, ours: Any, io_dir: Path) -> None:
    # Neither truncates: a write at offset 0 of a shorter tensor leaves the file's tail.
    files = {}
    for name, handle in (("deepspeed", ds_handle), ("ours", ours)):
        path = io_dir / f"{name}.bin"
        path.write_bytes(FILE_BYTES)
        handle.sync_pwrite(PARTS["uint8"], str(path))
        handle.sync_pwrite(PARTS["uint8"], str(path), 6 * PAGE)
        files[name] = path.read_bytes()
    expected = bytearray(FILE_BYTES)
    expected[: 2 * PAGE] = expected[6 * PAGE : 8 * PAGE] = as_bytes(PARTS["uint8"])
    assert files["ours"] == files["deepspeed"] == bytes(expected)


def test_descriptor_writes_alike(ds_handle: Any, ours: Any, io_dir: Path) -> None:
    # async_pwrite(buffer, fd, offset) is the one call DeepSpeed takes a descriptor in; it never closes it.
    data = PARTS["bf16"]
    files = {}
    for name, handle in (("deepspeed", ds_handle), ("ours", ours)):
        path = io_dir / f"{name}_fd.bin"
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            assert handle.async_pwrite(data, fd, PAGE) == 0
            assert handle.wait() == 1
            os.fstat(fd)  # still open
        finally:
            os.close(fd)
        files[name] = path.read_bytes()
    assert files["ours"] == files["deepspeed"] == bytes(PAGE) + as_bytes(data)


def test_descriptor_by_deepspeeds_fd_keyword_alike(ds_handle: Any, ours: Any, io_dir: Path) -> None:
    # DeepSpeed's descriptor overload names it fd: async_pwrite(buffer, fd=..., file_offset=...).
    data = PARTS["uint8"]
    files = {}
    for name, handle in (("deepspeed", ds_handle), ("ours", ours)):
        path = io_dir / f"{name}_fd_keyword.bin"
        with path.open("w+b") as f:
            assert handle.async_pwrite(data, fd=f.fileno(), file_offset=PAGE) == 0
            assert handle.wait() == 1
        files[name] = path.read_bytes()
    assert files["ours"] == files["deepspeed"] == bytes(PAGE) + as_bytes(data)


def test_deepspeeds_test_settings_move_files_alike(
    ds_op: ModuleType, backend: aio.Backend, io_dir: Path
) -> None:
    """A block of 1024 bytes (DeepSpeed's tests): files written by either read back by the other."""
    theirs = ds_op.aio_handle(*DEEPSPEED_TEST_SETTINGS)
    mine = CompatAsyncIOBuilder().load().aio_handle(*DEEPSPEED_TEST_SETTINGS, backend=backend)
    for writer, reader, name in ((theirs, mine, "deepspeed"), (mine, theirs, "ours")):
        path = io_dir / f"small_blocks_by_{name}.bin"
        write_parts(writer, path)
        assert path.read_bytes() == FILE_BYTES
        check_reads_back(reader, path)


def test_strided_buffers_move_in_logical_order_alike(ds_handle: Any, ours: Any, io_dir: Path) -> None:
    # DeepSpeed stages an unpinned buffer through a bounce buffer (copy_ in, copy_ back after a
    # read), so a 1-D strided view is written and read in its logical element order.
    source = random_tensor(8 * PAGE, torch.float32, seed=4)[::2]
    for name, handle in (("deepspeed", ds_handle), ("ours", ours)):
        path = io_dir / f"{name}_strided.bin"
        assert handle.sync_pwrite(source, str(path)) == 1
        assert path.read_bytes() == as_bytes(source), name
        into = torch.zeros(2 * source.numel(), dtype=torch.float32)[::2]
        assert handle.pread(into, str(path), False, True, 0) == 0
        assert handle.wait() == 1
        assert as_bytes(into) == as_bytes(source), name


# ---------------------------------------------------------------- return values


def call_sequence(handle: Any, directory: Path) -> list[Any]:
    """Every transfer method, as DeepSpeed's callers use them; what each call returns, in order."""
    a, b = PARTS["fp32"], PARTS["bf16"]
    path = str(directory / "seq.bin")
    got: list[Any] = [handle.sync_pwrite(a, path)]
    got.append(handle.pwrite(b, path, False, False, a.nbytes))
    got += [handle.async_pwrite(b, path, a.nbytes), handle.pwrite(a, path, False, True, 0), handle.wait()]
    back_a, back_b = torch.empty_like(a), torch.empty_like(b)
    got.append(handle.async_pread(back_a, path, 0))
    got.append(handle.sync_pread(back_b, path, a.nbytes))  # also waits for the queued read: 2
    got.append(as_bytes(back_a) + as_bytes(back_b))
    got.append(handle.pread(back_b, path, False, False, a.nbytes))
    got += [
        handle.pread(back_a, path, False, True, 0),
        handle.async_pread(back_b, path, a.nbytes),
        handle.wait(),
    ]
    # validate=True on whole files, where DeepSpeed's check (the file equals the buffer) passes.
    whole = str(directory / "whole.bin")
    got.append(handle.pwrite(b, whole, True, False, 0))
    got += [handle.pwrite(b, whole, True, True, 0), handle.wait()]
    got.append(handle.pread(back_b, whole, True, False, 0))
    # read / write (DeepSpeed's non-parallel calls) move page-aligned buffers only: locked ones.
    locked = handle.new_cpu_locked_tensor(a.numel(), a)
    locked.copy_(a)
    got.append(handle.write(locked, str(directory / "rw.bin"), True, 0))
    locked.zero_()
    got.append(handle.read(locked, str(directory / "rw.bin"), True, 0))
    got.append(as_bytes(locked) == as_bytes(a))
    got.append(handle.free_cpu_locked_tensor(locked))
    return got


def test_return_values_agree(ds_handle: Any, ours: Any, io_dir: Path) -> None:
    (io_dir / "deepspeed").mkdir()
    (io_dir / "ours").mkdir()
    theirs = call_sequence(ds_handle, io_dir / "deepspeed")
    mine = call_sequence(ours, io_dir / "ours")
    assert mine == theirs
    for name in ("seq.bin", "whole.bin", "rw.bin"):
        assert (io_dir / "ours" / name).read_bytes() == (io_dir / "deepspeed" / name).read_bytes(), name


# ---------------------------------------------------------------- page-locked tensors


def locked_facts(handle: Any, other: Any, num_elem: int, dtype: torch.dtype) -> dict[str, Any]:
    """What DeepSpeed's callers can see of a new_cpu_locked_tensor, and what is_pinned says of it."""
    t = handle.new_cpu_locked_tensor(
        num_elem, torch.empty(3, 4, dtype=dtype, requires_grad=dtype.is_floating_point)
    )
    facts = {
        "shape": tuple(t.shape),
        "dtype": t.dtype,
        "device": t.device.type,
        "contiguous": t.is_contiguous(),
        "requires_grad": t.requires_grad,
        "torch_is_pinned": t.is_pinned(),
        "page_aligned": t.data_ptr() % PAGE == 0,
        "is_pinned": handle.is_pinned(t),
        # DeepSpeed's manager is process-wide and matches views by range: its swappers allocate
        # buffers on one handle and ask another about slices of them.
        "view_is_pinned": handle.is_pinned(t[1:]) if num_elem > 1 else None,
        "other_handle_is_pinned": other.is_pinned(t),
        "plain_is_pinned": handle.is_pinned(torch.empty(num_elem, dtype=dtype)),
        "free_view": handle.free_cpu_locked_tensor(t[1:]) if num_elem > 1 else None,
        "free_plain": handle.free_cpu_locked_tensor(torch.empty(num_elem, dtype=dtype)),
    }
    if num_elem:  # an empty one: see test_empty_locked_tensor
        facts["free"] = handle.free_cpu_locked_tensor(t)
        facts["is_pinned_after_free"] = handle.is_pinned(t[:1])
        facts["free_again"] = handle.free_cpu_locked_tensor(t)
    return facts


def test_locked_tensors_alike(ds_op: ModuleType, backend: aio.Backend) -> None:
    # One loop rather than parameters: making and dropping a handle (its threads) is most of the time.
    make = CompatAsyncIOBuilder().load().aio_handle
    ds_pair = (ds_op.aio_handle(*SETTINGS), ds_op.aio_handle())
    our_pair = (make(*SETTINGS, backend=backend), make(backend=backend))
    for dtype in (torch.float32, torch.bfloat16, torch.uint8, torch.int64):
        for num_elem in (1, 1000, 3 * PAGE + 1):
            theirs = locked_facts(*ds_pair, num_elem, dtype)
            assert locked_facts(*our_pair, num_elem, dtype) == theirs, (dtype, num_elem)


def test_empty_locked_tensor(ds_handle: Any, ours: Any) -> None:
    example = torch.empty(0, dtype=torch.int64)
    theirs, mine = ds_handle.new_cpu_locked_tensor(0, example), ours.new_cpu_locked_tensor(0, example)
    assert (tuple(mine.shape), mine.dtype) == (tuple(theirs.shape), theirs.dtype) == ((0,), torch.int64)
    # An empty tensor's data_ptr() is 0, which DeepSpeed's manager looks tensors up by.
    assert ours.is_pinned(mine) is ds_handle.is_pinned(theirs) is False
    # A difference, ours on purpose: DeepSpeed cannot find an empty locked tensor to free it
    # (False, its allocation kept for good); ours keys it by its storage's address and frees it.
    assert ds_handle.free_cpu_locked_tensor(theirs) is False
    assert ours.free_cpu_locked_tensor(mine) is True


def test_free_through_another_handle(ds_op: ModuleType, backend: aio.Backend) -> None:
    make = CompatAsyncIOBuilder().load().aio_handle
    for first, second in (
        (ds_op.aio_handle(), ds_op.aio_handle()),
        (make(backend=backend), make(backend=backend)),
    ):
        t = first.new_cpu_locked_tensor(100, torch.empty(0))
        assert second.free_cpu_locked_tensor(t) is True
        assert first.is_pinned(t) is False


# ---------------------------------------------------------------- errors


def test_missing_file(ds_handle: Any, ours: Any, io_dir: Path) -> None:
    # DeepSpeed prints the errno to stderr and returns -1; ours raises (documented in
    # kernels/aio_handle.py), with the path and what it was doing.
    buf = torch.empty(2 * PAGE, dtype=torch.uint8)
    missing, no_dir = str(io_dir / "missing.bin"), str(io_dir / "no_dir" / "x.bin")
    reads: list[Callable[[Any], int]] = [
        lambda h: h.sync_pread(buf, missing),
        lambda h: h.async_pread(buf, missing),
        lambda h: h.pread(buf, missing, False, True, 0),
        lambda h: h.read(buf, missing, False, 0),
    ]
    writes: list[Callable[[Any], int]] = [
        lambda h: h.sync_pwrite(buf, no_dir),
        lambda h: h.async_pwrite(buf, no_dir),
        lambda h: h.pwrite(buf, no_dir, False, False, 0),
        lambda h: h.write(buf, no_dir, False, 0),
    ]
    for call in reads + writes:
        assert call(ds_handle) == -1
    for call in reads:
        with pytest.raises(FileNotFoundError, match="cannot open the file for reading") as info:
            call(ours)
        assert info.value.filename == missing
    for call in writes:
        with pytest.raises(FileNotFoundError, match="cannot open the file for writing"):
            call(ours)
    assert not (io_dir / "no_dir").exists()
    assert ours.wait() == 0  # nothing was queued by the failed calls


def test_size_not_divisible_by_the_threads(ds_handle: Any, ours: Any, io_dir: Path) -> None:
    # DeepSpeed splits a parallel transfer into equal shares and refuses (prints, returns -1,
    # touches no file) a size that does not divide; ours splits by blocks and moves it
    # (documented in kernels/aio_handle.py).
    odd = random_tensor(2 * PAGE + 1, torch.uint8, seed=5)
    assert ds_handle.sync_pwrite(odd, str(io_dir / "deepspeed.bin")) == -1
    assert ds_handle.async_pwrite(odd, str(io_dir / "deepspeed.bin")) == -1
    assert not (io_dir / "deepspeed.bin").exists()
    (io_dir / "full.bin").write_bytes(FILE_BYTES)
    assert ds_handle.sync_pread(odd, str(io_dir / "full.bin")) == -1
    assert ours.sync_pwrite(odd, str(io_dir / "ours.bin")) == 1
    assert (io_dir / "ours.bin").read_bytes() == as_bytes(odd)
    assert ours.sync_pread(odd, str(io_dir / "full.bin")) == 1
    assert as_bytes(odd) == FILE_BYTES[: odd.nbytes]


# DeepSpeed's handle alone, loaded from its built .so files without importing deepspeed (about a
# second instead of four): its failed asserts abort the process, so they cannot run in pytest's.
_DEEPSPEED_CASE = textwrap.dedent(
    """
    import ctypes, importlib.util, resource, sys
    import torch
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))  # the abort leaves no core file behind
    pin_memory, async_io, case, path, offset, nbytes = sys.argv[1:]
    # As AsyncIOBuilder.load: the pinned-tensor manager's op first, its symbols global.
    ctypes.CDLL(pin_memory, mode=ctypes.RTLD_GLOBAL)
    spec = importlib.util.spec_from_file_location("async_io", async_io)
    op = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(op)
    handle = op.aio_handle({settings})
    if case == "read_past_end":
        result = handle.sync_pread(torch.empty(int(nbytes), dtype=torch.uint8), path, int(offset))
    else:
        result = handle.wait()
    print("returned", result, flush=True)
    """
).format(settings=", ".join(map(str, SETTINGS)))


# A read of two pages at the file's last page: one page past its end.
PAST_END = (len(FILE_BYTES) - PAGE, 2 * PAGE)  # file offset, bytes


@pytest.fixture(scope="module")
def ds_aborts(ds_op: ModuleType, tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[int, str, str]]:
    """DeepSpeed's read past the end of a file and its wait() with nothing queued, each in a
    subprocess of its own: (exit status, stdout, stderr) by case. Run once, both at once."""
    from deepspeed.ops.op_builder import PinMemoryBuilder

    so_files = [PinMemoryBuilder().load(verbose=False).__file__, ds_op.__file__]
    path = tmp_path_factory.mktemp("deepspeed_aborts") / "file.bin"
    path.write_bytes(FILE_BYTES)
    procs = {
        case: subprocess.Popen(
            [sys.executable, "-c", _DEEPSPEED_CASE, *so_files, case, str(path), *map(str, PAST_END)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for case in ("read_past_end", "idle_wait")
    }
    outputs = {case: proc.communicate(timeout=120) for case, proc in procs.items()}
    return {case: (procs[case].returncode, *outputs[case]) for case in procs}


def test_read_past_the_end_and_idle_wait(
    ds_aborts: dict[str, tuple[int, str, str]], ours: Any, io_dir: Path
) -> None:
    for case, (status, out, err) in ds_aborts.items():
        # DeepSpeed fails an assert: the process aborts, the call never returns.
        assert status == -signal.SIGABRT, (case, status, out, err)
        assert "returned" not in out and "Assertion" in err, (case, out, err)
    assert "file_offset + buffer nbytes > file bytes" in ds_aborts["read_past_end"][1]

    # Ours raises, saying what the file holds and what the read needed, before queuing anything.
    path = io_dir / "short.bin"
    path.write_bytes(FILE_BYTES)
    buf = torch.empty(PAST_END[1], dtype=torch.uint8)
    calls: list[Callable[[], int]] = [
        lambda: ours.sync_pread(buf, str(path), PAST_END[0]),
        lambda: ours.async_pread(buf, str(path), PAST_END[0]),
        lambda: ours.pread(buf, str(path), False, False, PAST_END[0]),
    ]
    for call in calls:
        with pytest.raises(
            ValueError, match=r"too short for the read: .* holds 73728 bytes.* \[69632, 77824\)"
        ):
            call()
    # A difference, ours on purpose (documented): wait() with nothing queued returns 0.
    assert ours.wait() == 0
