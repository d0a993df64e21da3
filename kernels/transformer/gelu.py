"""Bias + GeLU, ``F.gelu(x + bias)``, backed by the ``transformer`` op: ``bias_gelu`` and
``FusedBiasGelu`` (see the package's conventions in ``kernels.transformer``)."""

from __future__ import annotations

import math
from types import ModuleType
from typing import Any, Literal

import torch
from torch import Tensor, nn

from kernels.transformer._op import OP, grad_or_none, math_dtype

__all__ = ["Approximate", "FusedBiasGelu", "bias_gelu"]

Approximate = Literal["none", "tanh"]

_SQRT_HALF = 1.0 / math.sqrt(2.0)
_INV_SQRT_2PI = 1.0 / math.sqrt(2.0 * math.pi)
_SQRT_2_OVER_PI = math.sqrt(2.0 / math.pi)
_TANH_COEFF = 0.044715


def _gelu_torch(z: Tensor, approximate: Approximate) -> Tensor:
    if approximate == "tanh":
        return 0.5 * z * (1.0 + torch.tanh(_SQRT_2_OVER_PI * (z + _TANH_COEFF * z * z * z)))
    return 0.5 * z * (1.0 + torch.erf(z * _SQRT_HALF))


def _gelu_grad_torch(z: Tensor, approximate: Approximate) -> Tensor:
    if approximate == "tanh":
        t = torch.tanh(_SQRT_2_OVER_PI * (z + _TANH_COEFF * z * z * z))
        return 0.5 * (1.0 + t) + 0.5 * z * (1.0 - t * t) * _SQRT_2_OVER_PI * (1.0 + 3.0 * _TANH_COEFF * z * z)
    return 0.5 * (1.0 + torch.erf(z * _SQRT_HALF)) + z * _INV_SQRT_2PI * torch.exp(-0.5 * z * z)


class _BiasGeluFunction(torch.autograd.Function):
    """x: [rows, cols] contiguous, bias: [cols]."""

    @staticmethod
    def forward(
        ctx: Any, x: Tensor, bias: Tensor, approximate: Approximate, module: ModuleType | None
    ) -> Tensor:
        ctx.save_for_backward(x, bias)
        ctx.approximate = approximate
        ctx.module = module
        if module is not None:
            return module.bias_gelu_forward(x, bias, approximate)  # type: ignore[no-any-return]
        dt = math_dtype(x)
        return _gelu_torch(x.to(dt) + bias.to(dt), approximate).to(x.dtype)

    @staticmethod
    def backward(ctx: Any, dy: Tensor) -> tuple[Tensor | None, ...]:
        x, bias = ctx.saved_tensors
        module: ModuleType | None = ctx.module
        dy = dy.contiguous()
        if module is not None:
            dx, dbias = module.bias_gelu_backward(dy, x, bias, ctx.approximate)
        else:
            dt = math_dtype(x)
            dz = dy.to(dt) * _gelu_grad_torch(x.to(dt) + bias.to(dt), ctx.approximate)
            dx, dbias = dz.to(x.dtype), dz.sum(0).to(bias.dtype)
        return (
            grad_or_none(ctx.needs_input_grad[0], dx),
            grad_or_none(ctx.needs_input_grad[1], dbias),
            None,
            None,
        )


def bias_gelu(
    x: Tensor, bias: Tensor, approximate: Approximate = "none", use_kernel: bool | None = None
) -> Tensor:
    """``F.gelu(x + bias, approximate=approximate)`` with bias of shape ``[x.shape[-1]]``."""
    if approximate not in ("none", "tanh"):
        raise ValueError(f"bias_gelu: approximate must be 'none' or 'tanh', got {approximate!r}")
    if x.dim() == 0:
        raise ValueError("bias_gelu: x must have at least one dimension (the bias's)")
    cols = x.shape[-1]
    if tuple(bias.shape) != (cols,):
        raise ValueError(f"bias_gelu: bias has shape {tuple(bias.shape)}, expected ({cols},)")
    # The rows are the leading dims' product: with no columns reshape(-1, 0) has nothing to
    # infer them from, where F.gelu returns an empty tensor.
    x2 = x.reshape(math.prod(x.shape[:-1]), cols).contiguous()
    b = bias.contiguous()
    module = OP.resolve([x2, b], use_kernel)
    if module is not None and b.dtype != x2.dtype:
        module = None
        if use_kernel:
            raise RuntimeError("transformer: bias_gelu kernels need the bias in the input's dtype")
    y: Tensor = _BiasGeluFunction.apply(x2, b, approximate, module)  # type: ignore[no-untyped-call]
    return y.reshape(x.shape)


class FusedBiasGelu(nn.Module):
    """``gelu(x + bias)`` with a learned bias of size ``features`` (the last dim of x)."""

    def __init__(
        self,
        features: int,
        approximate: Approximate = "none",
        device: torch.device | str | None = None,
        dtype: torch.dtype | None = None,
        use_kernel: bool | None = None,
    ) -> None:
        super().__init__()
        if approximate not in ("none", "tanh"):
            raise ValueError(f"approximate must be 'none' or 'tanh', got {approximate!r}")
        self.approximate: Approximate = approximate
        self.use_kernel = use_kernel
        self.bias = nn.Parameter(torch.zeros(features, device=device, dtype=dtype))

    def forward(self, x: Tensor) -> Tensor:
        return bias_gelu(x, self.bias, self.approximate, self.use_kernel)

    def extra_repr(self) -> str:
        return f"features={self.bias.numel()}, approximate={self.approximate!r}"
