"""transformer kernels (LayerNorm, bias + GeLU, scaled masked softmax) against torch, fwd + bwd."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from kernels.transformer import bias_gelu, layer_norm, scaled_masked_softmax
from tests.gpu._tolerances import DTYPES, TOLERANCE

HIDDEN = (1, 127, 768, 4097)
ROWS = (3, 1001)  # neither is a multiple of the rows a block handles


def _inputs(device: torch.device, dtype: torch.dtype, rows: int, cols: int, seed: int) -> list[torch.Tensor]:
    gen = torch.Generator(device=device).manual_seed(seed)
    x = torch.randn(rows, cols, device=device, generator=gen) * 2 + 0.5
    w = torch.randn(cols, device=device, generator=gen)
    b = torch.randn(cols, device=device, generator=gen)
    dy = torch.randn(rows, cols, device=device, generator=gen)
    return [t.to(dtype) for t in (x, w, b, dy)]


def _close(actual: torch.Tensor, expected: torch.Tensor, dtype: torch.dtype, scale: float = 1.0) -> None:
    rtol, atol = TOLERANCE[dtype]
    torch.testing.assert_close(actual.float(), expected.float(), rtol=rtol, atol=atol * scale)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("cols", HIDDEN)
@pytest.mark.parametrize("rows", ROWS)
def test_layer_norm(device: torch.device, dtype: torch.dtype, cols: int, rows: int) -> None:
    x, w, b, dy = _inputs(device, dtype, rows, cols, cols + rows)
    leaves = [t.clone().requires_grad_(True) for t in (x, w, b)]
    y = layer_norm(leaves[0], cols, leaves[1], leaves[2], use_kernel=True)
    grads = torch.autograd.grad(y, leaves, dy)
    ref_leaves = [t.float().requires_grad_(True) for t in (x, w, b)]
    ref = F.layer_norm(ref_leaves[0], (cols,), ref_leaves[1], ref_leaves[2])
    ref_grads = torch.autograd.grad(ref, ref_leaves, dy.float())
    assert y.dtype == dtype
    _close(y, ref, dtype)
    if cols == 1:  # x - mean is 0: dx is 0 and dweight is rounding noise in the reference
        assert torch.all(grads[0] == 0)
        _close(grads[2], ref_grads[2], dtype, scale=rows)
        return
    _close(grads[0], ref_grads[0], dtype, scale=4)
    # dweight / dbias sum over rows: absolute error grows like sqrt(rows).
    _close(grads[1], ref_grads[1], dtype, scale=math.sqrt(rows) * 4)
    _close(grads[2], ref_grads[2], dtype, scale=math.sqrt(rows) * 4)


def test_layer_norm_without_affine(device: torch.device) -> None:
    x, _, _, dy = _inputs(device, torch.float32, 33, 768, 1)
    leaf = x.clone().requires_grad_(True)
    y = layer_norm(leaf, 768, use_kernel=True)
    (dx,) = torch.autograd.grad(y, leaf, dy)
    ref_leaf = x.clone().requires_grad_(True)
    ref = F.layer_norm(ref_leaf, (768,))
    (ref_dx,) = torch.autograd.grad(ref, ref_leaf, dy)
    _close(y, ref, torch.float32)
    _close(dx, ref_dx, torch.float32, scale=4)


@pytest.mark.parametrize("approximate", ["none", "tanh"])
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("cols", HIDDEN)
def test_bias_gelu(device: torch.device, approximate: str, dtype: torch.dtype, cols: int) -> None:
    x, _, b, dy = _inputs(device, dtype, 1001, cols, cols)
    leaves = [x.clone().requires_grad_(True), b.clone().requires_grad_(True)]
    y = bias_gelu(leaves[0], leaves[1], approximate, use_kernel=True)  # type: ignore[arg-type]
    grads = torch.autograd.grad(y, leaves, dy)
    ref_leaves = [x.float().requires_grad_(True), b.float().requires_grad_(True)]
    ref = F.gelu(ref_leaves[0] + ref_leaves[1], approximate=approximate)
    ref_grads = torch.autograd.grad(ref, ref_leaves, dy.float())
    _close(y, ref, dtype)
    _close(grads[0], ref_grads[0], dtype)
    _close(grads[1], ref_grads[1], dtype, scale=math.sqrt(1001) * 4)


def _softmax_reference(x: torch.Tensor, hidden: torch.Tensor, scale: float) -> torch.Tensor:
    y = torch.softmax((x.float() * scale).masked_fill(hidden, -math.inf), dim=-1)
    return torch.nan_to_num(y, nan=0.0)


def _causal(q_len: int, k_len: int, device: torch.device) -> torch.Tensor:
    q = torch.arange(q_len, device=device)[:, None]
    k = torch.arange(k_len, device=device)[None, :]
    return k > q + (k_len - q_len)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("k_len", HIDDEN)
@pytest.mark.parametrize("mode", ["mask", "causal", "both"])
def test_softmax(device: torch.device, dtype: torch.dtype, k_len: int, mode: str) -> None:
    gen = torch.Generator(device=device).manual_seed(k_len)
    batch, heads, q_len = 2, 3, 5
    x = (torch.randn(batch, heads, q_len, k_len, device=device, generator=gen) * 3).to(dtype)
    dy = torch.randn(batch, heads, q_len, k_len, device=device, generator=gen).to(dtype)
    mask = None
    hidden = torch.zeros(1, 1, q_len, k_len, dtype=torch.bool, device=device)
    if mode in ("mask", "both"):
        mask = torch.rand(batch, 1, q_len, k_len, device=device, generator=gen) < 0.3
        mask[0, 0, 1] = True  # a row with every key hidden -> zeros
        hidden = hidden | mask
    causal = mode in ("causal", "both")
    if causal:
        hidden = hidden | _causal(q_len, k_len, device)
    leaf = x.clone().requires_grad_(True)
    y = scaled_masked_softmax(leaf, mask, scale=0.125, causal=causal, use_kernel=True)
    (dx,) = torch.autograd.grad(y, leaf, dy)
    ref_leaf = x.float().requires_grad_(True)
    ref = _softmax_reference(ref_leaf, hidden, 0.125)
    (ref_dx,) = torch.autograd.grad(ref, ref_leaf, dy.float())
    _close(y, ref, dtype)
    _close(dx, ref_dx, dtype)
    if mask is not None:
        assert torch.all(y[0, :, 1] == 0)


def test_softmax_rows_not_multiple_of_block(device: torch.device) -> None:
    x = torch.randn(7, 3, 37, 31, device=device)
    y = scaled_masked_softmax(x, use_kernel=True)
    _close(y, torch.softmax(x, dim=-1), torch.float32)


def test_softmax_additive_inf_in_the_input(device: torch.device) -> None:
    gen = torch.Generator(device=device).manual_seed(3)
    x = torch.randn(2, 4, 8, 200, device=device, generator=gen)
    hidden = torch.rand(2, 4, 8, 200, device=device, generator=gen) < 0.5
    hidden[1, 2, 3] = True  # a row of only -inf
    y = scaled_masked_softmax(x.masked_fill(hidden, -math.inf), scale=0.3, use_kernel=True)
    _close(y, _softmax_reference(x, hidden, 0.3), torch.float32)
