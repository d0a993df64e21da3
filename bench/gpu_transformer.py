"""Benchmark: the transformer kernels against the torch ops they replace, forward + backward.

    python bench/gpu_transformer.py [--rows 8192] [--reps 30] [--out FILE]

* LayerNorm: ``kernels.transformer.layer_norm`` vs ``F.layer_norm`` (hidden 768, 1024, 4096, 4097);
* residual LayerNorm: ``residual_layer_norm`` with a hidden bias and the sum returned (both
  differentiated) vs torch's unfused ``s = x + b + r; F.layer_norm(s)`` (hidden 768, 1024,
  4096, 8192);
* bias + GeLU: ``bias_gelu`` vs ``F.gelu(x + b)`` (erf and tanh);
* softmax: ``scaled_masked_softmax`` (causal, and with a [batch, 1, q, k] mask) vs
  ``torch.softmax((x * scale).masked_fill(mask, -inf))``;

each timed forward and forward+backward, for bf16 and fp16 (plus fp32 for the LayerNorms).
Medians of CUDA-event times, ours and torch's interleaved, after warmup. Without a GPU
it prints why and exits 0.
"""

from __future__ import annotations

import argparse
import math
import sys
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

import torch
import torch.nn.functional as F
from _common import RESULTS, Column, copy_gbps, cuda_medians, gpu_missing, report_gpu, speed_columns

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run from a checkout

from kernels.transformer import bias_gelu, layer_norm, residual_layer_norm, scaled_masked_softmax

DEFAULT_OUT = RESULTS / "gpu_transformer.json"


@dataclass(frozen=True)
class Row:
    op: str
    shape: str
    dtype: str
    mode: str
    ours_ms: float
    torch_ms: float
    speedup: float
    gbps: float
    percent_of_copy: float


# The fewest bytes per element of x each mode must move, in units of the element width:
# forward reads x and writes y; backward reads dy and x (or y) and writes dx.
MIN_TRAFFIC = {"fwd": 2, "fwd+bwd": 5}
# Residual LayerNorm with the sum returned: forward reads x and the residual and writes the
# sum and y; backward reads dy, the sum's gradient and the sum and writes one gradient
# (x's and the residual's are the same tensor).
RESIDUAL_TRAFFIC = {"fwd": 4, "fwd+bwd": 8}

Outputs = torch.Tensor | tuple[torch.Tensor, ...]


def fwd_bwd(fn: Callable[..., Outputs], inputs: list[torch.Tensor], dy: Outputs) -> Callable[[], object]:
    """Forward, then the gradients of every input that requires one; ``dy`` is the incoming
    gradient of each output (a tuple for a function with several)."""

    def run() -> object:
        out = fn(*inputs)
        return torch.autograd.grad(out, [t for t in inputs if t.requires_grad], dy)

    return run


def fwd(fn: Callable[..., Outputs], inputs: list[torch.Tensor]) -> Callable[[], object]:
    def run() -> object:
        with torch.no_grad():
            return fn(*inputs)

    return run


def fwd_and_bwd_rows(
    op: str,
    shape: str,
    dtype: torch.dtype,
    ours: Callable[..., Outputs],
    theirs: Callable[..., Outputs],
    inputs: list[torch.Tensor],
    dy: Outputs,
    reps: int,
    copy: float,
    traffic: dict[str, int] = MIN_TRAFFIC,
) -> list[Row]:
    """A forward row and a forward+backward row of ours against theirs on ``inputs``; the
    bandwidth columns count the minimum traffic (``traffic``, elements of the first incoming
    gradient's size per mode) against ``copy`` GB/s."""
    sized = dy[0] if isinstance(dy, tuple) else dy
    timed = {
        "fwd": [fwd(ours, inputs), fwd(theirs, inputs)],
        "fwd+bwd": [fwd_bwd(ours, inputs, dy), fwd_bwd(theirs, inputs, dy)],
    }
    out: list[Row] = []
    for mode, fns in timed.items():
        ours_ms, torch_ms = cuda_medians(fns, reps, warmup=5)
        gbps = traffic[mode] * sized.numel() * sized.element_size() / ours_ms / 1e6
        out.append(
            Row(
                op,
                shape,
                str(dtype).removeprefix("torch."),
                mode,
                round(ours_ms, 4),
                round(torch_ms, 4),
                round(torch_ms / ours_ms, 2),
                round(gbps, 1),
                round(100 * gbps / copy, 1),
            )
        )
    return out


def bench_layer_norm(rows: int, reps: int, copy: float) -> list[Row]:
    out: list[Row] = []
    for dtype in (torch.bfloat16, torch.float16, torch.float32):
        for hidden in (768, 1024, 4096, 4097):
            x = torch.randn(rows, hidden, device="cuda", dtype=dtype, requires_grad=True)
            w = torch.randn(hidden, device="cuda", dtype=dtype, requires_grad=True)
            b = torch.randn(hidden, device="cuda", dtype=dtype, requires_grad=True)
            dy = torch.randn_like(x)

            def ours(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor, h: int = hidden) -> torch.Tensor:
                return layer_norm(x, h, w, b, use_kernel=True)

            def theirs(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor, h: int = hidden) -> torch.Tensor:
                return F.layer_norm(x, (h,), w, b)

            shape = f"{rows}x{hidden}"
            out += fwd_and_bwd_rows("layer_norm", shape, dtype, ours, theirs, [x, w, b], dy, reps, copy)
    return out


def bench_residual_layer_norm(rows: int, reps: int, copy: float) -> list[Row]:
    out: list[Row] = []
    for dtype in (torch.bfloat16, torch.float16, torch.float32):
        for hidden in (768, 1024, 4096, 8192):
            x, r = (
                torch.randn(rows, hidden, device="cuda", dtype=dtype, requires_grad=True) for _ in range(2)
            )
            hb, w, b = (torch.randn(hidden, device="cuda", dtype=dtype, requires_grad=True) for _ in range(3))
            dy, dsum = torch.randn_like(x), torch.randn_like(x)

            def ours(
                x: torch.Tensor,
                r: torch.Tensor,
                hb: torch.Tensor,
                w: torch.Tensor,
                b: torch.Tensor,
                h: int = hidden,
            ) -> tuple[torch.Tensor, torch.Tensor]:
                return residual_layer_norm(x, r, h, w, b, hb, return_sum=True, use_kernel=True)

            def theirs(
                x: torch.Tensor,
                r: torch.Tensor,
                hb: torch.Tensor,
                w: torch.Tensor,
                b: torch.Tensor,
                h: int = hidden,
            ) -> tuple[torch.Tensor, torch.Tensor]:
                s = x + hb + r
                return F.layer_norm(s, (h,), w, b), s

            shape = f"{rows}x{hidden}"
            out += fwd_and_bwd_rows(
                "residual_layer_norm",
                shape,
                dtype,
                ours,
                theirs,
                [x, r, hb, w, b],
                (dy, dsum),
                reps,
                copy,
                RESIDUAL_TRAFFIC,
            )
    return out


def bench_bias_gelu(rows: int, reps: int, copy: float) -> list[Row]:
    out: list[Row] = []
    for dtype in (torch.bfloat16, torch.float16):
        for approximate in ("none", "tanh"):
            hidden = 4096
            x = torch.randn(rows, hidden, device="cuda", dtype=dtype, requires_grad=True)
            b = torch.randn(hidden, device="cuda", dtype=dtype, requires_grad=True)
            dy = torch.randn_like(x)

            def ours(x: torch.Tensor, b: torch.Tensor, a: str = approximate) -> torch.Tensor:
                return bias_gelu(x, b, a, use_kernel=True)  # type: ignore[arg-type]

            def theirs(x: torch.Tensor, b: torch.Tensor, a: str = approximate) -> torch.Tensor:
                return F.gelu(x + b, approximate=a)

            name = f"bias_gelu[{approximate}]"
            shape = f"{rows}x{hidden}"
            out += fwd_and_bwd_rows(name, shape, dtype, ours, theirs, [x, b], dy, reps, copy)
    return out


def bench_softmax(reps: int, copy: float) -> list[Row]:
    out: list[Row] = []
    batch, heads, seq = 8, 16, 1024
    scale = 1.0 / math.sqrt(64)
    causal_mask = torch.triu(torch.ones(seq, seq, dtype=torch.bool, device="cuda"), diagonal=1)
    pad_mask = torch.rand(batch, 1, seq, seq, device="cuda") < 0.1
    for dtype in (torch.bfloat16, torch.float16):
        x = torch.randn(batch, heads, seq, seq, device="cuda", dtype=dtype, requires_grad=True)
        dy = torch.randn_like(x)
        for kind, mask, causal in (("causal", causal_mask, True), ("mask", pad_mask, False)):

            def ours(x: torch.Tensor, m: torch.Tensor = mask, c: bool = causal) -> torch.Tensor:
                return scaled_masked_softmax(x, None if c else m, scale, causal=c, use_kernel=True)

            def theirs(x: torch.Tensor, m: torch.Tensor = mask) -> torch.Tensor:
                return torch.softmax((x * scale).masked_fill(m, -math.inf), dim=-1)

            name = f"softmax[{kind}]"
            shape = f"{batch}x{heads}x{seq}x{seq}"
            out += fwd_and_bwd_rows(name, shape, dtype, ours, theirs, [x], dy, reps, copy)
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--rows", type=int, default=8192)
    parser.add_argument("--reps", type=int, default=30)
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    args = parser.parse_args()
    if gpu_missing("transformer"):
        return 0
    copy = copy_gbps()
    rows = (
        bench_layer_norm(args.rows, args.reps, copy)
        + bench_residual_layer_norm(args.rows, args.reps, copy)
        + bench_bias_gelu(args.rows, args.reps, copy)
        + bench_softmax(args.reps, copy)
    )
    print(f"{torch.cuda.get_device_name()}, torch {torch.__version__}, device copy {copy:.0f} GB/s")
    columns = [
        Column("op", "op", "<20"),
        Column("shape", "shape", "<18"),
        Column("dtype", "dtype", "<9"),
        Column("mode", "mode", "<8"),
        *speed_columns(4),
        Column("GB/s", "gbps", ">8", ".1f"),
        Column("% copy", "percent_of_copy", ">7", ".1f", "%"),
    ]
    report_gpu(columns, [asdict(r) for r in rows], args.out, copy_gbps=round(copy, 1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
