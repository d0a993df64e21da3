"""Every GPU kernel variant once, on small shapes: what compute-sanitizer runs.

    compute-sanitizer --tool racecheck python scripts/sanitize_cases.py [--only GROUP...]
    python scripts/sanitize_cases.py --list-groups      # the groups, one a line
    python scripts/sanitize_cases.py --device cpu        # the same calls on the fallbacks

The sanitizers slow each CUDA call by orders of magnitude, and most of the GPU tests' time
under them went to the host (pytest, hundreds of parametrizations of the same kernel), so
the full tier under racecheck never finished in a device session. This script makes the
calls that reach each kernel template the ops dispatch to (every vector width, register
slice and loop kernel of LayerNorm, aligned and not; each softmax mask layout; each
optimizer with lists spanning several launches; each quantizer format, rounding and
alignment) on shapes just big enough to reach them, once each, with ``use_kernel=True``.
It checks no values (the GPU tests do): it is the sanitizers' workload, and a list of
what they covered. ``--device cpu`` runs the same calls on the PyTorch fallbacks, which
keeps the list in step with the fronts' signatures (a unit test does that, no GPU needed).
"""

from __future__ import annotations

import argparse
import itertools
import math
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from functools import partial
from pathlib import Path

import torch
from torch import Tensor

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run from a checkout

from kernels.optim.fused import FusedAdam, FusedLion
from kernels.optim.fused_lamb import FusedLamb
from kernels.quantization import dequantize, dequantize_fp8, quantize, quantize_fp8
from kernels.quantization.fp_quantizer import dequantize_fp, quantize_fp, selective_dequantize
from kernels.transformer import bias_gelu, layer_norm, residual_layer_norm, scaled_masked_softmax

DTYPES = (torch.float32, torch.float16, torch.bfloat16)
# Hidden sizes that reach each LayerNorm path: one column; odd (scalar slots); one warp;
# two warps; 4097 (odd, above the residual fp32 scalar slices: the loop kernel); 8192 and
# 12288 (the largest register slices); 20000 (past every slice: the loop kernels).
LN_COLS = (1, 127, 768, 1024, 4097, 8192, 12288, 20000)
GELU_COLS = (1, 127, 768, 4097)
SOFTMAX_KEYS = (1, 31, 128, 1000, 4097)

Case = tuple[str, Callable[[], object]]


def _short(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


def _input(shape: tuple[int, ...], dtype: torch.dtype, device: torch.device, aligned: bool = True) -> Tensor:
    """A tensor of ``shape``; not aligned: a view one element into its storage, so its data
    pointer is off every vector boundary and the kernels must take their scalar paths."""
    numel = math.prod(shape)
    flat = torch.randn(numel + 1, device=device).to(dtype)
    return (flat[:numel] if aligned else flat[1:]).view(shape)


def _leaf(t: Tensor) -> Tensor:
    return t.detach().requires_grad_(True)


def _layer_norm(
    shape: tuple[int, int], dtype: torch.dtype, device: torch.device, aligned: bool, use_kernel: bool
) -> None:
    x = _leaf(_input(shape, dtype, device, aligned))
    w, b = (_leaf(_input(shape[1:], dtype, device)) for _ in range(2))
    torch.autograd.backward(layer_norm(x, shape[1], w, b, use_kernel=use_kernel).sum())


def _residual_layer_norm(
    cols: int, dtype: torch.dtype, device: torch.device, aligned: bool, use_kernel: bool
) -> None:
    x, r = (_leaf(_input((3, cols), dtype, device, aligned)) for _ in range(2))
    w, b, hb = (_leaf(_input((cols,), dtype, device)) for _ in range(3))
    y, s = residual_layer_norm(x, r, cols, w, b, hb, return_sum=True, use_kernel=use_kernel)
    torch.autograd.backward(y.sum() + s.sum())


def layer_norm_cases(device: torch.device, use_kernel: bool, dtypes: Sequence[torch.dtype]) -> Iterator[Case]:
    for dtype, cols, aligned in itertools.product(dtypes, LN_COLS, (True, False)):
        name = f"{_short(dtype)} cols={cols}{'' if aligned else ' misaligned'}"
        yield f"layer_norm {name}", partial(_layer_norm, (3, cols), dtype, device, aligned, use_kernel)
        residual = partial(_residual_layer_norm, cols, dtype, device, aligned, use_kernel)
        yield f"residual_layer_norm {name}", residual
    for shape in ((0, 64), (4, 0)):  # no rows, rows of no elements: the zero-fill paths
        empty = partial(_layer_norm, shape, torch.float32, device, True, use_kernel)
        yield f"layer_norm empty {shape}", empty


def _bias_gelu(
    cols: int, dtype: torch.dtype, device: torch.device, aligned: bool, approximate: str, use_kernel: bool
) -> None:
    x = _leaf(_input((5, cols), dtype, device, aligned))
    b = _leaf(_input((cols,), dtype, device))
    torch.autograd.backward(bias_gelu(x, b, approximate, use_kernel=use_kernel).sum())  # type: ignore[arg-type]


def bias_gelu_cases(device: torch.device, use_kernel: bool, dtypes: Sequence[torch.dtype]) -> Iterator[Case]:
    for dtype, cols, aligned, approximate in itertools.product(
        dtypes, GELU_COLS, (True, False), ("none", "tanh")
    ):
        name = f"bias_gelu {_short(dtype)} cols={cols} {approximate}{'' if aligned else ' misaligned'}"
        yield name, partial(_bias_gelu, cols, dtype, device, aligned, approximate, use_kernel)
    # Rows of no elements: the zero-size paths.
    yield "bias_gelu empty (5, 0)", partial(_bias_gelu, 0, torch.float32, device, True, "none", use_kernel)


def _softmax(
    x_shape: tuple[int, ...],
    dtype: torch.dtype,
    device: torch.device,
    mask: Tensor | None,
    causal: bool,
    use_kernel: bool,
) -> None:
    x = _leaf(_input(x_shape, dtype, device))
    y = scaled_masked_softmax(x, mask, 0.125, causal, use_kernel=use_kernel)
    torch.autograd.backward(y, torch.randn_like(y))


def softmax_cases(device: torch.device, use_kernel: bool, dtypes: Sequence[torch.dtype]) -> Iterator[Case]:
    b, h, q = 2, 3, 5
    for dtype, keys, causal in itertools.product(dtypes, SOFTMAX_KEYS, (False, True)):
        masks: dict[str, Tensor | None] = {
            "no mask": None,
            "mask [b,1,1,k]": torch.rand(b, 1, 1, keys, device=device) < 0.3,
            "mask [1,h,q,k]": torch.rand(1, h, q, keys, device=device) < 0.3,
            "uint8 mask": (torch.rand(b, h, q, keys, device=device) < 0.3).to(torch.uint8),
        }
        for label, mask in masks.items():
            name = f"softmax {_short(dtype)} keys={keys} {label}{' causal' if causal else ''}"
            yield name, partial(_softmax, (b, h, q, keys), dtype, device, mask, causal, use_kernel)


def _param_list(dtype: torch.dtype, device: torch.device) -> list[torch.nn.Parameter]:
    """Mixed sizes, empty and misaligned ones among them, more tensors than one launch takes
    (Adam's takes 76), and one that is not contiguous."""
    sizes = [1, 3, 0, 127, 1024, 4097, 65536 + 5] * 25
    params = [
        torch.nn.Parameter(_input((n,), dtype, device, aligned=i % 3 != 0)) for i, n in enumerate(sizes)
    ]
    params.append(torch.nn.Parameter(_input((64, 48), dtype, device).t()))
    return params


def _optimizer_steps(
    make: Callable[[list[torch.nn.Parameter]], torch.optim.Optimizer],
    dtype: torch.dtype,
    device: torch.device,
) -> None:
    params = _param_list(dtype, device)
    opt = make(params)
    for _ in range(2):
        for p in params:
            p.grad = torch.randn_like(p)
        opt.step()
    if isinstance(opt, FusedLamb):
        opt.trust_ratios()


def optimizer_cases(device: torch.device, use_kernel: bool, dtypes: Sequence[torch.dtype]) -> Iterator[Case]:
    makers: dict[str, Callable[[list[torch.nn.Parameter]], torch.optim.Optimizer]] = {
        "FusedAdam": partial(FusedAdam, weight_decay=0.01, use_kernel=use_kernel),
        "FusedLion": partial(FusedLion, weight_decay=0.01, use_kernel=use_kernel),
        "FusedLamb": partial(FusedLamb, weight_decay=0.01, use_kernel=use_kernel),
        "FusedLamb options": partial(
            FusedLamb,
            use_kernel=use_kernel,
            max_grad_norm=1.0,
            eps_inside_sqrt=True,
            min_coeff=0.01,
            max_coeff=10.0,
        ),
    }
    for (name, make), dtype in itertools.product(makers.items(), dtypes):
        yield f"{name} {_short(dtype)}", partial(_optimizer_steps, make, dtype, device)


def _special(x: Tensor) -> Tensor:
    """x with a NaN, an inf and a group-sized denormal-scale value in its first groups."""
    x[0, 0], x[1, 5], x[2, 7] = float("nan"), float("inf"), 1e-37
    return x


def _int_quantizer(bits: int, symmetric: bool, x: Tensor, use_kernel: bool) -> None:
    dequantize(quantize(_special(x), bits, 64, symmetric, use_kernel=use_kernel), use_kernel=use_kernel)


def _fp8_quantizer(fmt: str, x: Tensor, use_kernel: bool) -> None:
    dequantize_fp8(quantize_fp8(_special(x), 64, fmt, use_kernel=use_kernel), use_kernel=use_kernel)  # type: ignore[arg-type]


def _fp_quantizer(fmt: str, rounding: str, x: Tensor, use_kernel: bool) -> None:
    seed = 7 if rounding == "stochastic" else None
    q = quantize_fp(_special(x), fmt, 32, rounding, seed=seed, use_kernel=use_kernel)  # type: ignore[arg-type]
    dequantize_fp(q, use_kernel=use_kernel)
    selective_dequantize(q, [0, 32, 5, 5], use_kernel=use_kernel)


def quantizer_cases(device: torch.device, use_kernel: bool, dtypes: Sequence[torch.dtype]) -> Iterator[Case]:
    for dtype, aligned in itertools.product(dtypes, (True, False)):
        tag = f"{_short(dtype)}{'' if aligned else ' misaligned'}"

        def x(cols: int, dtype: torch.dtype = dtype, aligned: bool = aligned) -> Tensor:
            return _input((33, cols), dtype, device, aligned)

        for bits, symmetric in itertools.product((8, 4), (True, False)):
            name = f"quantize int{bits} {'sym' if symmetric else 'asym'} {tag}"
            yield name, partial(_int_quantizer, bits, symmetric, x(128), use_kernel)
        for fmt in ("e4m3", "e5m2"):
            yield f"quantize_fp8 {fmt} {tag}", partial(_fp8_quantizer, fmt, x(128), use_kernel)
        for fmt, rounding in itertools.product(
            ("e4m3", "e5m2", "e3m2", "e2m3", "e2m1", "e4m7"), ("nearest", "stochastic")
        ):
            yield (
                f"quantize_fp {fmt} {rounding} {tag}",
                partial(_fp_quantizer, fmt, rounding, x(96), use_kernel),
            )


GROUPS: dict[str, Callable[[torch.device, bool, Sequence[torch.dtype]], Iterator[Case]]] = {
    "layer_norm": layer_norm_cases,
    "bias_gelu": bias_gelu_cases,
    "softmax": softmax_cases,
    "optimizers": optimizer_cases,
    "quantizers": quantizer_cases,
}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    parser.add_argument("--only", nargs="+", choices=sorted(GROUPS), help="run these groups only")
    parser.add_argument("--list-groups", action="store_true", help="print the groups' names and exit")
    parser.add_argument(
        "--dtypes",
        nargs="+",
        choices=[str(d).removeprefix("torch.") for d in DTYPES],
        help="these dtypes only",
    )
    args = parser.parse_args(argv)
    if args.list_groups:
        print("\n".join(GROUPS))
        return 0
    dtypes = tuple(getattr(torch, name) for name in args.dtypes) if args.dtypes else DTYPES
    if args.device == "cuda" and not torch.cuda.is_available():
        print(
            "sanitize_cases: no GPU visible to torch; use --device cpu to run the fallbacks", file=sys.stderr
        )
        return 2
    device = torch.device(args.device)
    use_kernel = args.device == "cuda"
    torch.manual_seed(0)
    start = time.perf_counter()
    count = 0
    for group in args.only or GROUPS:
        group_start, group_count = time.perf_counter(), 0
        for name, run in GROUPS[group](device, use_kernel, dtypes):
            run()
            group_count += 1
            print(f"  ran {name}", flush=True)
        if device.type == "cuda":
            torch.cuda.synchronize()  # a kernel's fault is reported against its group
        print(f"{group}: {group_count} cases in {time.perf_counter() - group_start:.1f}s", flush=True)
        count += group_count
    print(f"sanitize_cases: {count} cases on {device.type} in {time.perf_counter() - start:.1f}s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
