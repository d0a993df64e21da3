"""LayerNorm's kernels on rows whose squares sum past FLT_MAX though their variance does not,
against F.layer_norm in float64 (on the CPU).

A row of +-1e19 has var = 1e38 (fp32 holds it) and n * var past FLT_MAX: torch in float64 gives
y = +-1 (times weight, plus bias). The register kernels once summed the plain squares there, got
inf, rstd 0 and y = beta, while the loop kernels (double statistics) gave +-1; now the register
kernels sum the squares of d * 2^-ceil(k/2) (gpu_row_stats.h) and both give +-1. Every path, as
tests/gpu/test_gpu_layer_norm_precision.py forces them: the register kernels (16-byte vectors,
and scalar slots for odd widths or misaligned views) and the loop kernels for rows too long for
them (4-element vectors, and scalar for odd widths or misaligned views), plain and residual.
tests/kernels/test_layer_norm_row_stats.py replays the register formula on the CPU.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from kernels.transformer import layer_norm, residual_layer_norm
from tests.gpu._inputs import offset_view
from tests.gpu._tolerances import TOLERANCE

# Register kernels: 768, 4096 (vectors; fp32 up to 12288, 16-bit up to 16384), 4097 (scalar
# slots up to 6144). Loop kernels: fp32 16384, 20000 (4-element vectors), 8191 (odd: scalar).
# 16-bit 16384 is the largest register row; 20000 and 8191 take the loop.
WIDTHS = (768, 4096, 4097, 8191, 12288, 16384, 20000)
# fp16 cannot hold 1e19.
DTYPES = (torch.float32, torch.bfloat16)


def _rows(device: torch.device, dtype: torch.dtype, cols: int) -> torch.Tensor:
    """+-1e19, its negation, and N(0, 1) with one 1e20 (var ~1e40 / n: one square past FLT_MAX)."""
    x = torch.full((3, cols), 1e19)
    x[0, 1::2] = -1e19
    x[1] = -x[0]
    x[2] = torch.randn(cols, generator=torch.Generator().manual_seed(cols))
    x[2, cols // 3] = 1e20
    return x.to(device=device, dtype=dtype)


def _affine(device: torch.device, dtype: torch.dtype, cols: int) -> tuple[torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(7)
    w, b = torch.randn(cols, generator=gen), torch.randn(cols, generator=gen)
    return w.to(device=device, dtype=dtype), b.to(device=device, dtype=dtype)


def _float64_torch(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    cols = x.shape[-1]
    exact = F.layer_norm(x.cpu().double(), (cols,), w.cpu().double(), b.cpu().double())
    assert torch.isfinite(exact).all() and (exact - b.cpu().double()).abs().max() > 0.5  # not beta
    return exact


def _assert_close(y: torch.Tensor, exact: torch.Tensor, dtype: torch.dtype) -> None:
    assert y.dtype == dtype
    rtol, atol = TOLERANCE[dtype]
    torch.testing.assert_close(y.cpu().double(), exact, rtol=rtol, atol=atol)


@pytest.mark.parametrize("offset", [0, 1], ids=["aligned", "offset1"])
@pytest.mark.parametrize("cols", WIDTHS)
@pytest.mark.parametrize("dtype", DTYPES)
def test_layer_norm_of_rows_whose_squares_overflow(
    device: torch.device, dtype: torch.dtype, cols: int, offset: int
) -> None:
    x = _rows(device, dtype, cols)
    w, b = _affine(device, dtype, cols)
    exact = _float64_torch(x, w, b)
    if offset:
        x, w, b = (offset_view(t, offset) for t in (x, w, b))
    _assert_close(layer_norm(x, cols, w, b, use_kernel=True), exact, dtype)


@pytest.mark.parametrize("offset", [0, 1], ids=["aligned", "offset1"])
@pytest.mark.parametrize("cols", WIDTHS)
@pytest.mark.parametrize("dtype", DTYPES)
def test_residual_layer_norm_of_rows_whose_squares_overflow(
    device: torch.device, dtype: torch.dtype, cols: int, offset: int
) -> None:
    """x + 0 is x: the residual kernels normalize the same rows."""
    x = _rows(device, dtype, cols)
    r = torch.zeros_like(x)
    w, b = _affine(device, dtype, cols)
    exact = _float64_torch(x, w, b)
    if offset:
        x, r, w, b = (offset_view(t, offset) for t in (x, r, w, b))
    y, total = residual_layer_norm(x, r, cols, w, b, return_sum=True, use_kernel=True)
    assert torch.equal(total, x)
    _assert_close(y, exact, dtype)
