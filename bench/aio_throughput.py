"""Sequential write and read GB/s of one large file: the async_io op against plain I/O.

    python bench/aio_throughput.py [--size 1G] [--dir DIR] [--reps 3] [--block 1M]
                                   [--queue-depth 32] [--out bench/results/aio_throughput.json]

Every row moves the same file (created in ``--dir``, removed at the end) from and to the
same page-aligned, page-locked buffer (``new_cpu_locked_tensor``), runs alternating
between rows so the machine's load hits them alike:

- ``ours``: ``kernels.aio.AsyncIO`` (the compiled op, never the fallback), whole-file
  sync_pwrite / sync_pread, 1 or 2 threads;
- ``os loop``: one ``os.pwrite`` / ``os.preadv`` per block in Python, the plain-I/O
  reference (what ``dd`` does, without a process start);
- ``dd``: ``dd bs=BLOCK`` with ``oflag=direct`` / ``iflag=direct`` (writes zeros from
  /dev/zero, so it measures the disk, not our buffer), where ``dd`` is installed.

Each write creates the file anew (after a sync, outside the timings), so the rows start
alike. With O_DIRECT the page cache is bypassed in this machine's kernel; a virtual disk
may still be cached by the host. The buffered rows write into and read back from the page
cache (the file was just written and fits in memory): they measure memory copies, not
the disk. Caches cannot be dropped here (no root on the host), so read the figures as
a comparison within one run, not as the disk's speed.
"""

from __future__ import annotations

import argparse
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from _common import RESULTS, Column, Timing, parse_size, perf_seconds, print_table, write_json  # noqa: E402

DEFAULT_OUT = RESULTS / "aio_throughput.json"


def _os_loop(op: str, path: Path, view: memoryview, block: int, direct: bool) -> None:
    """The plain-I/O reference: one pwrite / preadv per block, as dd would do it."""
    flags = (os.O_WRONLY | os.O_CREAT | os.O_TRUNC) if op == "write" else os.O_RDONLY
    fd = os.open(path, flags | (os.O_DIRECT if direct else 0), 0o644)
    try:
        for offset in range(0, len(view), block):
            chunk = view[offset : offset + block]
            done = os.pwrite(fd, chunk, offset) if op == "write" else os.preadv(fd, [chunk], offset)
            if done != len(chunk):
                raise OSError(f"short {op} at {offset}: {done} of {len(chunk)} bytes")
    finally:
        os.close(fd)


def _dd(op: str, path: Path, nbytes: int, block: int) -> None:
    count = nbytes // block
    if op == "write":
        args = ["if=/dev/zero", f"of={path}", "oflag=direct"]
    else:
        args = [f"if={path}", "of=/dev/null", "iflag=direct"]
    subprocess.run(["dd", *args, f"bs={block}", f"count={count}", "status=none"], check=True)


def _time_rows(
    rows: list[tuple[Callable[[], object], Callable[[], object]]], path: Path, reps: int
) -> list[Timing]:
    """Write then read for each row, rows alternating, one warm-up round; [write, read] Timings per row.

    Each write starts from no file, after a sync: otherwise a write would pay for freeing
    the blocks of the row before (with the ``discard`` mount option, a TRIM of the whole
    file) or not, depending on whether that row's data had reached the disk.
    """
    samples: list[list[float]] = [[] for _ in range(2 * len(rows))]
    for rep in range(reps + 1):
        for i, (write, read) in enumerate(rows):
            path.unlink(missing_ok=True)
            os.sync()
            w, r = perf_seconds(write), perf_seconds(read)
            if rep > 0:
                samples[2 * i].append(w)
                samples[2 * i + 1].append(r)
    return [Timing(statistics.median(s), min(s)) for s in samples]


def _machine() -> str:
    model = "unknown CPU"
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            model = line.split(":", 1)[1].strip()
            break
    return f"{model}, {os.cpu_count()} cores, Linux {platform.release()}"


def _file_system(directory: Path) -> str:
    """The mount that holds ``directory``: device and type, from /proc/mounts."""
    best = ("", "?", "?")
    for line in Path("/proc/mounts").read_text().splitlines():
        device, mount, fstype = line.split()[:3]
        if str(directory.resolve()).startswith(mount) and len(mount) > len(best[0]):
            best = (mount, device, fstype)
    return f"{best[2]} on {best[1]} (mounted at {best[0]})"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--size", default="1G", help="file size in bytes (K, M, G suffixes); default 1G")
    parser.add_argument("--dir", type=Path, default=Path(tempfile.gettempdir()), help="where the file goes")
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--block", default="1M", help="block size of every row; default 1M")
    parser.add_argument("--queue-depth", type=int, default=32)
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    args = parser.parse_args(argv)

    import torch

    from kernels.aio import AsyncIO

    block = parse_size(args.block)
    nbytes = parse_size(args.size) // block * block  # whole blocks, so dd moves the same bytes
    path = args.dir / f"aio_throughput-{os.getpid()}.bin"
    handles = {
        threads: AsyncIO(block, args.queue_depth, threads, use_direct_io=True, backend="kernel")
        for threads in (1, 2)
    }
    buffered = AsyncIO(block, args.queue_depth, 1, use_direct_io=False, backend="kernel")
    buffer = handles[1].new_cpu_locked_tensor(nbytes, torch.empty(0, dtype=torch.uint8))
    buffer.random_(0, 256)  # in place: no temporary the size of the file
    reference = buffer.clone()
    view = memoryview(buffer.numpy()).cast("B")

    rows: list[tuple[str, str, Callable[[], object], Callable[[], object]]] = []
    for threads, io in handles.items():
        rows.append(
            (
                "O_DIRECT",
                f"ours, {threads} thread{'s' if threads > 1 else ''}",
                lambda io=io: io.sync_pwrite(buffer, path),
                lambda io=io: io.sync_pread(buffer, path),
            )
        )
    rows.append(
        (
            "O_DIRECT",
            "os loop",
            lambda: _os_loop("write", path, view, block, True),
            lambda: _os_loop("read", path, view, block, True),
        )
    )
    if shutil.which("dd"):
        rows.append(
            (
                "O_DIRECT",
                "dd",
                lambda: _dd("write", path, nbytes, block),
                lambda: _dd("read", path, nbytes, block),
            )
        )
    rows.append(
        (
            "buffered",
            "ours, 1 thread",
            lambda: buffered.sync_pwrite(buffer, path),
            lambda: buffered.sync_pread(buffer, path),
        )
    )
    rows.append(
        (
            "buffered",
            "os loop",
            lambda: _os_loop("write", path, view, block, False),
            lambda: _os_loop("read", path, view, block, False),
        )
    )

    try:
        # Correctness first, outside the timings: each of ours and the loop reads back what it wrote.
        for _, who, write, read in rows:
            if who == "dd":
                continue
            write()
            buffer.zero_()
            read()
            if not torch.equal(buffer, reference):
                raise SystemExit(f"{who}: the bytes read back differ from those written")
        print(
            f"{nbytes / 2**30:.2f} GiB, block {block}, {args.reps} reps, {path}", file=sys.stderr, flush=True
        )
        # One phase per mode, each with its own warm-up round: the first buffered write after
        # the O_DIRECT rows runs at disk speed (measured: 0.8-0.9 GB/s against 3-4 for the
        # next, whichever implementation it is), so it must not fall on one row only.
        timings: list[Timing] = []
        for mode in ("O_DIRECT", "buffered"):
            timings += _time_rows([(w, r) for m, _, w, r in rows if m == mode], path, args.reps)
    finally:
        path.unlink(missing_ok=True)

    table = []
    for i, (mode, who, _, _) in enumerate(rows):
        w, r = timings[2 * i], timings[2 * i + 1]
        table.append(
            {
                "mode": mode,
                "who": who,
                "write_gbs": nbytes / w.median / 1e9,
                "write_best_gbs": nbytes / w.best / 1e9,
                "read_gbs": nbytes / r.median / 1e9,
                "read_best_gbs": nbytes / r.best / 1e9,
            }
        )
    columns = [
        Column("mode", "mode", "<9"),
        Column("who", "who", "<16"),
        Column("write GB/s", "write_gbs", ">10", ".2f"),
        Column("(best)", "write_best_gbs", ">7", ".2f"),
        Column("read GB/s", "read_gbs", ">10", ".2f"),
        Column("(best)", "read_best_gbs", ">7", ".2f"),
    ]
    print_table(columns, table)
    stats = {f"ours, {t} thread{'s' if t > 1 else ''}": vars(io.stats()) for t, io in handles.items()}
    report = {
        "machine": _machine(),
        "load_average": [round(x, 2) for x in os.getloadavg()],  # other work on the machine meanwhile
        "file_system": _file_system(args.dir),
        "torch": torch.__version__,
        "bytes": nbytes,
        "block": block,
        "queue_depth": args.queue_depth,
        "reps": args.reps,
        "stats": stats,
        "rows": table,
    }
    write_json(args.out, report)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
