"""The kernels still behind torch or short of copy bandwidth, one case per process, for ``ncu``.

    python bench/gpu_profile.py --list              # the cases, one a line
    python bench/gpu_profile.py CASE [--rows 32768] [--numel 64M]

Each case warms its kernel up (JIT load, first launches, the caching allocator) outside the
profiled region, then runs it once between ``cudaProfilerStart`` and ``cudaProfilerStop``, so
``ncu --profile-from-start off`` measures exactly that call's kernels and nothing of the set-up::

    ncu --profile-from-start off --section SpeedOfLight python bench/gpu_profile.py CASE

``scripts/gpu_proof.sh profile`` runs every case that way and keeps each report. The cases pair
what lags with its twin that does not (fp16 LayerNorm against bf16 of the same shape, and
torch's kernel for it; bf16 asymmetric int8 against fp16), so a profile shows what differs.
Without a GPU it prints why and exits 0, as the other GPU benchmarks do.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path

from _common import gpu_missing, parse_size

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run from a checkout

Case = Callable[[argparse.Namespace], Callable[[], object]]
DTYPES = {"fp16": "float16", "bf16": "bfloat16", "fp32": "float32"}


def _layer_norm(dtype: str, hidden: int, backward: bool, ours: bool) -> Case:
    def make(args: argparse.Namespace) -> Callable[[], object]:
        import torch
        import torch.nn.functional as F

        from kernels.transformer import layer_norm

        kind = getattr(torch, DTYPES[dtype])
        x = torch.randn(args.rows, hidden, device="cuda", dtype=kind, requires_grad=backward)
        w = torch.randn(hidden, device="cuda", dtype=kind, requires_grad=backward)
        b = torch.randn(hidden, device="cuda", dtype=kind, requires_grad=backward)
        dy = torch.randn(args.rows, hidden, device="cuda", dtype=kind)

        def forward() -> torch.Tensor:
            if ours:
                return layer_norm(x, hidden, w, b, use_kernel=True)
            return F.layer_norm(x, (hidden,), w, b)

        if not backward:
            return forward
        # The forward runs outside the profiled call; only the backward's kernels are measured.
        y = forward()
        return lambda: torch.autograd.grad(y, (x, w, b), dy, retain_graph=True)

    return make


def _quantize(dtype: str, kind: str) -> Case:
    def make(args: argparse.Namespace) -> Callable[[], object]:
        import torch

        from kernels.quantization import quantize, quantize_fp8

        x = torch.randn(
            args.numel // args.group_size, args.group_size, device="cuda", dtype=getattr(torch, DTYPES[dtype])
        )
        if kind == "e4m3":
            return lambda: quantize_fp8(x, args.group_size, "e4m3", use_kernel=True)
        bits, symmetric = {"int8_asym": (8, False), "int8_sym": (8, True), "int4_sym": (4, True)}[kind]
        return lambda: quantize(x, bits, args.group_size, symmetric, use_kernel=True)

    return make


def cases() -> dict[str, Case]:
    table: dict[str, Case] = {}
    for hidden in (768, 1024):
        for dtype in ("fp16", "bf16", "fp32"):
            table[f"layer_norm_fwd_{dtype}_{hidden}"] = _layer_norm(dtype, hidden, False, True)
        for dtype in ("fp16", "bf16"):
            table[f"layer_norm_bwd_{dtype}_{hidden}"] = _layer_norm(dtype, hidden, True, True)
        table[f"torch_layer_norm_fwd_fp16_{hidden}"] = _layer_norm("fp16", hidden, False, False)
        table[f"torch_layer_norm_bwd_fp16_{hidden}"] = _layer_norm("fp16", hidden, True, False)
    # Each short of 70% of copy bandwidth, then its twin that is not.
    quantizer_cases = [("bf16", "int8_asym"), ("fp16", "int8_asym"), ("bf16", "int4_sym"), ("bf16", "e4m3")]
    quantizer_cases += [("fp16", "int4_sym"), ("bf16", "int8_sym"), ("fp16", "e4m3")]
    for dtype, kind in quantizer_cases:
        table[f"quantize_{kind}_{dtype}"] = _quantize(dtype, kind)
    return table


def main() -> int:
    table = cases()
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("case", nargs="?", help="one of --list")
    parser.add_argument("--list", action="store_true", help="print the cases and exit")
    parser.add_argument("--rows", type=int, default=32768, help="LayerNorm rows (the benchmark table's)")
    parser.add_argument(
        "--numel", type=parse_size, default=parse_size("64M"), help="quantizer input elements"
    )
    parser.add_argument("--group-size", type=int, default=128)
    parser.add_argument("--warmup", type=int, default=3)
    args = parser.parse_args()
    if args.list:
        print("\n".join(table))
        return 0
    if args.case not in table:
        parser.error(
            f"name a case: {', '.join(table)}"
            if args.case is None
            else f"unknown case {args.case!r} (see --list)"
        )
    if gpu_missing("profile"):
        return 0

    import torch

    run = table[args.case](args)
    for _ in range(args.warmup):
        run()
    torch.cuda.synchronize()
    torch.cuda.profiler.start()  # type: ignore[no-untyped-call]
    run()
    torch.cuda.synchronize()
    torch.cuda.profiler.stop()  # type: ignore[no-untyped-call]
    print(f"{args.case}: profiled one call")
    return 0


if __name__ == "__main__":
    sys.exit(main())
