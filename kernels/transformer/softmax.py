"""Scaled masked softmax backed by the ``transformer`` op: ``scaled_masked_softmax`` and
``FusedScaledMaskedSoftmax`` (see the package's conventions in ``kernels.transformer``)."""

from __future__ import annotations

import math
from types import ModuleType
from typing import Any

import torch
from torch import Tensor, nn

from kernels.transformer._op import OP, grad_or_none, math_dtype

__all__ = ["FusedScaledMaskedSoftmax", "scaled_masked_softmax"]


def _hidden_keys(shape: torch.Size, mask: Tensor | None, causal: bool, device: torch.device) -> Tensor | None:
    """Boolean [..., q_len, k_len] (broadcastable) of keys each query must not see."""
    hidden = mask.to(torch.bool) if mask is not None else None
    if causal:
        q_len, k_len = shape[-2], shape[-1]
        q = torch.arange(q_len, device=device)[:, None]
        k = torch.arange(k_len, device=device)[None, :]
        above = k > q + (k_len - q_len)
        hidden = above if hidden is None else hidden | above
    return hidden


class _SoftmaxFunction(torch.autograd.Function):
    """x: [batch, heads, q_len, k_len] contiguous; mask: [1|batch, 1|heads, q_len, k_len] or None."""

    @staticmethod
    def forward(
        ctx: Any, x: Tensor, mask: Tensor | None, scale: float, causal: bool, module: ModuleType | None
    ) -> Tensor:
        if module is not None:
            y: Tensor = module.softmax_forward(x, mask, scale, causal)
        else:
            s = x.to(math_dtype(x)) * scale
            hidden = _hidden_keys(x.shape, mask, causal, x.device)
            if hidden is not None:
                s = s.masked_fill(hidden, -math.inf)
            row_max = s.amax(-1, keepdim=True)
            # No visible key (max -inf): shift by 0 so the row sums to 0 and comes out as zeros.
            # A visible +inf or NaN keeps its max (+inf or NaN): inf - inf makes the sum NaN and
            # the row NaN, as torch.softmax gives and the kernels do.
            row_max = torch.where(row_max == -math.inf, torch.zeros_like(row_max), row_max)
            e = torch.exp(s - row_max)
            total = e.sum(-1, keepdim=True)
            y = (e / torch.where(total == 0, torch.ones_like(total), total)).to(x.dtype)
        ctx.save_for_backward(y)
        ctx.scale = scale
        ctx.module = module
        return y

    @staticmethod
    def backward(ctx: Any, dy: Tensor) -> tuple[Tensor | None, ...]:
        (y,) = ctx.saved_tensors
        module: ModuleType | None = ctx.module
        dy = dy.contiguous()
        if module is not None:
            dx = module.softmax_backward(dy, y, ctx.scale)
        else:
            dt = math_dtype(y)
            yf, df = y.to(dt), dy.to(dt)
            dx = (ctx.scale * yf * (df - (df * yf).sum(-1, keepdim=True))).to(y.dtype)
        return grad_or_none(ctx.needs_input_grad[0], dx), None, None, None, None


def _as_4d(shape: torch.Size) -> tuple[int, int, int, int]:
    """[..., q, k] as [batch, heads, q, k]: leading dims fold into batch except the last."""
    if len(shape) < 2:
        raise ValueError(f"scaled_masked_softmax: input needs at least 2 dims, got shape {tuple(shape)}")
    lead = tuple(shape[:-2])
    heads = lead[-1] if lead else 1
    batch = math.prod(lead[:-1]) if len(lead) > 1 else 1
    return batch, heads, shape[-2], shape[-1]


def _mask_4d(mask: Tensor, shape: torch.Size, four: tuple[int, int, int, int]) -> Tensor:
    """The mask as the kernel takes it: [1|batch, 1|heads, q, k], contiguous, bool."""
    batch, heads, q_len, k_len = four
    try:
        full = torch.broadcast_shapes(mask.shape, shape)  # type: ignore[no-untyped-call]
    except RuntimeError:
        raise ValueError(
            f"scaled_masked_softmax: mask of shape {tuple(mask.shape)} does not broadcast to {tuple(shape)}"
        ) from None
    if full != shape:
        raise ValueError(f"scaled_masked_softmax: mask of shape {tuple(mask.shape)} would enlarge the input")
    m = mask.to(torch.bool)
    if m.dim() == len(shape) == 4 and m.shape[0] in (1, batch) and m.shape[1] in (1, heads):
        # Keep the broadcast over batch / heads: the kernel indexes it without copies.
        return m.expand(m.shape[0], m.shape[1], q_len, k_len).contiguous()
    return m.expand(shape).reshape(batch, heads, q_len, k_len).contiguous()


def scaled_masked_softmax(
    x: Tensor,
    mask: Tensor | None = None,
    scale: float = 1.0,
    causal: bool = False,
    use_kernel: bool | None = None,
) -> Tensor:
    """softmax(scale * x) over the last dim, with masked-out keys (mask True, or causal) at 0."""
    four = _as_4d(x.shape)
    x4 = x.reshape(four).contiguous()
    m4 = _mask_4d(mask, x.shape, four) if mask is not None else None
    module = OP.resolve([x4], use_kernel)
    y: Tensor = _SoftmaxFunction.apply(x4, m4, float(scale), causal, module)  # type: ignore[no-untyped-call]
    return y.reshape(x.shape)


class FusedScaledMaskedSoftmax(nn.Module):
    """``scaled_masked_softmax`` as a module with a fixed scale and causality."""

    def __init__(self, scale: float = 1.0, causal: bool = False, use_kernel: bool | None = None) -> None:
        super().__init__()
        self.scale = scale
        self.causal = causal
        self.use_kernel = use_kernel

    def forward(self, x: Tensor, mask: Tensor | None = None) -> Tensor:
        return scaled_masked_softmax(x, mask, self.scale, self.causal, self.use_kernel)

    def extra_repr(self) -> str:
        return f"scale={self.scale}, causal={self.causal}"
