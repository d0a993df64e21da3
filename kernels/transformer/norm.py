"""LayerNorm backed by the ``transformer`` op: ``layer_norm`` and ``FusedLayerNorm`` (see the
package's conventions in ``kernels.transformer``).

LayerNorm's statistics never cancel: the variance comes from two passes (the mean, then the
centred values; in double in the kernels for rows too long for registers), so rows whose values
sit far from their mean stay within twice ``F.layer_norm``'s fp32 error.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from types import ModuleType
from typing import Any

import torch
from torch import Tensor, nn

from kernels.transformer._op import OP, grad_or_none, math_dtype

__all__ = ["FusedLayerNorm", "layer_norm"]


# ----------------------------------------------------------------------------- LayerNorm


def _ln_forward_torch(
    x: Tensor, weight: Tensor | None, bias: Tensor | None, eps: float
) -> tuple[Tensor, Tensor, Tensor]:
    """Two passes in float64, as the kernels' long-row path: the mean m, then over the centred
    values d = x - m both the mean of d (the rounding left in m, ~0) and of d^2, var = mean(d^2)
    - mean(d)^2, where the subtracted term is at rounding level: nothing cancels. A one-pass
    E[d^2] - E[d]^2 over d = x - x[0] cancels when x[0] sits far from the mean (a row of N(0, 1)
    with one 300 first: 1e-1 off at 16384 columns). y is taken in float64 and rounded once.

    Float64 throughout, the mean's sum and d included, because for inputs of fp32 or less no
    sum can overflow there (n * FLT_MAX << DBL_MAX) nor any square (FLT_MAX^2 ~ 1.2e77): rows of
    1e35, of +-1e19 (var 1e38) or of values near FLT_MAX with mixed signs get the statistics
    F.layer_norm has in float64. Summed in fp32, 4096 values of 1e35 overflowed and the row came
    out NaN (torch's fp32 CPU LayerNorm does the same; beta is the answer). It also keeps the
    fallback within F.layer_norm's fp32 error on any CPU (in fp32 the sums land at its level,
    sometimes twice it). Float64 inputs get torch's own range: past ~1e154 their squares
    overflow, as F.layer_norm's do."""
    dt = math_dtype(x)
    n = x.shape[-1]
    if n == 0:
        # Rows of no elements: y is as empty as F.layer_norm's; the statistics of nothing are
        # NaN (the backward only broadcasts them against the empty rows).
        stat = torch.full((x.shape[0],), math.nan, dtype=dt, device=x.device)
        return torch.empty_like(x), stat, stat.clone()
    xd = x.double()
    row_mean = xd.sum(-1) / n
    d = xd - row_mean[:, None]
    residue = d.sum(-1) / n
    var = ((d * d).sum(-1) / n - residue * residue).clamp_min(0.0)
    rstd = torch.rsqrt(var + eps)
    y = (d - residue[:, None]) * rstd[:, None]
    if weight is not None:
        y = y * weight.double()
    if bias is not None:
        y = y + bias.double()
    return y.to(x.dtype), (row_mean + residue).to(dt), rstd.to(dt)


def _ln_backward_torch(
    dy: Tensor, x: Tensor, weight: Tensor | None, mean: Tensor, rstd: Tensor, dx_add: Tensor | None = None
) -> tuple[Tensor, Tensor, Tensor]:
    """(dx, dweight, dbias) in the math dtype except dx; ``dx_add`` (the residual variant's
    gradient of its returned sum) is added to dx before dx is rounded, as the kernel does."""
    dt = math_dtype(x)
    xhat = (x.to(dt) - mean[:, None]) * rstd[:, None]
    d = dy.to(dt)
    dyg = d * weight.to(dt) if weight is not None else d
    c1 = dyg.mean(-1, keepdim=True)
    c2 = (dyg * xhat).mean(-1, keepdim=True)
    dx = rstd[:, None] * (dyg - c1 - xhat * c2)
    if dx_add is not None:
        dx = dx + dx_add.to(dt)
    return dx.to(x.dtype), (d * xhat).sum(0), d.sum(0)


class _LayerNormFunction(torch.autograd.Function):
    """x: [rows, cols] contiguous. ``module`` None selects the PyTorch implementation."""

    @staticmethod
    def forward(
        ctx: Any, x: Tensor, weight: Tensor | None, bias: Tensor | None, eps: float, module: ModuleType | None
    ) -> Tensor:
        if module is not None:
            y, mean, rstd = module.layer_norm_forward(x, weight, bias, eps)
        else:
            y, mean, rstd = _ln_forward_torch(x, weight, bias, eps)
        ctx.save_for_backward(x, weight, mean, rstd)
        ctx.module = module
        ctx.has_bias = bias is not None
        ctx.bias_dtype = bias.dtype if bias is not None else x.dtype
        return y  # type: ignore[no-any-return]

    @staticmethod
    def backward(ctx: Any, dy: Tensor) -> tuple[Tensor | None, ...]:
        x, weight, mean, rstd = ctx.saved_tensors
        module: ModuleType | None = ctx.module
        dy = dy.contiguous()
        affine = weight is not None or ctx.has_bias
        if module is not None:
            dx, dweight, dbias = module.layer_norm_backward(dy, x, weight, mean, rstd, affine)
        else:
            dx, dweight, dbias = _ln_backward_torch(dy, x, weight, mean, rstd)
            dweight = dweight.to(weight.dtype) if weight is not None else None
            dbias = dbias.to(ctx.bias_dtype)
        return (
            grad_or_none(ctx.needs_input_grad[0], dx),
            grad_or_none(ctx.needs_input_grad[1] and weight is not None, dweight),
            grad_or_none(ctx.needs_input_grad[2] and ctx.has_bias, dbias),
            None,
            None,
        )


def _normalized_rows(
    fn: str, x: Tensor, normalized_shape: int | Sequence[int], params: dict[str, Tensor | None]
) -> tuple[int, int]:
    """(rows, row length) of x as [rows, elements of ``normalized_shape``] after checking that
    x ends with that shape and every given parameter has it; a ValueError naming ``fn``
    otherwise. The rows are the leading dims' product, not ``numel // cols``: a normalized
    shape with a 0 in it (rows of no elements, which F.layer_norm accepts) leaves
    ``reshape(-1, 0)`` nothing to infer the rows from."""
    shape = (normalized_shape,) if isinstance(normalized_shape, int) else tuple(normalized_shape)
    if tuple(x.shape[x.dim() - len(shape) :]) != shape:
        raise ValueError(f"{fn}: input of shape {tuple(x.shape)} does not end with {shape}")
    for name, param in params.items():
        if param is not None and tuple(param.shape) != shape:
            raise ValueError(f"{fn}: {name} has shape {tuple(param.shape)}, expected {shape}")
    return math.prod(x.shape[: x.dim() - len(shape)]), math.prod(shape)


def _as_vector(param: Tensor | None, cols: int) -> Tensor | None:
    return param.reshape(cols).contiguous() if param is not None else None


def _kernel_for(
    fn: str, tensors: list[Tensor], params: list[Tensor], use_kernel: bool | None, what: str
) -> ModuleType | None:
    """The module when the kernels can run ``tensors`` (of one dtype) with ``params``."""
    module = OP.resolve([*tensors, *params], use_kernel)
    if module is not None and any(t.dtype != tensors[0].dtype for t in params):
        module = None  # mixed dtypes (e.g. fp32 weights under autocast): the kernel takes one dtype
        if use_kernel:
            raise RuntimeError(f"transformer: {fn} kernels need {what} in the input's dtype")
    return module


def layer_norm(
    x: Tensor,
    normalized_shape: int | Sequence[int],
    weight: Tensor | None = None,
    bias: Tensor | None = None,
    eps: float = 1e-5,
    use_kernel: bool | None = None,
) -> Tensor:
    """``F.layer_norm`` over the trailing ``normalized_shape`` dims."""
    rows, cols = _normalized_rows("layer_norm", x, normalized_shape, {"weight": weight, "bias": bias})
    x2 = x.reshape(rows, cols).contiguous()
    w, b = _as_vector(weight, cols), _as_vector(bias, cols)
    params = [t for t in (w, b) if t is not None]
    module = _kernel_for("layer_norm", [x2], params, use_kernel, "weight and bias")
    y: Tensor = _LayerNormFunction.apply(x2, w, b, eps, module)  # type: ignore[no-untyped-call]
    return y.reshape(x.shape)


class _AffineNorm(nn.Module):
    """The learned weight and bias of the LayerNorm modules, as ``nn.LayerNorm`` has them."""

    def __init__(
        self,
        normalized_shape: int | Sequence[int],
        eps: float = 1e-5,
        elementwise_affine: bool = True,
        bias: bool = True,
        device: torch.device | str | None = None,
        dtype: torch.dtype | None = None,
        use_kernel: bool | None = None,
    ) -> None:
        super().__init__()
        shape = (normalized_shape,) if isinstance(normalized_shape, int) else tuple(normalized_shape)
        self.normalized_shape = shape
        self.eps = eps
        self.use_kernel = use_kernel
        factory = {"device": device, "dtype": dtype}
        self.weight = nn.Parameter(torch.ones(shape, **factory)) if elementwise_affine else None  # type: ignore[arg-type]
        self.bias = nn.Parameter(torch.zeros(shape, **factory)) if elementwise_affine and bias else None  # type: ignore[arg-type]

    def extra_repr(self) -> str:
        return f"{self.normalized_shape}, eps={self.eps}, elementwise_affine={self.weight is not None}"


class FusedLayerNorm(_AffineNorm):
    """Drop-in for ``nn.LayerNorm`` backed by the fused kernels."""

    def forward(self, x: Tensor) -> Tensor:
        return layer_norm(x, self.normalized_shape, self.weight, self.bias, self.eps, self.use_kernel)
