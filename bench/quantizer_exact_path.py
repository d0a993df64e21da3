"""Benchmark (no GPU needed): how often the int quantizer kernel leaves its quick path.

    python bench/quantizer_exact_path.py [--groups 40000] [--group-size 128] [--out FILE]

The int8 / int4 quantize kernel (``quantizer.cu``, ``encode_slot``) codes a slot of 8 elements
(16 bytes of fp16 / bf16) with one reciprocal per group, and redoes the whole slot with IEEE
divisions when any element's quotient lies within 2^-14 of a rounding tie, where the quick
product might round the other way. A warp codes 32 slots at once (two groups of 128), so when
any of them is unsure, all its lanes wait for the slow path. This script replays the quick
path's arithmetic in fp32 on the CPU (each step one IEEE operation, as the kernel's ``_rn``
intrinsics make it) for N(0, 1) groups, the GPU benchmark's data, and counts per dtype and code:

* ``unsure %``: elements whose quick code is not certain;
* ``slot %``: slots that take the slow path;
* ``warp divisions``: exact divisions a warp waits for per call as the kernel is (8 per slot,
  when any of its 32 slots is unsure), and ``if per element``: as many as there are element
  positions with an unsure element in some slot, were only unsure elements redone.

Writes the table to stdout and JSON to --out.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import torch
from _common import RESULTS, Column, print_table, write_json

DEFAULT_OUT = RESULTS / "quantizer_exact_path.json"
ROUND_MAGIC = 12582912.0  # 1.5 * 2^23: adding it rounds to an integer, ties to even
TIE_MARGIN = 0.5 - 2.0**-14
SLOT = 8  # elements of 16-bit x per 16-byte slot
WARP_SLOTS = 32


def quick_path(x: torch.Tensor, bits: int, symmetric: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """For the [groups, group_size] fp32 ``x``: the codes the quick path writes (int32, the
    quotient rounded by the magic-number add), and where it is unsure of them."""
    # Divisions by tensors: torch may divide by a Python number as a multiply by its reciprocal.
    if symmetric:
        span = x.abs().amax(1, keepdim=True)
        scale = span / torch.full_like(span, (1 << (bits - 1)) - 1)
        dividend = x
    else:
        low = x.amin(1, keepdim=True)
        span = x.amax(1, keepdim=True) - low
        scale = span / torch.full_like(span, (1 << bits) - 1)
        dividend = x - low
    quotient = dividend * (torch.ones_like(scale) / scale)
    nearest = (quotient + ROUND_MAGIC) - ROUND_MAGIC
    return nearest.to(torch.int32), (quotient - nearest).abs() > TIE_MARGIN


def measure(
    dtype: torch.dtype, bits: int, symmetric: bool, groups: int, group_size: int
) -> dict[str, object]:
    x = torch.randn(groups, group_size, generator=torch.Generator().manual_seed(0)).to(dtype).float()
    _, unsure = quick_path(x, bits, symmetric)
    slots = unsure.view(-1, SLOT)
    calls = slots[: slots.shape[0] // WARP_SLOTS * WARP_SLOTS].view(-1, WARP_SLOTS, SLOT)
    return {
        "code": f"int{bits}_{'sym' if symmetric else 'asym'}",
        "dtype": str(dtype).removeprefix("torch."),
        "unsure_percent": 100 * unsure.float().mean().item(),
        "slot_percent": 100 * slots.any(1).float().mean().item(),
        "warp_divisions": SLOT * calls.flatten(1).any(1).float().mean().item(),
        "per_element_divisions": calls.any(1).float().sum(1).mean().item(),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--groups", type=int, default=40000)
    parser.add_argument("--group-size", type=int, default=128)
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    args = parser.parse_args()
    if args.group_size % SLOT:
        parser.error(f"--group-size must be a multiple of {SLOT} (the kernel's slot)")
    rows = [
        measure(dtype, bits, symmetric, args.groups, args.group_size)
        for bits, symmetric in ((8, True), (8, False), (4, True))
        for dtype in (torch.float16, torch.bfloat16)
    ]
    columns = [
        Column("code", "code", "<10"),
        Column("dtype", "dtype", "<9"),
        Column("unsure %", "unsure_percent", ">9", ".3f"),
        Column("slot %", "slot_percent", ">7", ".2f"),
        Column("warp divisions", "warp_divisions", ">15", ".2f"),
        Column("if per element", "per_element_divisions", ">15", ".2f"),
    ]
    print_table(columns, rows)
    write_json(args.out, {"torch": torch.__version__, "group_size": args.group_size, "rows": rows})


if __name__ == "__main__":
    main()
