"""Benchmark: the CPU optimizer ops against torch's own CPU optimizers, in one run.

    python bench/cpu_optim.py [--size 16M] [--threads 2] [--reps 21] [--out FILE]

For Adam(W), Adagrad and Lion on one fp32 tensor of --size elements:

* ``step``: our step vs torch's fastest CPU step for the same rule (AdamW and Adagrad with
  ``fused=True``; Lion, which torch lacks, written with ``torch._foreach_*`` ops);
* ``step+bf16``: our step writing a bf16 copy of the params in the same pass vs torch's step
  followed by ``half.copy_(params)``, the usual way to refresh a bf16 model from fp32 masters.

Timings are medians over --reps (best-of also recorded), our and torch's runs interleaved so
that load from other processes hits both alike, after warmup. Effective bandwidth counts the bytes the update
must move (each of p, g and state read once, p and state written once, plus the half copy)
over the time taken; the copy bandwidth of a large ``torch.Tensor.copy_`` is the ceiling to
compare it with. Writes a table to stdout and JSON to --out.
"""

from __future__ import annotations

import argparse
import platform
import sys
from dataclasses import asdict, dataclass
from pathlib import Path

import torch
from _common import RESULTS, Column, parse_size, print_table, speed_columns, time_interleaved, write_json

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run from a checkout

from kernels.optim import cpu as cpu_optim
from kernels.optim.cpu import CPUAdagrad, CPUAdam, CPULion

DEFAULT_OUT = RESULTS / "cpu_optim.json"
# Bytes per element one step must move: fp32 reads + writes of p, g and the state tensors.
STEP_BYTES = {"adam": 4 * (4 + 3), "adagrad": 4 * (3 + 2), "lion": 4 * (3 + 2)}
HALF_BYTES = 2  # the bf16 copy written in the same pass
GOALS = {"step": 1.0, "step+bf16": 1.3}


@dataclass(frozen=True)
class Row:
    optimizer: str
    case: str
    ours_ms: float
    torch_ms: float
    speedup: float
    goal: float
    ours_min_ms: float
    torch_min_ms: float
    speedup_min: float
    ours_gbps: float
    torch_gbps: float
    torch_impl: str


def copy_bandwidth(n: int, reps: int) -> tuple[float, float]:
    """GB/s (bytes read + written, median) of dst.copy_(src) and of an in-place x.mul_(1).

    copy_ also pays a read-for-ownership of each destination line that the count leaves
    out; the in-place pass does not, like an optimizer step, so it is the closer ceiling.
    """
    src = torch.randn(n)
    dst = torch.empty_like(src)
    copy, inplace = time_interleaved([lambda: dst.copy_(src), lambda: src.mul_(1.0)], reps, warmup=3)
    return 2 * 4 * n / copy.median / 1e9, 2 * 4 * n / inplace.median / 1e9


def _param(n: int, seed: int) -> torch.Tensor:
    gen = torch.Generator().manual_seed(seed)
    p = torch.randn(n, generator=gen).requires_grad_()
    p.grad = torch.randn(n, generator=gen) * 1e-2
    return p


class ForeachLion:
    """Lion with torch._foreach_* ops: the fastest stock-torch form of the rule."""

    def __init__(self, params: list[torch.Tensor], lr: float, betas: tuple[float, float], wd: float) -> None:
        self.params = params
        self.lr, self.betas, self.wd = lr, betas, wd
        self.exp_avg = [torch.zeros_like(p) for p in params]

    @torch.no_grad()
    def step(self) -> None:
        b1, b2 = self.betas
        grads = [p.grad for p in self.params if p.grad is not None]
        c = torch._foreach_mul(self.exp_avg, b1)
        torch._foreach_add_(c, grads, alpha=1 - b1)
        torch._foreach_sign_(c)
        torch._foreach_mul_(self.params, 1 - self.lr * self.wd)
        torch._foreach_add_(self.params, c, alpha=-self.lr)
        torch._foreach_mul_(self.exp_avg, b2)
        torch._foreach_add_(self.exp_avg, grads, alpha=1 - b2)


def bench_optimizer(name: str, n: int, reps: int) -> list[Row]:
    ours_p, ref_p = _param(n, 1), _param(n, 1)
    torch_impl: str
    ours: CPUAdam | CPUAdagrad | CPULion
    ref: torch.optim.Optimizer | ForeachLion
    if name == "adam":
        ours = CPUAdam([ours_p], lr=1e-3, weight_decay=0.01, use_kernel=True)
        ref = torch.optim.AdamW([ref_p], lr=1e-3, weight_decay=0.01, fused=True)
        torch_impl = "torch.optim.AdamW(fused=True)"
    elif name == "adagrad":
        ours = CPUAdagrad([ours_p], lr=1e-2, weight_decay=0.01, use_kernel=True)
        try:
            ref = torch.optim.Adagrad([ref_p], lr=1e-2, weight_decay=0.01, fused=True)
            ref.step()  # torch without a fused CPU Adagrad raises here or above
            torch_impl = "torch.optim.Adagrad(fused=True)"
        except RuntimeError:
            ref = torch.optim.Adagrad([ref_p], lr=1e-2, weight_decay=0.01, foreach=True)
            torch_impl = "torch.optim.Adagrad(foreach=True)"
    else:
        ours = CPULion([ours_p], lr=1e-4, weight_decay=0.01, use_kernel=True)
        ref = ForeachLion([ref_p], lr=1e-4, betas=(0.9, 0.99), wd=0.01)
        torch_impl = "torch._foreach_* Lion"
    ours_half = torch.empty(n, dtype=torch.bfloat16)
    ref_half = torch.empty(n, dtype=torch.bfloat16)

    def ours_step() -> None:
        ours.step()

    def ours_step_half() -> None:
        ours.step(half_params=[ours_half])

    def ref_step_half() -> None:
        ref.step()
        ref_half.copy_(ref_p.detach())

    step_s, ref_s, step_half_s, ref_half_s = time_interleaved(
        [ours_step, ref.step, ours_step_half, ref_step_half], reps, warmup=3
    )
    assert ours.backend == "kernel"
    rows = []
    for case, ours_t, ref_t, extra in (
        ("step", step_s, ref_s, 0),
        ("step+bf16", step_half_s, ref_half_s, HALF_BYTES),
    ):
        moved = (STEP_BYTES[name] + extra) * n
        rows.append(
            Row(
                optimizer=name,
                case=case,
                ours_ms=ours_t.median * 1e3,
                torch_ms=ref_t.median * 1e3,
                speedup=ref_t.median / ours_t.median,
                goal=GOALS[case],
                ours_min_ms=ours_t.best * 1e3,
                torch_min_ms=ref_t.best * 1e3,
                speedup_min=ref_t.best / ours_t.best,
                ours_gbps=moved / ours_t.median / 1e9,
                torch_gbps=moved / ref_t.median / 1e9,
                torch_impl=torch_impl + (" + half.copy_" if extra else ""),
            )
        )
    return rows


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--size", default="16M", help="elements per tensor (16M, 1G, 1000003)")
    parser.add_argument("--threads", type=int, default=2, help="torch.set_num_threads (ours follow it)")
    parser.add_argument("--reps", type=int, default=21, help="timed runs per case (median reported)")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help="JSON output file")
    args = parser.parse_args(argv)

    n = parse_size(args.size)
    torch.set_num_threads(args.threads)
    rows = [row for name in ("adam", "adagrad", "lion") for row in bench_optimizer(name, n, args.reps)]
    copy_gbps, inplace_gbps = copy_bandwidth(max(n, 1 << 24), args.reps)
    simd = cpu_optim._MODULES["cpu_adam"].simd_level()

    print(f"{n} fp32 params, {args.threads} threads, SIMD {simd}, torch {torch.__version__}, {cpu_model()}")
    print(
        f"bandwidth (read + write, median): torch copy_ {copy_gbps:.1f} GB/s, "
        f"in-place mul_ {inplace_gbps:.1f} GB/s"
    )
    columns = [
        Column("optimizer", "optimizer", "<8"),
        Column("case", "case", "<10"),
        *speed_columns(2, ours_width=8),
        Column("goal", "goal", ">5", ".1f", "x"),
        Column("ours GB/s", "ours_gbps", ">9", ".1f"),
        Column("torch GB/s", "torch_gbps", ">10", ".1f"),
        Column("best-of speedup", "speedup_min", ">15", ".2f", "x"),
        Column("torch", "torch_impl", "", sep="  "),
    ]
    table = [asdict(r) for r in rows]
    print_table(columns, table)
    result = {
        "size": n,
        "threads": args.threads,
        "reps": args.reps,
        "simd": simd,
        "torch": torch.__version__,
        "cpu": cpu_model(),
        "copy_gbps": copy_gbps,
        "inplace_gbps": inplace_gbps,
        "rows": table,
    }
    write_json(args.out, result)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
