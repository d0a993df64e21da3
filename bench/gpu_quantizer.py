"""Benchmark: the quantizer kernels' achieved memory bandwidth, against a device copy.

    python bench/gpu_quantizer.py [--numel 64M] [--group-size 128] [--reps 30] [--out FILE]

The quantizers are memory-bound, so the yardstick is bandwidth: bytes each operation
must move (read the input, write codes and per-group scales; or the reverse for
dequantize) over its time, as a percentage of what a device-to-device copy of the same
input's bytes achieves in the same run (``_common.copy_gbps``: bytes read + written over time).
The PyTorch implementation of the same rules (the fronts' fallback) is timed alongside.
Medians of CUDA-event times after warmup. Without a GPU it prints why and exits 0.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

import torch
from _common import (
    RESULTS,
    Column,
    copy_gbps,
    cuda_medians,
    gpu_missing,
    parse_size,
    report_gpu,
    speed_columns,
)

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run from a checkout

from kernels.quantization import (
    FP_FORMATS,
    dequantize,
    dequantize_fp,
    dequantize_fp8,
    quantize,
    quantize_fp,
    quantize_fp8,
)

DEFAULT_OUT = RESULTS / "gpu_quantizer.json"


@dataclass(frozen=True)
class Row:
    op: str
    dtype: str
    numel: int
    ours_ms: float
    torch_ms: float
    speedup: float
    ours_gbps: float
    copy_gbps: float
    percent_of_copy: float


def bench(numel: int, group_size: int, reps: int) -> list[Row]:
    rows: list[Row] = []
    groups = numel // group_size
    for dtype in (torch.bfloat16, torch.float16):
        width = torch.finfo(dtype).bits // 8
        x = torch.randn(groups, group_size, device="cuda", dtype=dtype)
        copy = copy_gbps(x.numel() * width, reps)
        cases: list[tuple[str, Callable[[bool], object], float]] = []
        for bits, symmetric in ((8, True), (8, False), (4, True)):
            code_bytes = bits / 8
            scale_bytes = (4 if symmetric else 8) / group_size
            name = f"int{bits}_{'sym' if symmetric else 'asym'}"
            q = quantize(x, bits, group_size, symmetric, use_kernel=True)
            cases.append(
                (
                    f"quantize_{name}",
                    lambda k, b=bits, s=symmetric, x=x: quantize(x, b, group_size, s, use_kernel=k),
                    width + code_bytes + scale_bytes,
                )
            )
            cases.append(
                (
                    f"dequantize_{name}",
                    lambda k, q=q: dequantize(q, use_kernel=k),
                    width + code_bytes + scale_bytes,
                )
            )
        for fmt in ("e4m3", "e5m2"):
            q8 = quantize_fp8(x, group_size, fmt, use_kernel=True)  # type: ignore[arg-type]
            cases.append(
                (
                    f"quantize_fp8_{fmt}",
                    lambda k, f=fmt, x=x: quantize_fp8(x, group_size, f, use_kernel=k),  # type: ignore[arg-type]
                    width + 1 + 4 / group_size,
                )
            )
            cases.append(
                (
                    f"dequantize_fp8_{fmt}",
                    lambda k, q8=q8: dequantize_fp8(q8, use_kernel=k),
                    width + 1 + 4 / group_size,
                )
            )
        # The bit-packed formats (FP6, FP4, FP12) and stochastic rounding (a Philox word per element).
        for fmt, rounding in (("e3m2", "nearest"), ("e2m1", "nearest"), ("e4m7", "nearest"),
                              ("e4m3", "stochastic"), ("e3m2", "stochastic")):  # fmt: skip
            moved = width + FP_FORMATS[fmt].bits / 8 + 4 / group_size
            qp = quantize_fp(x, fmt, group_size, use_kernel=True)
            cases.append(
                (
                    f"quantize_fp_{fmt}" + ("_sr" if rounding == "stochastic" else ""),
                    lambda k, f=fmt, r=rounding, x=x: quantize_fp(
                        x, f, group_size, rounding=r, seed=0 if r == "stochastic" else None, use_kernel=k
                    ),
                    moved,
                )
            )
            if rounding == "nearest":
                cases.append(
                    (f"dequantize_fp_{fmt}", lambda k, qp=qp: dequantize_fp(qp, use_kernel=k), moved)
                )
        for name, fn, bytes_per_element in cases:
            (ours_ms,) = cuda_medians([lambda fn=fn: fn(True)], reps)
            (torch_ms,) = cuda_medians([lambda fn=fn: fn(False)], max(3, reps // 3))
            gbps = x.numel() * bytes_per_element / ours_ms / 1e6
            rows.append(
                Row(
                    op=name,
                    dtype=str(dtype).removeprefix("torch."),
                    numel=x.numel(),
                    ours_ms=round(ours_ms, 4),
                    torch_ms=round(torch_ms, 4),
                    speedup=round(torch_ms / ours_ms, 2),
                    ours_gbps=round(gbps, 1),
                    copy_gbps=round(copy, 1),
                    percent_of_copy=round(100 * gbps / copy, 1),
                )
            )
        del x
        torch.cuda.empty_cache()
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--numel", type=parse_size, default=parse_size("64M"))
    parser.add_argument("--group-size", type=int, default=128)
    parser.add_argument("--reps", type=int, default=30)
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    args = parser.parse_args()
    if gpu_missing("quantizer"):
        return 0
    import warnings

    warnings.simplefilter("ignore", RuntimeWarning)  # the timed PyTorch path warns that it is the fallback
    rows = bench(args.numel, args.group_size, args.reps)
    print(
        f"{torch.cuda.get_device_name()}, torch {torch.__version__}, "
        f"{args.numel} elements, groups of {args.group_size}"
    )
    columns = [
        Column("op", "op", "<22"),
        Column("dtype", "dtype", "<9"),
        *speed_columns(4),
        Column("GB/s", "ours_gbps", ">8", ".1f"),
        Column("copy GB/s", "copy_gbps", ">10", ".1f"),
        Column("% copy", "percent_of_copy", ">7", ".1f", "%"),
    ]
    report_gpu(columns, [asdict(r) for r in rows], args.out, group_size=args.group_size)
    return 0


if __name__ == "__main__":
    sys.exit(main())
