"""What the benchmarks share: interleaved timing, the printed table and the JSON report.

torch is imported inside the functions that use it, so that ``load_time.py``, which
times ``import torch`` in child processes, does not pay for it in its own.
"""

from __future__ import annotations

import json
import statistics
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

RESULTS = Path(__file__).resolve().parent / "results"

Clock = Callable[[Callable[[], object]], float]


@dataclass(frozen=True)
class Timing:
    median: float
    best: float


def parse_size(text: str) -> int:
    """Element counts like ``16M``, ``1.5G`` or ``1000003`` (K, M, G are powers of 1024)."""
    scale = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    text = text.strip().upper()
    if text and text[-1] in scale:
        return int(float(text[:-1]) * scale[text[-1]])
    return int(text)


def perf_seconds(fn: Callable[[], object]) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def cuda_ms(fn: Callable[[], object]) -> float:
    """Milliseconds between CUDA events recorded around ``fn`` on the current stream."""
    import torch

    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    fn()
    end.record()
    end.synchronize()
    return float(start.elapsed_time(end))


def _warm_up(fns: Sequence[Callable[[], object]], rounds: int) -> None:
    for _ in range(rounds):
        for fn in fns:
            fn()


def _sample(fns: Sequence[Callable[[], object]], reps: int, clock: Clock) -> list[Timing]:
    # Runs alternate between the fns so that load from other processes hits them alike.
    samples: list[list[float]] = [[] for _ in fns]
    for _ in range(reps):
        for fn, out in zip(fns, samples, strict=True):
            out.append(clock(fn))
    return [Timing(statistics.median(s), min(s)) for s in samples]


def time_interleaved(fns: Sequence[Callable[[], object]], reps: int, warmup: int) -> list[Timing]:
    """Median and best wall-clock seconds of each fn, runs alternating between them."""
    _warm_up(fns, warmup)
    return _sample(fns, reps, perf_seconds)


def cuda_medians(fns: Sequence[Callable[[], object]], reps: int, warmup: int = 3) -> list[float]:
    """Median CUDA-event milliseconds of each fn, runs alternating between them."""
    import torch

    _warm_up(fns, warmup)
    torch.cuda.synchronize()
    return [t.median for t in _sample(fns, reps, cuda_ms)]


def copy_gbps(nbytes: int = 1 << 30, reps: int = 20) -> float:
    """The device-to-device copy bandwidth (bytes read + written per second, in GB/s) of a
    ``nbytes`` buffer: the yardstick of memory-bound kernels, measured in the same run."""
    import torch

    src = torch.empty(nbytes, dtype=torch.uint8, device="cuda")
    dst = torch.empty_like(src)
    (ms,) = cuda_medians([lambda: dst.copy_(src)], reps)
    return 2 * nbytes / ms / 1e6


def gpu_missing(what: str) -> bool:
    """True, after saying so, when torch sees no GPU (the GPU benchmarks then exit 0)."""
    import torch

    if torch.cuda.is_available():
        return False
    print(f"no GPU visible to torch {torch.__version__}: GPU {what} benchmark skipped")
    return True


def report_gpu(
    columns: Sequence[Column], rows: Iterable[Mapping[str, object]], out: Path, **fields: object
) -> None:
    """Print a GPU benchmark's table and write its JSON: device and torch build, ``fields``, rows."""
    import torch

    table = list(rows)
    print_table(columns, table)
    report = {
        "device": torch.cuda.get_device_name(),
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "hip": torch.version.hip,
        **fields,
        "rows": table,
    }
    write_json(out, report)


def write_json(path: Path, data: Mapping[str, object], verb: str = "wrote") -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=2) + "\n")
    print(f"{verb} {path}")


@dataclass(frozen=True)
class Column:
    """One column of a printed table: ``spec`` aligns and pads, ``fmt`` formats the value."""

    title: str
    key: str
    spec: str
    fmt: str = ""
    suffix: str = ""  # after the value, inside the padding (``1.25x``)
    sep: str = " "  # before the column


def speed_columns(digits: int, ours_width: int = 9) -> list[Column]:
    """Ours and torch's milliseconds and the speedup, the columns every comparison prints."""
    return [
        Column("ours ms", "ours_ms", f">{ours_width}", f".{digits}f"),
        Column("torch ms", "torch_ms", ">9", f".{digits}f"),
        Column("speedup", "speedup", ">8", ".2f", "x"),
    ]


def _line(columns: Sequence[Column], cells: Iterable[str]) -> str:
    parts = [c.sep + format(cell, c.spec) for c, cell in zip(columns, cells, strict=True)]
    return "".join(parts)[len(columns[0].sep) :]


def print_table(columns: Sequence[Column], rows: Iterable[Mapping[str, object]]) -> None:
    print(_line(columns, (c.title for c in columns)))
    for row in rows:
        print(_line(columns, (format(row[c.key], c.fmt) + c.suffix for c in columns)))
