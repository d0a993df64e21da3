"""``residual_layer_norm``'s PyTorch fallback (what runs without a GPU) against torch.

The reference is always torch's own ops differentiated by autograd: ``s = x + b + r`` and
``F.layer_norm(s)``. The fallback implements the kernels' formulas (sum added in the math
dtype and rounded once, two-pass LayerNorm statistics, the explicit backward with the sum's
own gradient added to dx), so these tests check the math the kernels implement;
tests/gpu/test_gpu_residual_layer_norm.py checks the kernels against the same references.
"""

from __future__ import annotations

import math
import warnings

import pytest
import torch
import torch.nn.functional as F
from torch import Tensor

from kernels.transformer import FusedResidualLayerNorm, layer_norm, residual_layer_norm

pytestmark = pytest.mark.filterwarnings("ignore:.*using the PyTorch fallback:RuntimeWarning")

# (rtol, atol) of the fallback against torch in each math dtype: the same formulas with
# other summation orders (and two-pass statistics), so a few ulps.
FORWARD_TOL = {torch.float64: (1e-12, 1e-12), torch.float32: (1e-5, 1e-5)}
GRAD_TOL = {torch.float64: (1e-10, 1e-10), torch.float32: (1e-4, 1e-4)}


def _case(
    dtype: torch.dtype, shape: tuple[int, ...], cols: int, seed: int
) -> tuple[Tensor, Tensor, Tensor, Tensor, Tensor]:
    """x, residual (means away from 0, spread 2), hidden bias, weight, bias; each a leaf."""
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(shape, generator=gen) * 2 + 0.5
    r = torch.randn(shape, generator=gen) * 2 - 0.3
    hb = torch.randn(cols, generator=gen) * 0.5
    w = torch.randn(cols, generator=gen)
    b = torch.randn(cols, generator=gen)
    return tuple(t.to(dtype).requires_grad_(True) for t in (x, r, hb, w, b))  # type: ignore[return-value]


def _reference(
    x: Tensor, r: Tensor, hb: Tensor | None, w: Tensor | None, b: Tensor | None, cols: int
) -> tuple[Tensor, Tensor]:
    s = x + hb + r if hb is not None else x + r
    return F.layer_norm(s, (cols,), w, b), s


def _close(actual: Tensor, expected: Tensor, tol: tuple[float, float], atol_scale: float = 1.0) -> None:
    rtol, atol = tol
    torch.testing.assert_close(actual, expected, rtol=rtol, atol=atol * atol_scale)


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
@pytest.mark.parametrize("cols", [1, 7, 127, 768])
@pytest.mark.parametrize("with_hidden_bias", [True, False])
def test_forward_matches_torch(dtype: torch.dtype, cols: int, with_hidden_bias: bool) -> None:
    x, r, hb, w, b = _case(dtype, (3, 5, cols), cols, cols)
    bias = hb if with_hidden_bias else None
    y, s = residual_layer_norm(x, r, cols, w, b, bias, return_sum=True)
    ref_y, ref_s = _reference(x, r, bias, w, b, cols)
    assert y.dtype == s.dtype == dtype and y.shape == s.shape == x.shape
    # Added in the input's own dtype, in torch's order: the same tensor bit for bit.
    assert torch.equal(s, ref_s)
    _close(y, ref_y, FORWARD_TOL[dtype])
    alone = residual_layer_norm(x, r, cols, w, b, bias)
    assert torch.equal(alone, y)


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
@pytest.mark.parametrize("cols", [1, 7, 127, 768])
@pytest.mark.parametrize("return_sum", [True, False])
def test_gradients_match_torch_autograd(dtype: torch.dtype, cols: int, return_sum: bool) -> None:
    leaves = _case(dtype, (4, 3, cols), cols, 100 + cols)
    x, r, hb, w, b = leaves
    gen = torch.Generator().manual_seed(7)
    dy = torch.randn(x.shape, generator=gen).to(dtype)
    dsum = torch.randn(x.shape, generator=gen).to(dtype)
    ref_y, ref_s = _reference(x, r, hb, w, b, cols)
    if return_sum:
        y, s = residual_layer_norm(x, r, cols, w, b, hb, return_sum=True)
        ours = torch.autograd.grad((y, s), leaves, (dy, dsum))
        theirs = torch.autograd.grad((ref_y, ref_s), leaves, (dy, dsum))
    else:
        y = residual_layer_norm(x, r, cols, w, b, hb)
        ours = torch.autograd.grad(y, leaves, dy)
        theirs = torch.autograd.grad(ref_y, leaves, dy)
    rtol, atol = GRAD_TOL[dtype]
    # One column: x - mean is exactly 0 in ours but rounding noise in torch's fp32, times
    # rstd = 1 / sqrt(eps); compare more loosely there, as test_gpu_fallbacks does.
    if cols == 1 and dtype == torch.float32:
        atol = 1e-3
    names = ("x", "residual", "hidden_bias", "weight", "bias")
    for name, a, e in zip(names, ours, theirs):
        # Column sums (hidden_bias, weight, bias) add up 12 rows of such errors.
        scale = 1.0 if name in ("x", "residual") else math.sqrt(12)
        try:
            torch.testing.assert_close(a, e, rtol=rtol, atol=atol * scale)
        except AssertionError as exc:
            raise AssertionError(f"d{name}: {exc}") from None
    assert torch.equal(ours[0], ours[1])  # x and residual enter the sum alike
    assert ours[0].data_ptr() != ours[1].data_ptr()  # in tensors of their own


def test_without_hidden_bias_and_without_affine() -> None:
    x, r, *_ = _case(torch.float64, (6, 33), 33, 3)
    gen = torch.Generator().manual_seed(8)
    dy, dsum = torch.randn(6, 33, generator=gen).double(), torch.randn(6, 33, generator=gen).double()
    y, s = residual_layer_norm(x, r, 33, return_sum=True)
    ref_y, ref_s = _reference(x, r, None, None, None, 33)
    assert torch.equal(s, ref_s)
    _close(y, ref_y, FORWARD_TOL[torch.float64])
    ours = torch.autograd.grad((y, s), (x, r), (dy, dsum))
    theirs = torch.autograd.grad((ref_y, ref_s), (x, r), (dy, dsum))
    for a, e in zip(ours, theirs):
        _close(a, e, GRAD_TOL[torch.float64])


def test_leaf_grads_do_not_share_storage() -> None:
    """x.grad and residual.grad are equal but separate: zeroing one in place (as clipping or
    an optimizer might) leaves the other as it was."""
    x, r, hb, w, b = _case(torch.float32, (4, 16), 16, 16)
    y, s = residual_layer_norm(x, r, 16, w, b, hb, return_sum=True)
    (y.pow(2).sum() + s.sum()).backward()
    assert x.grad is not None and r.grad is not None
    assert torch.equal(x.grad, r.grad)
    assert x.grad.untyped_storage().data_ptr() != r.grad.untyped_storage().data_ptr()
    x.grad.zero_()
    assert r.grad.abs().sum() > 0


def test_only_the_sum_differentiated() -> None:
    """y unused: the sum's gradient passes straight to x, residual and hidden_bias."""
    x, r, hb, w, b = _case(torch.float64, (5, 16), 16, 4)
    _, s = residual_layer_norm(x, r, 16, w, b, hb, return_sum=True)
    dsum = torch.randn(5, 16, generator=torch.Generator().manual_seed(9)).double()
    dx, dr, dhb = torch.autograd.grad(s, (x, r, hb), dsum)
    _, ref_s = _reference(x, r, hb, w, b, 16)
    ref = torch.autograd.grad(ref_s, (x, r, hb), dsum)
    for a, e in zip((dx, dr, dhb), ref):
        _close(a, e, GRAD_TOL[torch.float64])


@pytest.mark.parametrize("return_sum", [True, False])
def test_gradcheck_float64(return_sum: bool) -> None:
    x, r, hb, w, b = _case(torch.float64, (4, 6), 6, 5)

    def fn(x: Tensor, r: Tensor, hb: Tensor, w: Tensor, b: Tensor) -> Tensor | tuple[Tensor, Tensor]:
        return residual_layer_norm(x, r, 6, w, b, hb, return_sum=return_sum)

    assert torch.autograd.gradcheck(fn, (x, r, hb, w, b))
    assert torch.autograd.gradcheck(lambda x, r: residual_layer_norm(x, r, 6, return_sum=return_sum), (x, r))


def test_multi_dim_normalized_shape() -> None:
    """normalized_shape (2, 3): weight, bias and hidden_bias have that shape."""
    gen = torch.Generator().manual_seed(6)
    x, r = (torch.randn(4, 2, 3, generator=gen, dtype=torch.float64, requires_grad=True) for _ in range(2))
    hb, w, b = (torch.randn(2, 3, generator=gen, dtype=torch.float64, requires_grad=True) for _ in range(3))
    y, s = residual_layer_norm(x, r, (2, 3), w, b, hb, return_sum=True)
    ref_s = x + hb + r
    ref_y = F.layer_norm(ref_s, (2, 3), w, b)
    assert torch.equal(s, ref_s)
    _close(y, ref_y, FORWARD_TOL[torch.float64])
    dy = torch.randn(4, 2, 3, generator=gen, dtype=torch.float64)
    ours = torch.autograd.grad((y, s), (x, r, hb, w, b), (dy, dy))
    theirs = torch.autograd.grad((ref_y, ref_s), (x, r, hb, w, b), (dy, dy))
    for a, e in zip(ours, theirs):
        assert a.shape == e.shape
        _close(a, e, GRAD_TOL[torch.float64])


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_half_inputs_round_the_sum_once(dtype: torch.dtype) -> None:
    """fp32 math: the sum is x + b + r in fp32 rounded once, and y normalizes that rounded sum."""
    x, r, hb, w, b = (t.detach() for t in _case(dtype, (8, 768), 768, 10))
    y, s = residual_layer_norm(x, r, 768, w, b, hb, return_sum=True)
    assert y.dtype == s.dtype == dtype
    assert torch.equal(s, (x.float() + hb.float() + r.float()).to(dtype))
    ref = F.layer_norm(s.float(), (768,), w.float(), b.float())
    rtol, atol = (5e-3, 2e-3) if dtype == torch.float16 else (3e-2, 2e-2)
    torch.testing.assert_close(y.float(), ref, rtol=rtol, atol=atol)


def test_large_mean_small_spread() -> None:
    """The two-pass statistics keep fp32 accurate where the sum's mean dwarfs its spread."""
    gen = torch.Generator().manual_seed(11)
    x = 600.0 + torch.randn(4, 4097, generator=gen) * 0.01
    r = 400.0 + torch.randn(4, 4097, generator=gen) * 0.01
    s = x + r  # rounded to fp32 as ours is: the LayerNorm input both sides normalize
    exact = F.layer_norm(s.double(), (4097,))
    ours_error = (residual_layer_norm(x, r, 4097).double() - exact).abs().max().item()
    torch_error = (F.layer_norm(s, (4097,)).double() - exact).abs().max().item()
    assert ours_error < 1e-4
    assert ours_error <= torch_error


def test_mixed_parameter_dtypes() -> None:
    """fp32 parameters with bf16 activations (autocast's layout): bf16 out, fp32 grads."""
    x, r = (t.detach().requires_grad_(True) for t in _case(torch.bfloat16, (4, 64), 64, 12)[:2])
    hb, w, b = (t.detach().float().requires_grad_(True) for t in _case(torch.float32, (4, 64), 64, 13)[2:])
    y, s = residual_layer_norm(x, r, 64, w, b, hb, return_sum=True)
    assert y.dtype == s.dtype == torch.bfloat16
    assert torch.equal(s, (x.float() + hb + r.float()).to(torch.bfloat16))
    grads = torch.autograd.grad((y.float().sum() + s.float().sum()), (x, r, hb, w, b))
    assert [g.dtype for g in grads] == [torch.bfloat16] * 2 + [torch.float32] * 3


def test_no_rows() -> None:
    x, r = (torch.empty(0, 5, requires_grad=True) for _ in range(2))
    hb, w, b = (torch.randn(5, requires_grad=True) for _ in range(3))
    y, s = residual_layer_norm(x, r, 5, w, b, hb, return_sum=True)
    assert y.shape == s.shape == (0, 5)
    grads = torch.autograd.grad((y, s), (x, r, hb, w, b), (torch.empty(0, 5), torch.empty(0, 5)))
    assert grads[0].shape == grads[1].shape == (0, 5)
    for g in grads[2:]:
        assert torch.equal(g, torch.zeros(5))


@pytest.mark.parametrize(("shape", "normalized_shape"), [((4, 0), (0,)), ((2, 3, 0), (3, 0)), ((0, 0), (0,))])
def test_rows_without_elements(shape: tuple[int, ...], normalized_shape: tuple[int, ...]) -> None:
    """A normalized shape with a 0 in it, as F.layer_norm takes it: empty outputs and gradients
    of the right shapes. The rows come from the leading dims (reshape(-1, 0) cannot infer
    them), and the fallback's statistics of an empty row must not index its first element."""
    x, r = (torch.randn(shape, requires_grad=True) for _ in range(2))
    hb, w, b = (torch.randn(normalized_shape, requires_grad=True) for _ in range(3))
    y, s = residual_layer_norm(x, r, normalized_shape, w, b, hb, return_sum=True)
    assert y.shape == s.shape == F.layer_norm(x, normalized_shape, w, b).shape == shape
    grads = torch.autograd.grad((y.sum() + s.sum()), (x, r, hb, w, b))
    assert [g.shape for g in grads] == [shape] * 2 + [normalized_shape] * 3
    plain = layer_norm(x, normalized_shape, w, b)
    assert plain.shape == shape
    assert [g.shape for g in torch.autograd.grad(plain.sum(), (x, w, b))] == [shape] + [normalized_shape] * 2


def test_module() -> None:
    torch.manual_seed(14)
    module = FusedResidualLayerNorm(32, return_sum=True).double()
    with torch.no_grad():
        module.weight.normal_()  # type: ignore[union-attr]
        module.bias.normal_()  # type: ignore[union-attr]
    assert set(module.state_dict()) == {"weight", "bias"}
    assert "return_sum=True" in repr(module)
    x, r, hb, _, _ = _case(torch.float64, (2, 3, 32), 32, 15)
    y, s = module(x, r, hb)
    ref = torch.nn.LayerNorm(32).double()
    ref.load_state_dict(module.state_dict())
    torch.testing.assert_close(y, ref(x + hb + r))
    assert torch.equal(s, x + hb + r)
    plain = FusedResidualLayerNorm(32, elementwise_affine=False)
    assert plain.weight is None and plain.bias is None
    out = plain(x.detach().float(), r.detach().float())
    assert isinstance(out, Tensor)
    torch.testing.assert_close(out, F.layer_norm(x.detach().float() + r.detach().float(), (32,)))


def test_bad_inputs_raise() -> None:
    x, r = torch.zeros(2, 4), torch.zeros(2, 4)
    with pytest.raises(ValueError, match=r"residual_layer_norm: input of shape .* does not end with"):
        residual_layer_norm(x, r, 5)
    with pytest.raises(ValueError, match=r"residual has shape .* expected x's"):
        residual_layer_norm(x, torch.zeros(1, 4), 4)
    with pytest.raises(ValueError, match=r"residual is torch\.float64 but x is torch\.float32"):
        residual_layer_norm(x, r.double(), 4)
    with pytest.raises(ValueError, match="residual is on meta but x is on cpu"):
        residual_layer_norm(x, torch.zeros(2, 4, device="meta"), 4)
    with pytest.raises(ValueError, match="hidden_bias has shape"):
        residual_layer_norm(x, r, 4, hidden_bias=torch.zeros(3))
    with pytest.raises(ValueError, match="weight has shape"):
        residual_layer_norm(x, r, 4, weight=torch.zeros(2, 4))
    with pytest.raises(ValueError, match="bias has shape"):
        residual_layer_norm(x, r, 4, bias=torch.zeros(5))
    with pytest.raises(ValueError, match="floating-point"):
        residual_layer_norm(x.long(), r.long(), 4)


def test_use_kernel_choices_on_cpu() -> None:
    x, r = torch.randn(3, 8), torch.randn(3, 8)
    with pytest.raises(RuntimeError, match="tensors are on cpu"):
        residual_layer_norm(x, r, 8, use_kernel=True)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # use_kernel=False falls back without a word
        y = residual_layer_norm(x, r, 8, use_kernel=False)
    torch.testing.assert_close(y, F.layer_norm(x + r, (8,)))
