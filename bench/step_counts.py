"""Benchmark: the host time the fused optimizers spend counting a step, per step.

    python bench/step_counts.py [--tensors 312,1000] [--reps 200] [--out FILE]

Each param's ``state["step"]`` is a 0-d CPU tensor, as torch keeps it. Counting a step one
tensor operation per param (``torch._foreach_add_`` over them, what the fused optimizers did
and torch's non-fused ones do) costs microseconds per param on the CPU, and a GPU step waits
for it before its launch: at the 312 tensors of ``gpu_optim.py``'s 1.2B-parameter model,
that was most of the step's Python time. ``StepCounts`` keeps the counts as views into one
block and counts them in one addition. Both sides run here, interleaved; no GPU needed.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

import torch
from _common import RESULTS, Column, print_table, time_interleaved, write_json

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run from a checkout

from kernels.optim._common import StepCounts

DEFAULT_OUT = RESULTS / "step_counts.json"


def per_param(states: list[dict[str, Any]]) -> list[int]:
    """The baseline: one tensor operation per count, then read them all."""
    counts = [state["step"] for state in states]
    torch._foreach_add_(counts, 1.0)
    return [int(value) for value in torch.stack(counts).tolist()]


def measure(n: int, reps: int) -> dict[str, float]:
    baseline = [{"step": torch.tensor(0.0)} for _ in range(n)]
    ours = [{"step": torch.tensor(0.0)} for _ in range(n)]
    counts = StepCounts()
    base_t, ours_t = time_interleaved([lambda: per_param(baseline), lambda: counts.advance(0, ours)], reps, 5)
    assert per_param(baseline) == counts.advance(0, ours)  # both counted every step
    return {
        "tensors": n,
        "per_param_us": base_t.median * 1e6,
        "ours_us": ours_t.median * 1e6,
        "speedup": base_t.median / ours_t.median,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tensors", default="312,1000", help="comma-separated tensor counts")
    parser.add_argument("--reps", type=int, default=200)
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    args = parser.parse_args()
    torch.set_num_threads(1)  # a step's bookkeeping runs on one thread
    rows = [measure(int(n), args.reps) for n in args.tensors.split(",")]
    columns = [
        Column("tensors", "tensors", ">8"),
        Column("per-param us", "per_param_us", ">13", ".1f"),
        Column("ours us", "ours_us", ">9", ".1f"),
        Column("speedup", "speedup", ">8", ".1f", "x"),
    ]
    print_table(columns, rows)
    write_json(args.out, {"torch": torch.__version__, "rows": rows})


if __name__ == "__main__":
    main()
