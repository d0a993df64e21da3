"""Benchmark: what CPUAdam's bf16 moments (``"state_dtype": torch.bfloat16``) cost and save.

    python bench/cpu_optim_state.py [--size 16M] [--threads 2] [--reps 11] [--out FILE]

* accuracy: full-batch AdamW (lr 1e-3, weight decay 0.01) fitting a 128 x 32 linear map to
  noisy targets, for 300, 1000 and 3000 steps, with torch.optim.AdamW (fp32 state) as the
  reference. Drift: ``||W - W_torch|| / ||W_torch||`` (the params start at zero, so relative to
  the distance travelled); excess loss: ``loss / loss_torch - 1``. Then the second moment after
  the gradients shrink tenfold (500 steps at sigma 1, 500 at 0.1): bf16 mean v / torch's.
* speed: one step on --size elements with fp32 moments vs bf16 moments, fp32 params and bf16
  params, median over --reps, interleaved.

Writes a table to stdout and JSON to --out.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

import torch
from _common import RESULTS, parse_size, time_interleaved, write_json

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run from a checkout

from kernels.optim import cpu as cpu_optim
from kernels.optim.cpu import CPUAdam

DEFAULT_OUT = RESULTS / "cpu_optim_state.json"


def least_squares(steps: int, state_dtype: torch.dtype | None) -> tuple[torch.Tensor, float]:
    """The params and final loss; state_dtype None: torch.optim.AdamW as the reference."""
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(256, 128, generator=gen)
    y = x @ (torch.randn(128, 32, generator=gen) / 11.3) + 0.01 * torch.randn(256, 32, generator=gen)
    w = torch.nn.Parameter(torch.zeros(128, 32))
    kw: dict[str, Any] = {"lr": 1e-3, "weight_decay": 0.01}
    opt: Any = (
        torch.optim.AdamW([w], **kw)
        if state_dtype is None
        else CPUAdam([{"params": [w], "state_dtype": state_dtype}], use_kernel=True, **kw)
    )
    for _ in range(steps):
        residual = x @ w.detach() - y
        w.grad = 2 * x.t() @ residual / residual.numel()
        opt.step()
    return w.detach(), float((x @ w.detach() - y).pow(2).mean())


def accuracy() -> list[dict[str, Any]]:
    rows = []
    for steps in (300, 1000, 3000):
        reference, ref_loss = least_squares(steps, None)
        for name, dtype in (("fp32", torch.float32), ("bf16", torch.bfloat16)):
            w, loss = least_squares(steps, dtype)
            drift = float((w - reference).norm() / reference.norm())
            rows.append({"steps": steps, "moments": name, "drift": drift, "excess_loss": loss / ref_loss - 1})
    return rows


def second_moment_ratio(n: int = 10_000) -> float:
    gen = torch.Generator().manual_seed(1)
    ours, theirs = torch.nn.Parameter(torch.zeros(n)), torch.nn.Parameter(torch.zeros(n))
    opt = CPUAdam([{"params": [ours], "state_dtype": torch.bfloat16}], use_kernel=True)
    ref = torch.optim.AdamW([theirs], weight_decay=0.0)
    for t in range(1000):
        g = torch.randn(n, generator=gen) * (1.0 if t < 500 else 0.1)
        ours.grad, theirs.grad = g.clone(), g
        opt.step()
        ref.step()
    return float(opt.state[ours]["exp_avg_sq"].float().mean() / ref.state[theirs]["exp_avg_sq"].mean())


def speed(n: int, reps: int) -> list[dict[str, Any]]:
    cases = []
    for params in (torch.float32, torch.bfloat16):
        for state in (torch.float32, torch.bfloat16):
            gen = torch.Generator().manual_seed(2)
            p = torch.nn.Parameter(torch.randn(n, generator=gen).to(params))
            p.grad = (torch.randn(n, generator=gen) * 1e-2).to(params)
            group = {"params": [p], "state_dtype": state}
            opt = CPUAdam([group], lr=1e-3, weight_decay=0.01, use_kernel=True)
            cases.append((str(params).removeprefix("torch."), str(state).removeprefix("torch."), opt))
    timings = time_interleaved([opt.step for _, _, opt in cases], reps, warmup=3)
    base = timings[0].median
    return [
        {"params": params, "moments": state, "ms": t.median * 1e3, "vs_fp32": base / t.median}
        for (params, state, _), t in zip(cases, timings, strict=True)
    ]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--size", default="16M", help="elements for the speed rows (16M, 1000003)")
    parser.add_argument("--threads", type=int, default=2, help="torch.set_num_threads (ours follow it)")
    parser.add_argument("--reps", type=int, default=11, help="timed steps per case (median reported)")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help="JSON output file")
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)

    rows = accuracy()
    ratio = second_moment_ratio()
    timing = speed(parse_size(args.size), args.reps)
    simd = cpu_optim.simd_level("cpu_adam")
    print("accuracy vs torch.optim.AdamW (fp32 state), least squares, lr 1e-3")
    print(f"{'steps':>6} {'moments':<8} {'drift':>9} {'excess loss':>12}")
    for row in rows:
        print(f"{row['steps']:>6} {row['moments']:<8} {row['drift']:>9.2e} {row['excess_loss']:>+12.2%}")
    print(f"second moment after a tenfold gradient drop, bf16 / fp32: {ratio:.2f}")
    print(f"\nspeed: {args.size} elements, {args.threads} threads, SIMD {simd}")
    print(f"{'params':<9} {'moments':<9} {'ms':>8} {'vs fp32/fp32':>13}")
    for row in timing:
        print(f"{row['params']:<9} {row['moments']:<9} {row['ms']:>8.2f} {row['vs_fp32']:>12.2f}x")
    result = {
        "torch": torch.__version__,
        "simd": simd,
        "threads": args.threads,
        "size": parse_size(args.size),
        "accuracy": rows,
        "second_moment_ratio": ratio,
        "speed": timing,
    }
    write_json(args.out, result)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
