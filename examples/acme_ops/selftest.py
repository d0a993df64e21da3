"""Self-tests of acme_rmsnorm (CPU) and acme_rmsnorm_cuda (GPU), named by their builders.

op_builder runs them after an image's build and in its verification (``python -m op_builder
selftest acme_rmsnorm``): each calls the kernel through the front with ``use_kernel=True`` (a
missing kernel is a failure, never a quiet fallback) and compares it with torch's own
``F.rms_norm`` in fp32 on the same rounded inputs (torch < 2.4 has none: then the definition,
in fp64). Rows of 1, 7, 127 and 4097 elements (below, at and past a vector or warp), 37 rows,
and leading dimensions.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor

from acme_ops.rmsnorm import rms_norm
from op_builder.selftest import SelfTestContext, Tolerance

COLS = (1, 7, 127, 4097)
SHAPES = [(37, cols) for cols in COLS] + [(3, 5, 127)]
EPS = 1e-6


def run_cpu(ctx: SelfTestContext) -> None:
    _run(ctx, (torch.float32, torch.float16, torch.bfloat16))


def run_cuda(ctx: SelfTestContext) -> None:
    # ctx.dtypes: fp32 and fp16, and bf16 where this build has bf16 kernels (module.has_bf16()).
    _run(ctx, ctx.dtypes)


def _run(ctx: SelfTestContext, dtypes: Sequence[torch.dtype]) -> None:
    for dtype in dtypes:
        for shape in SHAPES:
            gen = torch.Generator(device=ctx.device).manual_seed(shape[-1])
            x = (torch.randn(shape, device=ctx.device, generator=gen) * 3 + 0.5).to(dtype)
            weight = torch.randn(shape[-1], device=ctx.device, generator=gen).to(dtype)
            y = rms_norm(x, weight, EPS, use_kernel=True)
            label = f"rms_norm {str(dtype).removeprefix('torch.')} {'x'.join(map(str, shape))}"
            ctx.compare(label, y, _reference(x, weight), _tolerance(dtype))


def _reference(x: Tensor, weight: Tensor) -> Tensor:
    rms_norm_op = getattr(torch.nn.functional, "rms_norm", None)
    if rms_norm_op is not None:
        return rms_norm_op(x.float(), (x.shape[-1],), weight.float(), EPS)  # type: ignore[no-any-return]
    x64 = x.double()
    return x64 * torch.rsqrt(x64.square().mean(-1, keepdim=True) + EPS) * weight.double()


def _tolerance(dtype: torch.dtype) -> Tolerance:
    """fp32: the kernel and torch sum the squares in another order (~1e-6 relative). fp16 /
    bf16: the same fp32 result rounded once to the output dtype, half an ulp, so two ulps of
    the largest output leave a margin while a wrong formula or a missed row is off by far more."""
    if dtype == torch.float32:
        return Tolerance(1e-5, 1e-6)
    return Tolerance(2 * torch.finfo(dtype).eps, 1e-6)
