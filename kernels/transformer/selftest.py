"""Self-test of the ``transformer`` op: LayerNorm (plain and of a residual sum), bias + GeLU
and scaled masked softmax, forward and backward, through ``kernels.transformer`` with
``use_kernel=True``.

References are torch's own ops run in fp32 on the same (rounded) inputs, differentiated by
autograd: ``F.layer_norm``, ``F.layer_norm(x + b + r)`` (the sum rounded to the input dtype,
as the op documents, with its gradient passed through unrounded), ``F.gelu(x + b)``, and
``torch.softmax`` over the scaled input with hidden keys filled with -inf (a row with every
key hidden is zeros, as the op documents).
Hidden sizes 1, 7, 127 and 4097 over 37 rows, which is no multiple of the rows a block
handles; LayerNorm also runs once over ~1M elements in fp32.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor

from kernels.transformer.gelu import bias_gelu
from kernels.transformer.norm import layer_norm
from kernels.transformer.residual_norm import residual_layer_norm
from kernels.transformer.softmax import scaled_masked_softmax
from op_builder.selftest.harness import EXACT, GPU_TOLERANCE, SelfTestContext

HIDDEN = (1, 7, 127, 4097)
ROWS = 37
LARGE = (257, 4097)  # ~1.05M elements, fp32 only
SCALE = 0.125


def _name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


def _inputs(ctx: SelfTestContext, dtype: torch.dtype, rows: int, cols: int) -> list[Tensor]:
    """x (mean 0.5, std 2: LayerNorm must not lose the small spread to the mean), weight, bias, dy."""
    gen = torch.Generator(device=ctx.device).manual_seed(rows * 10_000 + cols)
    x = torch.randn(rows, cols, device=ctx.device, generator=gen) * 2 + 0.5
    w = torch.randn(cols, device=ctx.device, generator=gen)
    b = torch.randn(cols, device=ctx.device, generator=gen)
    dy = torch.randn(rows, cols, device=ctx.device, generator=gen)
    return [t.to(dtype) for t in (x, w, b, dy)]


def _layer_norm(ctx: SelfTestContext, dtype: torch.dtype, rows: int, cols: int) -> None:
    x, w, b, dy = _inputs(ctx, dtype, rows, cols)
    leaves = [t.clone().requires_grad_(True) for t in (x, w, b)]
    y = layer_norm(leaves[0], cols, leaves[1], leaves[2], use_kernel=True)
    dx, dw, db = torch.autograd.grad(y, leaves, dy)
    ref_leaves = [t.float().requires_grad_(True) for t in (x, w, b)]
    ref = F.layer_norm(ref_leaves[0], (cols,), ref_leaves[1], ref_leaves[2])
    ref_dx, ref_dw, ref_db = torch.autograd.grad(ref, ref_leaves, dy.float())
    tol = GPU_TOLERANCE[dtype]
    label = f"layer_norm {_name(dtype)} {rows}x{cols}"
    # dweight and dbias sum over rows: their absolute error grows like sqrt(rows).
    summed = 4 * math.sqrt(rows)
    ctx.compare(f"{label} y", y, ref, tol)
    ctx.compare(f"{label} dbias", db, ref_db, tol, scale=summed)
    if cols == 1:
        # x - mean is exactly 0: dx is 0, and the reference's dweight is rounding noise
        # amplified by rstd = 1 / sqrt(eps); only y and dbias mean anything here.
        return
    ctx.compare(f"{label} dx", dx, ref_dx, tol, scale=4)
    ctx.compare(f"{label} dweight", dw, ref_dw, tol, scale=summed)


def _residual_layer_norm(ctx: SelfTestContext, dtype: torch.dtype, rows: int, cols: int) -> None:
    """With a hidden bias and the sum returned: both outputs and their gradients flow back."""
    x, w, b, dy = _inputs(ctx, dtype, rows, cols)
    gen = torch.Generator(device=ctx.device).manual_seed(rows * 10_000 + cols + 1)
    r = (torch.randn(rows, cols, device=ctx.device, generator=gen) * 2 - 0.3).to(dtype)
    hb = (torch.randn(cols, device=ctx.device, generator=gen) * 0.5).to(dtype)
    dsum = torch.randn(rows, cols, device=ctx.device, generator=gen).to(dtype)
    leaves = [t.clone().requires_grad_(True) for t in (x, r, hb, w, b)]
    y, s = residual_layer_norm(
        leaves[0], leaves[1], cols, leaves[3], leaves[4], leaves[2], return_sum=True, use_kernel=True
    )
    grads = torch.autograd.grad((y, s), leaves, (dy, dsum))
    ref_leaves = [t.float().requires_grad_(True) for t in (x, r, hb, w, b)]
    s32 = ref_leaves[0] + ref_leaves[2] + ref_leaves[1]
    ref_s = s32 + (s32.to(dtype).float() - s32).detach()  # the rounded value, the fp32 gradient
    ref = F.layer_norm(ref_s, (cols,), ref_leaves[3], ref_leaves[4])
    ref_grads = torch.autograd.grad((ref, ref_s), ref_leaves, (dy.float(), dsum.float()))
    tol = GPU_TOLERANCE[dtype]
    label = f"residual_layer_norm {_name(dtype)} {rows}x{cols}"
    summed = 4 * math.sqrt(rows)
    ctx.compare(f"{label} y", y, ref, tol)
    ctx.compare(f"{label} sum", s, ref_s, EXACT)  # fp32 adds in torch's order, rounded once
    ctx.compare(f"{label} dbias", grads[4], ref_grads[4], tol, scale=summed)
    if cols == 1:
        # As in _layer_norm: LayerNorm passes back exactly 0 (torch's is noise), so dx and
        # dresidual are the sum's own gradient.
        ctx.compare(f"{label} dx", grads[0], dsum, EXACT)
        return
    for i, name in enumerate(("dx", "dresidual")):
        ctx.compare(f"{label} {name}", grads[i], ref_grads[i], tol, scale=4)
    for i, name in ((2, "dhidden_bias"), (3, "dweight")):
        ctx.compare(f"{label} {name}", grads[i], ref_grads[i], tol, scale=summed)


def _bias_gelu(ctx: SelfTestContext, dtype: torch.dtype, cols: int, approximate: str) -> None:
    x, _, b, dy = _inputs(ctx, dtype, ROWS, cols)
    leaves = [x.clone().requires_grad_(True), b.clone().requires_grad_(True)]
    y = bias_gelu(leaves[0], leaves[1], approximate, use_kernel=True)  # type: ignore[arg-type]
    dx, db = torch.autograd.grad(y, leaves, dy)
    ref_leaves = [x.float().requires_grad_(True), b.float().requires_grad_(True)]
    ref = F.gelu(ref_leaves[0] + ref_leaves[1], approximate=approximate)
    ref_dx, ref_db = torch.autograd.grad(ref, ref_leaves, dy.float())
    tol = GPU_TOLERANCE[dtype]
    label = f"bias_gelu({approximate}) {_name(dtype)} {ROWS}x{cols}"
    ctx.compare(f"{label} y", y, ref, tol)
    ctx.compare(f"{label} dx", dx, ref_dx, tol)
    ctx.compare(f"{label} dbias", db, ref_db, tol, scale=4 * math.sqrt(ROWS))


def _causal(q_len: int, k_len: int, device: torch.device) -> Tensor:
    """Key j hidden from query i when j > i + (k_len - q_len), as the op defines causality."""
    q = torch.arange(q_len, device=device)[:, None]
    k = torch.arange(k_len, device=device)[None, :]
    return k > q + (k_len - q_len)


def _softmax(ctx: SelfTestContext, dtype: torch.dtype, shape: tuple[int, ...], masked: bool) -> None:
    batch, _, q_len, k_len = shape
    gen = torch.Generator(device=ctx.device).manual_seed(k_len)
    x = (torch.randn(shape, device=ctx.device, generator=gen) * 3).to(dtype)
    dy = torch.randn(shape, device=ctx.device, generator=gen).to(dtype)
    mask = None
    hidden = torch.zeros(1, 1, q_len, k_len, dtype=torch.bool, device=ctx.device)
    if masked:
        mask = torch.rand(batch, 1, q_len, k_len, device=ctx.device, generator=gen) < 0.3
        mask[0, 0, 1] = True  # a row with every key hidden: zeros, not NaN
        hidden = hidden | mask | _causal(q_len, k_len, ctx.device)
    leaf = x.clone().requires_grad_(True)
    y = scaled_masked_softmax(leaf, mask, scale=SCALE, causal=masked, use_kernel=True)
    (dx,) = torch.autograd.grad(y, leaf, dy)
    ref_leaf = x.float().requires_grad_(True)
    ref = torch.softmax((ref_leaf * SCALE).masked_fill(hidden, -math.inf), dim=-1).nan_to_num(0.0)
    (ref_dx,) = torch.autograd.grad(ref, ref_leaf, dy.float())
    tol = GPU_TOLERANCE[dtype]
    label = f"softmax{'(mask, causal)' if masked else ''} {_name(dtype)} {'x'.join(map(str, shape))}"
    ctx.compare(f"{label} y", y, ref, tol)
    ctx.compare(f"{label} dx", dx, ref_dx.nan_to_num(0.0), tol)


def run_transformer(ctx: SelfTestContext) -> None:
    for dtype in ctx.dtypes:
        for cols in HIDDEN:
            _layer_norm(ctx, dtype, ROWS, cols)
            _residual_layer_norm(ctx, dtype, ROWS, cols)
            for approximate in ("none", "tanh"):
                _bias_gelu(ctx, dtype, cols, approximate)
            _softmax(ctx, dtype, (2, 3, 5, cols), masked=True)
        _softmax(ctx, dtype, (7, 3, 37, 31), masked=False)  # rows: no multiple of a block's
    _layer_norm(ctx, torch.float32, *LARGE)
