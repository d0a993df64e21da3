"""What one async_io call costs: today's binding (Python's C API) against the pybind11 binding
it replaced, built from the project's history.

    python bench/aio_call.py [--before c232140] [--calls 2000] [--rounds 9]

Both are JIT-built here in a fresh cache: today's module from the working tree, the other from
the sources of `--before` (the last commit whose async_io binding was pybind11 and ATen), under
another name, so that both load into one process. Each handle writes 4 KiB from one tensor to an
open descriptor, `--calls` times a round (`sync_pwrite`: the smallest transfer, where the
binding's own cost shows most), rounds alternating between the two; medians of the rounds. Goal:
today's call no slower than before (ratio >= 0.95, allowing for noise).
"""

from __future__ import annotations

import argparse
import io
import os
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path
from types import ModuleType
from typing import Any

from _common import RESULTS, Column, print_table, write_json

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

# The async_io sources and the shared headers they include, as they were at a commit.
SOURCES = ("kernels/aio/csrc", "kernels/aio/includes", "kernels/includes")


def sources_at(revision: str, into: Path) -> Path:
    """The async_io package's sources at ``revision``, written under ``into``; its folder."""
    archive = subprocess.run(
        ["git", "-C", str(REPO), "archive", "--format=tar", revision, *SOURCES],
        check=True,
        capture_output=True,
    ).stdout
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        tar.extractall(into, filter="data")
    return into / "kernels" / "aio"


def build(source_root: Path | None) -> tuple[ModuleType, float]:
    """Today's module (source_root None), or the per-torch build of the sources there."""
    from kernels.aio.builders import AsyncIOBuilder

    builder_class: type[AsyncIOBuilder] = AsyncIOBuilder
    if source_root is not None:
        builder_class = type(
            "AsyncIOBefore",
            (AsyncIOBuilder,),
            {"name": "async_io_before", "stable_abi": None, "source_root": source_root},
        )
    start = time.perf_counter()
    module = builder_class().load()
    return module, time.perf_counter() - start


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--before", default="c232140", help="a commit with the pybind11 binding")
    parser.add_argument("--calls", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=9)
    parser.add_argument("--out", type=Path, default=RESULTS / "aio_call.json")
    args = parser.parse_args()

    import torch

    os.environ["TORCH_EXTENSIONS_DIR"] = tempfile.mkdtemp(prefix="aio-call-bench-")
    with tempfile.TemporaryDirectory() as folder:
        before_root = sources_at(args.before, Path(folder))
        today, today_compile = build(None)
        before, before_compile = build(before_root)
    handles = {
        "today": today.AsyncIOHandle(1 << 20, 32, 1, False, False, True),
        "before": before.AsyncIOHandle(1 << 20, 32, 1, False, False, True),
    }
    tensor = torch.ones(1024, dtype=torch.float32)  # 4 KiB
    per_call: dict[str, list[float]] = {name: [] for name in handles}
    with tempfile.NamedTemporaryFile() as target:
        fd = target.fileno()
        for handle in handles.values():  # warm up
            for _ in range(100):
                handle.sync_pwrite(tensor, fd, 0)
        for _ in range(args.rounds):
            for name, handle in handles.items():
                start = time.perf_counter()
                for _ in range(args.calls):
                    handle.sync_pwrite(tensor, fd, 0)
                per_call[name].append((time.perf_counter() - start) / args.calls)
    medians = {name: statistics.median(times) * 1e6 for name, times in per_call.items()}
    row: dict[str, Any] = {
        "call": "sync_pwrite 4 KiB",
        "today_us": medians["today"],
        "before_us": medians["before"],
        "ratio": medians["before"] / medians["today"],
        "today_compile_s": today_compile,
        "before_compile_s": before_compile,
    }
    print_table(
        [
            Column("call", "call", "<18"),
            Column("today us", "today_us", ">9", ".2f"),
            Column(f"{args.before} us", "before_us", ">13", ".2f"),
            Column("speed vs before", "ratio", ">16", ".2f", "x"),
            Column("compile s today", "today_compile_s", ">16", ".1f"),
            Column("before", "before_compile_s", ">7", ".1f"),
        ],
        [row],
    )
    write_json(
        args.out,
        {
            "torch": torch.__version__,
            "before": args.before,
            "calls": args.calls,
            "rounds": args.rounds,
            "rows": [row],
        },
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
