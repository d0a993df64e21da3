"""Benchmark: the fused GPU optimizers against torch's fastest GPU optimizers, in one run.

    python bench/gpu_optim.py [--layers 24] [--hidden 2048] [--reps 20] [--out FILE]

A transformer-like parameter set (per layer: four hidden x hidden matrices, two
hidden x 4*hidden ones, biases and norms; the defaults make 1.2B parameters in 312
tensors) gets one optimizer step per repetition:

* ``adam``: FusedAdam (AdamW mode) vs ``torch.optim.AdamW(fused=True)``;
* ``lion``: FusedLion vs Lion written with ``torch._foreach_*`` ops (torch has no Lion);
* ``lamb``: FusedLamb against the same rule in PyTorch ops (our fallback), for scale.

for fp32 and bf16 params. Our state is fp32 for every param dtype (torch's fused AdamW
keeps bf16 state for bf16 params), so bytes moved differ; effective bandwidth counts
the bytes each implementation must move. ``kernel ms`` times our kernel launches alone on
the same lists (the step less its Python), and ``kernel % copy`` puts their bandwidth against
a device-to-device copy measured in the same run. Timings are medians of CUDA-event times,
all sides interleaved, after warmup.

Where a whole step is slower than torch's, two columns say why: ``host ms`` is the step's
Python with the launch made a no-op (wall-clock; a GPU step waits on it before its launch),
and ``bytes ms`` / ``torch bytes ms`` are the fewest bytes each side must move at the copy's
bandwidth: their difference is what our fp32 state costs over torch's bf16 state, whatever
either kernel does. Without a GPU it prints why and exits 0.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import torch
from _common import (
    RESULTS,
    Column,
    copy_gbps,
    cuda_medians,
    gpu_missing,
    report_gpu,
    speed_columns,
    time_interleaved,
)

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run from a checkout

from kernels.optim.fused import FusedAdam, FusedLion
from kernels.optim.fused_lamb import FusedLamb

DEFAULT_OUT = RESULTS / "gpu_optim.json"


@dataclass(frozen=True)
class Row:
    optimizer: str
    dtype: str
    params_m: float
    ours_ms: float
    kernel_ms: float
    host_ms: float
    bytes_ms: float
    torch_bytes_ms: float
    torch_ms: float
    speedup: float
    ours_gbps: float
    torch_gbps: float
    percent_of_copy: float
    torch_impl: str


def model_sizes(layers: int, hidden: int) -> list[int]:
    per_layer = [hidden * hidden] * 4 + [hidden * 4 * hidden] * 2 + [hidden] * 6 + [4 * hidden]
    return per_layer * layers


def make_params(sizes: list[int], dtype: torch.dtype) -> list[torch.Tensor]:
    params = [torch.randn(n, device="cuda", dtype=dtype).requires_grad_(True) for n in sizes]
    for p in params:
        p.grad = torch.randn_like(p) * 1e-2
    return params


def foreach_lion(params: list[torch.Tensor], lr: float, beta1: float, beta2: float) -> Callable[[], None]:
    state = [torch.zeros_like(p) for p in params]

    @torch.no_grad()
    def step() -> None:
        grads = [p.grad for p in params]
        update = torch._foreach_mul(state, beta1)
        torch._foreach_add_(update, grads, alpha=1 - beta1)
        torch._foreach_sign_(update)
        torch._foreach_add_(params, update, alpha=-lr)
        torch._foreach_mul_(state, beta2)
        torch._foreach_add_(state, grads, alpha=1 - beta2)

    return step


def kernel_only(opt: Any) -> Callable[[], object]:
    """The optimizer's kernel launch(es) alone, on its lists as they stand after a step: the
    step's time less the Python around it (state lookups, step counts, grouping)."""
    opt.step()
    module = opt.op.load()
    group = opt.param_groups[0]
    params = list(group["params"])
    lists = [[p.grad for p in params], params]
    lists += [[opt.state[p][key] for p in params] for key in opt.state_keys]
    scalars = opt._kernel_scalars(group, 2)
    return lambda: getattr(module, opt.kernel_fn)(*lists, *scalars)


def host_only(opt: Any) -> Callable[[], object]:
    """The step with its kernel launch a no-op: the Python around the launch (state lookups,
    step counts, grouping) that a GPU step waits on before the launch."""

    def step() -> None:
        opt._launch = lambda *args: None  # the instance's attribute hides the method
        try:
            opt.step()
        finally:
            del opt._launch

    return step


def bench(layers: int, hidden: int, reps: int, copy: float) -> list[Row]:
    sizes = model_sizes(layers, hidden)
    numel = sum(sizes)
    rows: list[Row] = []
    for dtype in (torch.float32, torch.bfloat16):
        width = torch.finfo(dtype).bits // 8
        # Bytes per element: p read+write, g read, fp32 state read+write (ours).
        ours_bytes = {"adam": 3 * width + 16, "lion": 3 * width + 8, "lamb": 3 * width + 16 + 8}
        torch_bytes = {
            "adam": 3 * width + 4 * width,
            "lion": 3 * width + 2 * width,
            "lamb": 3 * width + 16 + 8,
        }
        cases: list[tuple[str, torch.optim.Optimizer, Callable[[], object], str]] = []
        ours_p, theirs_p = make_params(sizes, dtype), make_params(sizes, dtype)
        cases.append(
            (
                "adam",
                FusedAdam(ours_p, lr=1e-4, weight_decay=0.01, use_kernel=True),
                torch.optim.AdamW(theirs_p, lr=1e-4, weight_decay=0.01, fused=True).step,
                "AdamW(fused=True)",
            )
        )
        cases.append(
            (
                "lion",
                FusedLion(ours_p, lr=1e-5, use_kernel=True),
                foreach_lion(theirs_p, 1e-5, 0.9, 0.99),
                "foreach",
            )
        )
        cases.append(
            (
                "lamb",
                FusedLamb(ours_p, lr=1e-4, use_kernel=True),
                FusedLamb(theirs_p, lr=1e-4, use_kernel=False).step,
                "PyTorch ops",
            )
        )
        for name, ours, theirs, impl in cases:
            timed = [ours.step, kernel_only(ours), theirs]
            ours_ms, kernel_ms, torch_ms = cuda_medians(timed, reps, warmup=3)
            torch.cuda.synchronize()
            (host,) = time_interleaved([host_only(ours)], reps, warmup=3)
            rows.append(
                Row(
                    optimizer=name,
                    dtype=str(dtype).removeprefix("torch."),
                    params_m=round(numel / 1e6, 1),
                    ours_ms=round(ours_ms, 3),
                    kernel_ms=round(kernel_ms, 3),
                    host_ms=round(host.median * 1e3, 3),
                    bytes_ms=round(numel * ours_bytes[name] / copy / 1e6, 3),
                    torch_bytes_ms=round(numel * torch_bytes[name] / copy / 1e6, 3),
                    torch_ms=round(torch_ms, 3),
                    speedup=round(torch_ms / ours_ms, 2),
                    ours_gbps=round(numel * ours_bytes[name] / ours_ms / 1e6, 1),
                    torch_gbps=round(numel * torch_bytes[name] / torch_ms / 1e6, 1),
                    percent_of_copy=round(100 * numel * ours_bytes[name] / kernel_ms / 1e6 / copy, 1),
                    torch_impl=impl,
                )
            )
        del ours_p, theirs_p, cases
        torch.cuda.empty_cache()
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--layers", type=int, default=24)
    parser.add_argument("--hidden", type=int, default=2048)
    parser.add_argument("--reps", type=int, default=20)
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    args = parser.parse_args()
    if gpu_missing("optimizer"):
        return 0
    copy = copy_gbps()
    rows = bench(args.layers, args.hidden, args.reps, copy)
    print(
        f"{torch.cuda.get_device_name()}, torch {torch.__version__}, {rows[0].params_m}M params, "
        f"device copy {copy:.0f} GB/s"
    )
    columns = [
        Column("optimizer", "optimizer", "<6"),
        Column("dtype", "dtype", "<9"),
        *speed_columns(3),
        Column("kernel ms", "kernel_ms", ">10", ".3f"),
        Column("host ms", "host_ms", ">8", ".3f"),
        Column("bytes ms", "bytes_ms", ">9", ".3f"),
        Column("torch bytes ms", "torch_bytes_ms", ">15", ".3f"),
        Column("ours GB/s", "ours_gbps", ">10", ".1f"),
        Column("torch GB/s", "torch_gbps", ">10", ".1f"),
        Column("kernel % copy", "percent_of_copy", ">14", ".1f", "%"),
        Column("torch", "torch_impl", "", sep="  "),
    ]
    report_gpu(columns, [asdict(r) for r in rows], args.out, copy_gbps=round(copy, 1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
