"""LayerNorm of a residual sum, ``layer_norm(x + hidden_bias + residual)``, backed by the
``transformer`` op: ``residual_layer_norm`` and ``FusedResidualLayerNorm`` (see the package's
conventions in ``kernels.transformer``)."""

from __future__ import annotations

from collections.abc import Sequence
from types import ModuleType
from typing import Any, Literal, overload

import torch
from torch import Tensor

from kernels.transformer._op import grad_or_none, math_dtype
from kernels.transformer.norm import (
    _AffineNorm,
    _as_vector,
    _kernel_for,
    _ln_backward_torch,
    _ln_forward_torch,
    _normalized_rows,
)

__all__ = ["FusedResidualLayerNorm", "residual_layer_norm"]


def _residual_sum_torch(x: Tensor, residual: Tensor, hidden_bias: Tensor | None) -> Tensor:
    """As the kernel: ``(x + hidden_bias) + residual`` in the math dtype, rounded once to x's
    dtype (no hidden bias: ``x + residual``, never ``+ 0``, which would turn -0.0 into +0.0)."""
    dt = math_dtype(x)
    s = x.to(dt)
    if hidden_bias is not None:
        s = s + hidden_bias.to(dt)
    return (s + residual.to(dt)).to(x.dtype)


class _ResidualLayerNormFunction(torch.autograd.Function):
    """x, residual: [rows, cols] contiguous, one dtype; hidden_bias, weight, bias: [cols] or
    None. Returns (y, sum). ``module`` None selects the PyTorch implementation."""

    @staticmethod
    def forward(
        ctx: Any,
        x: Tensor,
        residual: Tensor,
        hidden_bias: Tensor | None,
        weight: Tensor | None,
        bias: Tensor | None,
        eps: float,
        module: ModuleType | None,
    ) -> tuple[Tensor, Tensor]:
        if module is not None:
            y, s, mean, rstd = module.residual_layer_norm_forward(x, residual, hidden_bias, weight, bias, eps)
        else:
            s = _residual_sum_torch(x, residual, hidden_bias)
            y, mean, rstd = _ln_forward_torch(s, weight, bias, eps)
        # The rounded sum is the LayerNorm's input: the backward differentiates at it.
        ctx.save_for_backward(s, weight, mean, rstd)
        ctx.module = module
        ctx.has_bias = bias is not None
        ctx.bias_dtype = bias.dtype if bias is not None else x.dtype
        ctx.hidden_bias_dtype = hidden_bias.dtype if hidden_bias is not None else None
        # An output nobody differentiates (the sum, unless returned and used) sends None
        # rather than a tensor of zeros to add.
        ctx.set_materialize_grads(False)
        return y, s

    @staticmethod
    def backward(ctx: Any, dy: Tensor | None, dsum: Tensor | None) -> tuple[Tensor | None, ...]:
        s, weight, mean, rstd = ctx.saved_tensors
        module: ModuleType | None = ctx.module
        # Only the sum differentiated: y passes nothing back, which zeros for dy express.
        dy = torch.zeros_like(s) if dy is None else dy.contiguous()
        dsum = dsum.contiguous() if dsum is not None else None
        affine = weight is not None or ctx.has_bias
        needs = ctx.needs_input_grad
        # x and residual enter the sum alike: one gradient. Both wanting it, each gets a
        # tensor of its own: handed one tensor twice from here, autograd can make both
        # leaves' .grad share storage, and an in-place op on one (clipping, zeroing) would
        # change the other. The kernel writes the second copy as it writes the first.
        both = needs[0] and needs[1]
        if module is not None:
            ds, dres, dweight, dbias = module.residual_layer_norm_backward(
                dy, s, weight, mean, rstd, dsum, affine, both
            )
        else:
            ds, dweight, dbias = _ln_backward_torch(dy, s, weight, mean, rstd, dsum)
            dres = ds.clone() if both else None
            dweight = dweight.to(weight.dtype) if weight is not None else None
            dbias = dbias.to(ctx.bias_dtype)
        dhidden = None
        if needs[2] and ctx.hidden_bias_dtype is not None:
            # The column sums of the rounded gradient, in the math dtype: the kernel path has
            # only that one, and the fallback takes the same so that both agree.
            dhidden = ds.sum(0, dtype=math_dtype(ds)).to(ctx.hidden_bias_dtype)
        return (
            grad_or_none(needs[0], ds),
            grad_or_none(needs[1], dres if both else ds),
            dhidden,
            grad_or_none(needs[3] and weight is not None, dweight),
            grad_or_none(needs[4] and ctx.has_bias, dbias),
            None,
            None,
        )


@overload
def residual_layer_norm(
    x: Tensor,
    residual: Tensor,
    normalized_shape: int | Sequence[int],
    weight: Tensor | None = ...,
    bias: Tensor | None = ...,
    hidden_bias: Tensor | None = ...,
    eps: float = ...,
    return_sum: Literal[False] = ...,
    use_kernel: bool | None = ...,
) -> Tensor: ...


@overload
def residual_layer_norm(
    x: Tensor,
    residual: Tensor,
    normalized_shape: int | Sequence[int],
    weight: Tensor | None = ...,
    bias: Tensor | None = ...,
    hidden_bias: Tensor | None = ...,
    eps: float = ...,
    *,
    return_sum: Literal[True],
    use_kernel: bool | None = ...,
) -> tuple[Tensor, Tensor]: ...


@overload
def residual_layer_norm(
    x: Tensor,
    residual: Tensor,
    normalized_shape: int | Sequence[int],
    weight: Tensor | None = ...,
    bias: Tensor | None = ...,
    hidden_bias: Tensor | None = ...,
    eps: float = ...,
    return_sum: bool = ...,
    use_kernel: bool | None = ...,
) -> Tensor | tuple[Tensor, Tensor]: ...


def residual_layer_norm(
    x: Tensor,
    residual: Tensor,
    normalized_shape: int | Sequence[int],
    weight: Tensor | None = None,
    bias: Tensor | None = None,
    hidden_bias: Tensor | None = None,
    eps: float = 1e-5,
    return_sum: bool = False,
    use_kernel: bool | None = None,
) -> Tensor | tuple[Tensor, Tensor]:
    """LayerNorm of a residual sum in one pass, DeepSpeed's fused bias + residual + LayerNorm
    (``layer_norm_residual_store_pre_ln_res`` with ``return_sum``)::

        sum = x + hidden_bias + residual       # hidden_bias optional
        y = F.layer_norm(sum, normalized_shape, weight, bias, eps)

    Returns y, or (y, sum) with ``return_sum``: the pre-LayerNorm residual stream that a
    pre-LN block carries on to its next residual add. Both are differentiable: x, residual,
    hidden_bias, weight and bias get gradients, and the gradient the returned sum receives
    adds to the one LayerNorm passes back to it.

    Shapes: residual has x's shape; x ends with ``normalized_shape``, which is the shape of
    weight, bias and hidden_bias (for an int, ``[cols]``).

    Dtypes: x and residual have one dtype, that of y and sum. The sum is added in fp32
    (float64 for float64 inputs) as ``(x + hidden_bias) + residual`` and rounded once to
    that dtype. y normalizes the rounded sum, the tensor returned and the one the backward
    differentiates at, so forward and backward are one function of it (for fp16 / bf16,
    ``F.layer_norm(sum.float())``; normalizing the unrounded fp32 sum instead would make y
    and its gradient disagree by the rounding). Statistics and y are fp32 math as in
    ``layer_norm``; the gradients of x and residual are one tensor, rounded once, and
    hidden_bias's is the column sum of it. weight, bias and hidden_bias may have another
    dtype (fp32 parameters under autocast); the kernels take one dtype, so those run the
    PyTorch implementation, and ``use_kernel=True`` raises.
    """
    fn = "residual_layer_norm"
    rows, cols = _normalized_rows(
        fn, x, normalized_shape, {"weight": weight, "bias": bias, "hidden_bias": hidden_bias}
    )
    if not x.is_floating_point():
        raise ValueError(f"{fn}: x must be a floating-point tensor, got {x.dtype}")
    if residual.shape != x.shape:
        raise ValueError(f"{fn}: residual has shape {tuple(residual.shape)}, expected x's {tuple(x.shape)}")
    if residual.dtype != x.dtype:
        raise ValueError(
            f"{fn}: residual is {residual.dtype} but x is {x.dtype}; the sum is stored in their one dtype"
        )
    if residual.device != x.device:
        raise ValueError(f"{fn}: residual is on {residual.device} but x is on {x.device}")
    x2 = x.reshape(rows, cols).contiguous()
    r2 = residual.reshape(rows, cols).contiguous()
    hb, w, b = _as_vector(hidden_bias, cols), _as_vector(weight, cols), _as_vector(bias, cols)
    params = [t for t in (hb, w, b) if t is not None]
    module = _kernel_for(fn, [x2, r2], params, use_kernel, "weight, bias and hidden_bias")
    y, s = _ResidualLayerNormFunction.apply(x2, r2, hb, w, b, eps, module)  # type: ignore[no-untyped-call]
    if return_sum:
        return y.reshape(x.shape), s.reshape(x.shape)
    return y.reshape(x.shape)  # type: ignore[no-any-return]


class FusedResidualLayerNorm(_AffineNorm):
    """``residual_layer_norm`` as a module, with weight and bias as ``FusedLayerNorm``'s.

    The hidden bias is an argument of ``forward``, not a parameter here: it is the bias of
    the layer that produced x (a linear layer that leaves its bias add to this one), and
    that layer owns it. ``return_sum`` makes ``forward`` return (y, sum)."""

    def __init__(
        self,
        normalized_shape: int | Sequence[int],
        eps: float = 1e-5,
        elementwise_affine: bool = True,
        bias: bool = True,
        return_sum: bool = False,
        device: torch.device | str | None = None,
        dtype: torch.dtype | None = None,
        use_kernel: bool | None = None,
    ) -> None:
        super().__init__(normalized_shape, eps, elementwise_affine, bias, device, dtype, use_kernel)
        self.return_sum = return_sum

    def forward(
        self, x: Tensor, residual: Tensor, hidden_bias: Tensor | None = None
    ) -> Tensor | tuple[Tensor, Tensor]:
        return residual_layer_norm(
            x,
            residual,
            self.normalized_shape,
            self.weight,
            self.bias,
            hidden_bias,
            self.eps,
            self.return_sum,
            self.use_kernel,
        )

    def extra_repr(self) -> str:
        return f"{super().extra_repr()}, return_sum={self.return_sum}"
