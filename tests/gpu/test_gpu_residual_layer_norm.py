"""residual_layer_norm's kernels against torch, forward and backward.

The reference is torch's own ops on fp32 copies of the inputs, differentiated by autograd:
``s = x + hidden_bias + r`` in fp32, then ``F.layer_norm``. The op's contract is that the
sum is rounded once to the input dtype and y normalizes that rounded sum, so the reference
rounds its sum the same way, straight-through (the value rounded, the gradient passed on
unchanged in fp32), and normalizes the rounded value.
"""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from kernels import transformer
from kernels.transformer import _op as transformer_op
from kernels.transformer import residual_layer_norm
from tests.gpu._inputs import offset_view, on_side_stream
from tests.gpu._tolerances import DTYPES, TOLERANCE

# Register paths (one warp .. 512 threads, 16-byte vectors), odd sizes (scalar slots; fp32
# 4097 takes the forward loop kernel), and rows longer than the register slices hold
# (12288 fp32 forward, 20000 every loop kernel).
HIDDEN = (1, 127, 768, 1024, 4096, 4097, 8192, 12288, 20000)
ROWS = (3, 1001)  # neither is a multiple of the rows a block handles

Inputs = tuple[
    torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor
]


def _inputs(device: torch.device, dtype: torch.dtype, rows: int, cols: int, seed: int) -> Inputs:
    """x, residual (means away from 0), hidden bias, weight, bias, dy, and the sum's gradient."""
    gen = torch.Generator(device=device).manual_seed(seed)
    x = torch.randn(rows, cols, device=device, generator=gen) * 2 + 0.5
    r = torch.randn(rows, cols, device=device, generator=gen) * 2 - 0.3
    hb = torch.randn(cols, device=device, generator=gen) * 0.5
    w = torch.randn(cols, device=device, generator=gen)
    b = torch.randn(cols, device=device, generator=gen)
    dy = torch.randn(rows, cols, device=device, generator=gen)
    dsum = torch.randn(rows, cols, device=device, generator=gen)
    return tuple(t.to(dtype) for t in (x, r, hb, w, b, dy, dsum))  # type: ignore[return-value]


def _close(actual: torch.Tensor, expected: torch.Tensor, dtype: torch.dtype, scale: float = 1.0) -> None:
    rtol, atol = TOLERANCE[dtype]
    torch.testing.assert_close(actual.float(), expected.float(), rtol=rtol, atol=atol * scale)


def _reference(
    x: torch.Tensor,
    r: torch.Tensor,
    hb: torch.Tensor | None,
    w: torch.Tensor | None,
    b: torch.Tensor | None,
    dtype: torch.dtype,
) -> tuple[torch.Tensor, torch.Tensor]:
    """(y, sum) from fp32 leaves: the sum in fp32, rounded to ``dtype`` straight-through."""
    s32 = x + hb + r if hb is not None else x + r
    s = s32 + (s32.to(dtype).float() - s32).detach()
    return F.layer_norm(s, (x.shape[-1],), w, b), s


def _check(
    device: torch.device,
    dtype: torch.dtype,
    rows: int,
    cols: int,
    *,
    hidden_bias: bool = True,
    affine: bool = True,
    return_sum: bool = True,
    offset: int = 0,
) -> None:
    """The kernels (use_kernel=True) against the torch reference, y, sum and every gradient."""
    x, r, hb, w, b, dy, dsum = _inputs(device, dtype, rows, cols, cols * 7 + rows)
    used = [x, r] + ([hb] if hidden_bias else []) + ([w, b] if affine else [])
    leaves = [(offset_view(t, offset) if offset else t.clone()).requires_grad_(True) for t in used]
    ref_leaves = [t.float().requires_grad_(True) for t in used]

    def split(ts: list[torch.Tensor]) -> tuple[torch.Tensor | None, ...]:
        it = iter(ts[2:])
        hb_ = next(it) if hidden_bias else None
        w_, b_ = (next(it), next(it)) if affine else (None, None)
        return ts[0], ts[1], hb_, w_, b_

    lx, lr, lhb, lw, lb = split(leaves)
    assert lx is not None and lr is not None
    grad_y = offset_view(dy, offset) if offset else dy
    grad_s = offset_view(dsum, offset) if offset else dsum
    rx, rr, rhb, rw, rb = split(ref_leaves)
    assert rx is not None and rr is not None
    ref_y, ref_s = _reference(rx, rr, rhb, rw, rb, dtype)
    if return_sum:
        y, s = residual_layer_norm(lx, lr, cols, lw, lb, lhb, return_sum=True, use_kernel=True)
        grads = torch.autograd.grad((y, s), leaves, (grad_y, grad_s))
        ref_grads = torch.autograd.grad((ref_y, ref_s), ref_leaves, (dy.float(), dsum.float()))
        # The sum is the fp32 sum in torch's order, rounded once: the same tensor bit for bit.
        s32 = (rx + rhb + rr if rhb is not None else rx + rr).detach()
        assert s.dtype == dtype
        assert torch.equal(s, s32.to(dtype))
    else:
        y = residual_layer_norm(lx, lr, cols, lw, lb, lhb, use_kernel=True)
        grads = torch.autograd.grad(y, leaves, grad_y)
        ref_grads = torch.autograd.grad(ref_y, ref_leaves, dy.float())
    torch.cuda.synchronize(device)
    assert y.dtype == dtype
    _close(y, ref_y, dtype)
    names = (
        ["x", "residual"] + (["hidden_bias"] if hidden_bias else []) + (["weight", "bias"] if affine else [])
    )
    got = dict(zip(names, grads))
    want = dict(zip(names, ref_grads))
    # One gradient for both, in two tensors (the kernel writes the residual's copy).
    assert torch.equal(got["x"], got["residual"])
    assert got["x"].data_ptr() != got["residual"].data_ptr()
    # Column sums over rows (hidden_bias, weight, bias): absolute error grows like sqrt(rows).
    summed = math.sqrt(rows) * 4
    if cols == 1:
        # x - mean is exactly 0: LayerNorm passes exactly 0 back (the kernel keeps dy * w
        # unfused, see test_gpu_transformer), so dx is the sum's own gradient; torch's
        # LayerNorm gradient there, and its dweight, are rounding noise times 1 / sqrt(eps).
        expected = grad_s if return_sum else torch.zeros_like(grad_s)
        assert torch.equal(got["x"], expected.reshape(got["x"].shape))
        if hidden_bias:
            _close(got["hidden_bias"], expected.float().sum(0), dtype, scale=summed)
        if affine:
            _close(got["bias"], want["bias"], dtype, scale=summed)
        return
    _close(got["x"], want["x"], dtype, scale=4)
    for name in names[2:]:
        _close(got[name], want[name], dtype, scale=summed)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("cols", HIDDEN)
@pytest.mark.parametrize("rows", ROWS)
def test_residual_layer_norm(device: torch.device, dtype: torch.dtype, cols: int, rows: int) -> None:
    """Hidden bias, affine, and the sum returned and differentiated: every input of both kernels."""
    _check(device, dtype, rows, cols)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("cols", (768, 4097))
@pytest.mark.parametrize(
    ("hidden_bias", "affine", "return_sum"),
    [(False, True, True), (True, False, True), (True, True, False), (False, False, False)],
)
def test_residual_layer_norm_variants(
    device: torch.device, dtype: torch.dtype, cols: int, hidden_bias: bool, affine: bool, return_sum: bool
) -> None:
    """Without a hidden bias, without weight and bias, and y alone (no gradient to add)."""
    _check(device, dtype, 257, cols, hidden_bias=hidden_bias, affine=affine, return_sum=return_sum)


@pytest.mark.parametrize("offset", [1, 2])
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("cols", (768, 4097))
def test_residual_layer_norm_misaligned_inputs(
    device: torch.device, offset: int, dtype: torch.dtype, cols: int
) -> None:
    """Every input and both incoming gradients at storage offset 1 (2): no vector access they
    do not allow."""
    _check(device, dtype, 33, cols, offset=offset)


@pytest.mark.parametrize("dtype", DTYPES)
def test_residual_layer_norm_only_the_sum_used(device: torch.device, dtype: torch.dtype) -> None:
    """y unused: the sum's gradient reaches x, residual and hidden_bias unchanged."""
    x, r, hb, w, b, _, dsum = _inputs(device, dtype, 65, 768, 3)
    leaves = [t.clone().requires_grad_(True) for t in (x, r, hb)]
    _, s = residual_layer_norm(leaves[0], leaves[1], 768, w, b, leaves[2], return_sum=True, use_kernel=True)
    dx, dr, dhb = torch.autograd.grad(s, leaves, dsum)
    assert torch.equal(dx, dsum) and torch.equal(dr, dsum)
    _close(dhb, dsum.float().sum(0), dtype, scale=math.sqrt(65) * 4)


@pytest.mark.parametrize("dtype", DTYPES)
def test_residual_layer_norm_without_rows(device: torch.device, dtype: torch.dtype) -> None:
    cols = 768
    x, r, hb, w, b, _, _ = _inputs(device, dtype, 0, cols, 4)
    leaves = [t.clone().requires_grad_(True) for t in (x, r, hb, w, b)]
    y, s = residual_layer_norm(
        leaves[0], leaves[1], cols, leaves[3], leaves[4], leaves[2], return_sum=True, use_kernel=True
    )
    grads = torch.autograd.grad((y, s), leaves, (torch.empty_like(y), torch.empty_like(s)))
    assert y.shape == s.shape == grads[0].shape == grads[1].shape == (0, cols)
    for g in grads[2:]:
        assert torch.equal(g, torch.zeros_like(g))


@pytest.mark.parametrize("dtype", DTYPES)
def test_residual_layer_norm_rows_without_elements(device: torch.device, dtype: torch.dtype) -> None:
    """normalized_shape 0 (F.layer_norm takes it): the kernels' launchers see cols == 0 and
    return early, with statistics of no rows; forward and backward give empty tensors."""
    x, r = (torch.randn(4, 0, device=device, dtype=dtype, requires_grad=True) for _ in range(2))
    hb, w, b = (torch.randn(0, device=device, dtype=dtype, requires_grad=True) for _ in range(3))
    y, s = residual_layer_norm(x, r, 0, w, b, hb, return_sum=True, use_kernel=True)
    assert y.shape == s.shape == (4, 0)
    grads = torch.autograd.grad((y.sum() + s.sum()), (x, r, hb, w, b))
    assert [g.shape for g in grads] == [(4, 0)] * 2 + [(0,)] * 3
    plain = transformer.layer_norm(x, 0, w, b, use_kernel=True)
    assert plain.shape == (4, 0)
    assert [g.shape for g in torch.autograd.grad(plain.sum(), (x, w, b))] == [(4, 0), (0,), (0,)]


def test_residual_layer_norm_uses_the_current_stream(device: torch.device) -> None:
    x, r, hb, w, b, dy, dsum = _inputs(device, torch.float32, 129, 768, 11)

    def run() -> list[torch.Tensor]:
        leaves = [t.clone().requires_grad_(True) for t in (x, r, hb, w, b)]
        y, s = residual_layer_norm(
            leaves[0], leaves[1], 768, leaves[3], leaves[4], leaves[2], return_sum=True, use_kernel=True
        )
        return [y, s, *torch.autograd.grad((y, s), leaves, (dy, dsum))]

    ours = on_side_stream(device, [x, r, hb, w, b, dy, dsum], run)
    ref_leaves = [t.clone().requires_grad_(True) for t in (x, r, hb, w, b)]
    ref_y, ref_s = _reference(
        ref_leaves[0], ref_leaves[1], ref_leaves[2], ref_leaves[3], ref_leaves[4], torch.float32
    )
    refs = [ref_y, ref_s, *torch.autograd.grad((ref_y, ref_s), ref_leaves, (dy, dsum))]
    summed = 4 * math.sqrt(129)
    for got, want, scale in zip(ours, refs, (1, 1, 4, 4, summed, summed, summed)):
        _close(got, want, torch.float32, scale=scale)


def test_residual_layer_norm_mixed_dtypes_fall_back(device: torch.device) -> None:
    """fp32 parameters with bf16 activations: the kernels take one dtype, so use_kernel=True
    refuses and the default runs the PyTorch implementation, as layer_norm does."""
    x, r, hb, w, b, _, _ = _inputs(device, torch.bfloat16, 8, 64, 5)
    with pytest.raises(RuntimeError, match="weight, bias and hidden_bias in the input's dtype"):
        residual_layer_norm(x, r, 64, w.float(), b.float(), hb.float(), use_kernel=True)
    y = residual_layer_norm(x, r, 64, w.float(), b.float(), hb.float())
    assert y.dtype == torch.bfloat16
    ref = F.layer_norm(
        (x.float() + hb.float() + r.float()).to(torch.bfloat16).float(), (64,), w.float(), b.float()
    )
    _close(y, ref, torch.bfloat16)


def test_residual_layer_norm_binding_checks(device: torch.device) -> None:
    module = transformer_op.OP.load()
    x = torch.randn(4, 64, device=device)
    with pytest.raises(RuntimeError, match="residual has shape"):
        module.residual_layer_norm_forward(x, torch.randn(4, 32, device=device), None, None, None, 1e-5)
    with pytest.raises(RuntimeError, match="residual must be"):
        module.residual_layer_norm_forward(x, x.half(), None, None, None, 1e-5)
    with pytest.raises(RuntimeError, match="hidden_bias must have shape"):
        module.residual_layer_norm_forward(x, x, torch.randn(63, device=device), None, None, 1e-5)
    y, s, mean, rstd = module.residual_layer_norm_forward(x, x, None, None, None, 1e-5)
    with pytest.raises(RuntimeError, match="grad_sum has shape"):
        module.residual_layer_norm_backward(
            y, s, None, mean, rstd, torch.randn(4, 32, device=device), False, True
        )
    with pytest.raises(RuntimeError, match="grad_output has shape"):
        module.residual_layer_norm_backward(x[:2], s, None, mean, rstd, None, False, True)
    dx, dres, dw, db = module.residual_layer_norm_backward(y, s, None, mean, rstd, None, False, False)
    assert dx.shape == s.shape and dres is None and dw is None and db is None


def test_residual_layer_norm_leaf_grads_do_not_share_storage(device: torch.device) -> None:
    """x.grad and residual.grad hold equal values in separate storage: clipping or zeroing
    one in place leaves the other as it was."""
    x, r, hb, w, b, dy, _ = _inputs(device, torch.float16, 64, 768, 6)
    x.requires_grad_(True)
    r.requires_grad_(True)
    y = residual_layer_norm(x, r, 768, w, b, hb, use_kernel=True)
    y.backward(dy)
    assert x.grad is not None and r.grad is not None
    assert torch.equal(x.grad, r.grad)
    assert x.grad.untyped_storage().data_ptr() != r.grad.untyped_storage().data_ptr()
    x.grad.zero_()
    assert r.grad.abs().sum() > 0
