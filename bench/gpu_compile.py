"""What each CUDA arch costs to compile, and what nvcc's ``--threads`` wins back.

    python bench/gpu_compile.py [--archs "8.0|8.0;9.0|8.0;8.6;8.9;9.0"] [--threads 2] [--reps 1]
                                [--out bench/results/gpu_compile.json]

The six GPU ops' device code (every ``.cu`` source) compiled with the local nvcc and exactly
the flags op_builder gives each op (``DS_ACCELERATOR=cuda``, the arch list, ``DS_NVCC_THREADS``),
one source at a time, so the sum is the device-code cost of an image and ``--threads`` is the
only parallelism. Each arch list is compiled with ``--threads=1`` and ``--threads=N``, the runs
taking turns. Every list holds 8.0, so every op compiles the same code paths (bf16 on, FP8
emulated) and the lists differ only in their arch count. The bindings (``.cpp``) are left out:
they need a CUDA build of torch, and do not depend on the arch list. No GPU is needed.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))

from _common import RESULTS, write_json  # noqa: E402
from parallel_compile import machine  # noqa: E402

from op_builder import ALL_OPS  # noqa: E402
from op_builder.context import resolve_context  # noqa: E402
from op_builder.parallel_build import host_cpus  # noqa: E402
from op_builder.toolchain import probe  # noqa: E402

ARCH_LISTS = "8.0|8.0;9.0|8.0;8.6;8.9;9.0"


def device_commands(archs: str, threads: int, out: Path) -> tuple[str, list[tuple[str, list[str]]]]:
    """(nvcc version, [(op/source, nvcc command)]) for every .cu source of every GPU op."""
    env = {**os.environ, "DS_ACCELERATOR": "cuda", "TORCH_CUDA_ARCH_LIST": archs}
    env["DS_NVCC_THREADS"] = str(threads)
    ctx = resolve_context(env, probe(env))
    if ctx.toolchain.cuda is None:
        raise SystemExit("no CUDA toolkit found (nvcc not on PATH, CUDA_HOME unset)")
    commands: list[tuple[str, list[str]]] = []
    for name, builder in ALL_OPS.items():
        if builder.target != "gpu":
            continue
        reason = builder.incompatibility(ctx)
        if reason is not None:
            raise SystemExit(f"{name} cannot be built for {archs}: {reason}")
        flags = builder.flags(ctx)
        assert f"--threads={threads}" in flags.device
        for source in (s for s in flags.sources if s.endswith(".cu")):
            obj = out / f"{name}-{Path(source).stem}.o"
            command = [ctx.toolchain.cuda.nvcc, *flags.device, *(f"-I{d}" for d in flags.include_dirs)]
            commands.append((f"{name}/{Path(source).name}", [*command, "-c", source, "-o", str(obj)]))
    return ctx.toolchain.cuda.version, commands


def compile_all(commands: list[tuple[str, list[str]]]) -> dict[str, float]:
    """Seconds per source, compiled one after another."""
    seconds: dict[str, float] = {}
    for label, command in commands:
        start = time.monotonic()
        done = subprocess.run(command, capture_output=True, text=True, check=False)
        if done.returncode != 0:
            raise SystemExit(f"{label} failed:\n{' '.join(command)}\n{(done.stdout + done.stderr)[-3000:]}")
        seconds[label] = round(time.monotonic() - start, 2)
    return seconds


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--archs", default=ARCH_LISTS, help="arch lists separated by |")
    parser.add_argument("--threads", type=int, default=host_cpus(), help="the --threads=N compared with 1")
    parser.add_argument("--reps", type=int, default=1)
    parser.add_argument("--out", default=str(RESULTS / "gpu_compile.json"))
    args = parser.parse_args()

    before = machine()
    rows: list[dict[str, Any]] = []
    nvcc = ""
    with tempfile.TemporaryDirectory(prefix="imagegen-gpu-compile-") as tmp:
        for archs in args.archs.split("|"):
            samples: dict[int, list[float]] = {1: [], args.threads: []}
            per_source: dict[int, dict[str, float]] = {}
            for _ in range(args.reps):
                for threads in samples:
                    nvcc, commands = device_commands(archs, threads, Path(tmp))
                    seconds = compile_all(commands)
                    samples[threads].append(sum(seconds.values()))
                    per_source[threads] = seconds
            one, many = statistics.median(samples[1]), statistics.median(samples[args.threads])
            row = {
                "archs": archs,
                "arch_count": len(archs.split(";")),
                "seconds_threads_1": round(one, 1),
                f"seconds_threads_{args.threads}": round(many, 1),
                "threads_speedup": round(one / many, 2),
                "sources": len(per_source[1]),
                "per_source_threads_1": per_source[1],
            }
            rows.append(row)
            print(
                f"{archs:22} {row['arch_count']} arch(s): --threads=1 {one:6.1f}s, "
                f"--threads={args.threads} {many:6.1f}s ({one / many:.2f}x)"
            )
    base = rows[0]["seconds_threads_1"] / rows[0]["arch_count"]
    for row in rows:
        row["threads_1_per_arch"] = round(row["seconds_threads_1"] / row["arch_count"], 1)
        row["threads_1_vs_first_per_arch"] = round(row["threads_1_per_arch"] / base, 2)
    write_json(
        Path(args.out),
        {"machine": before, "nvcc": nvcc, "threads": args.threads, "reps": args.reps, "rows": rows},
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
