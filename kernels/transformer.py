"""Transformer building blocks backed by the ``transformer`` op: LayerNorm (plain, and of a
residual sum), bias + GeLU, and scaled masked softmax, each forward and backward.

Functions (``layer_norm``, ``residual_layer_norm``, ``bias_gelu``, ``scaled_masked_softmax``)
and modules (``FusedLayerNorm``, ``FusedResidualLayerNorm``, ``FusedBiasGelu``,
``FusedScaledMaskedSoftmax``). On CUDA / ROCm tensors of fp32, fp16 or bf16 they run the
compiled kernels (fp32 math; built with nvcc's fast math, which flushes fp32 values below
about 1.2e-38 to zero, so inputs that small, possible in fp32 and bf16, can differ from
torch's). Otherwise (CPU tensors, float64, op not available) they run
PyTorch code that implements the same formulas, forward and backward, and warn once with
the reason.

LayerNorm's statistics never cancel: the variance comes from two passes (the mean, then the
centred values) or, in the kernels for rows too long for registers, from Welford / Chan moments,
so rows whose values sit far from their mean stay within twice ``F.layer_norm``'s fp32 error.

Conventions: LayerNorm normalizes over the trailing ``normalized_shape`` dims;
``approximate`` is ``"none"`` (erf) or ``"tanh"`` as in ``F.gelu``; the softmax mask is
boolean with True meaning *masked out*, broadcastable to the input, and ``causal``
hides key j from query i when j > i + (k_len - q_len). A row with every key hidden
comes out as zeros (not NaN); a row with a visible +inf or NaN score is NaN, as in
``torch.softmax``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from types import ModuleType
from typing import Any, Literal, overload

import torch
from torch import Tensor, nn

from kernels._gpu_load import GpuOp

__all__ = [
    "FusedBiasGelu",
    "FusedLayerNorm",
    "FusedResidualLayerNorm",
    "FusedScaledMaskedSoftmax",
    "bias_gelu",
    "layer_norm",
    "residual_layer_norm",
    "scaled_masked_softmax",
]

Approximate = Literal["none", "tanh"]
_OP = GpuOp("transformer")


def _math_dtype(t: Tensor) -> torch.dtype:
    """fp32 math like the kernels; fp64 stays fp64 (gradcheck, reference runs)."""
    return torch.float64 if t.dtype == torch.float64 else torch.float32


def _grad_or_none(needed: bool, value: Tensor | None) -> Tensor | None:
    return value if needed else None


# ----------------------------------------------------------------------------- LayerNorm


def _ln_forward_torch(
    x: Tensor, weight: Tensor | None, bias: Tensor | None, eps: float
) -> tuple[Tensor, Tensor, Tensor]:
    """Two passes, as the kernels: the mean m, then over the centred values d = x - m both the
    mean of d (the rounding left in m, ~0) and of d^2, var = mean(d^2) - mean(d)^2, where the
    subtracted term is at rounding level: nothing cancels. A one-pass E[d^2] - E[d]^2 over
    d = x - x[0] cancels when x[0] sits far from the mean (a row of N(0, 1) with one 300 first:
    1e-1 off at 16384 columns).

    m and d are formed in the math dtype (d exactly where |mean| >> std); the sums and y are
    taken in float64 and rounded once, which keeps the fallback within F.layer_norm's fp32 error
    on any CPU (in fp32 they land at its level, sometimes twice it)."""
    xf = x.to(_math_dtype(x))
    n = xf.shape[-1]
    if n == 0:
        # Rows of no elements: y is as empty as F.layer_norm's; the statistics of nothing are
        # NaN (the backward only broadcasts them against the empty rows).
        stat = torch.full((xf.shape[0],), math.nan, dtype=xf.dtype, device=xf.device)
        return torch.empty_like(x), stat, stat.clone()
    row_mean = xf.sum(-1) / n
    d = (xf - row_mean[:, None]).double()
    residue = d.sum(-1) / n
    var = ((d * d).sum(-1) / n - residue * residue).clamp_min(0.0)
    rstd = torch.rsqrt(var + eps)
    y = (d - residue[:, None]) * rstd[:, None]
    if weight is not None:
        y = y * weight.double()
    if bias is not None:
        y = y + bias.double()
    return y.to(x.dtype), (row_mean + residue).to(xf.dtype), rstd.to(xf.dtype)


def _ln_backward_torch(
    dy: Tensor, x: Tensor, weight: Tensor | None, mean: Tensor, rstd: Tensor, dx_add: Tensor | None = None
) -> tuple[Tensor, Tensor, Tensor]:
    """(dx, dweight, dbias) in the math dtype except dx; ``dx_add`` (the residual variant's
    gradient of its returned sum) is added to dx before dx is rounded, as the kernel does."""
    dt = _math_dtype(x)
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
            _grad_or_none(ctx.needs_input_grad[0], dx),
            _grad_or_none(ctx.needs_input_grad[1] and weight is not None, dweight),
            _grad_or_none(ctx.needs_input_grad[2] and ctx.has_bias, dbias),
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
    module = _OP.resolve([*tensors, *params], use_kernel)
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


# ----------------------------------------------------------------------------- residual LayerNorm


def _residual_sum_torch(x: Tensor, residual: Tensor, hidden_bias: Tensor | None) -> Tensor:
    """As the kernel: ``(x + hidden_bias) + residual`` in the math dtype, rounded once to x's
    dtype (no hidden bias: ``x + residual``, never ``+ 0``, which would turn -0.0 into +0.0)."""
    dt = _math_dtype(x)
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
            dhidden = ds.sum(0, dtype=_math_dtype(ds)).to(ctx.hidden_bias_dtype)
        return (
            _grad_or_none(needs[0], ds),
            _grad_or_none(needs[1], dres if both else ds),
            dhidden,
            _grad_or_none(needs[3] and weight is not None, dweight),
            _grad_or_none(needs[4] and ctx.has_bias, dbias),
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


# ----------------------------------------------------------------------------- bias + GeLU

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
        dt = _math_dtype(x)
        return _gelu_torch(x.to(dt) + bias.to(dt), approximate).to(x.dtype)

    @staticmethod
    def backward(ctx: Any, dy: Tensor) -> tuple[Tensor | None, ...]:
        x, bias = ctx.saved_tensors
        module: ModuleType | None = ctx.module
        dy = dy.contiguous()
        if module is not None:
            dx, dbias = module.bias_gelu_backward(dy, x, bias, ctx.approximate)
        else:
            dt = _math_dtype(x)
            dz = dy.to(dt) * _gelu_grad_torch(x.to(dt) + bias.to(dt), ctx.approximate)
            dx, dbias = dz.to(x.dtype), dz.sum(0).to(bias.dtype)
        return (
            _grad_or_none(ctx.needs_input_grad[0], dx),
            _grad_or_none(ctx.needs_input_grad[1], dbias),
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
    module = _OP.resolve([x2, b], use_kernel)
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


# ----------------------------------------------------------------------------- softmax


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
            s = x.to(_math_dtype(x)) * scale
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
            dt = _math_dtype(y)
            yf, df = y.to(dt), dy.to(dt)
            dx = (ctx.scale * yf * (df - (df * yf).sum(-1, keepdim=True))).to(y.dtype)
        return _grad_or_none(ctx.needs_input_grad[0], dx), None, None, None, None


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
    module = _OP.resolve([x4], use_kernel)
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
