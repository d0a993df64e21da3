"""LayerNorm's kernels on rows whose values sit far from their mean, against F.layer_norm in float64.

The bound is torch's own error on the same rows and device, measured here: ``F.layer_norm`` on
the same input dtype (fp32 math, Welford's statistics), twice over, as
tests/kernels/test_layer_norm_precision.py bounds the fallback. Rows of N(0, 1) with one 300
(first, where a statistic shifted by x[0] suffers most, or last), and the same plus 1000 (a large
mean too). Every kernel path: the register kernels (16-byte vectors, and scalar slots for odd
widths or misaligned views) and the loop kernels for rows too long for them (4-element vectors,
and scalar for odd widths or misaligned views), plain and residual.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from kernels.transformer import layer_norm, residual_layer_norm
from tests.gpu._inputs import offset_view
from tests.gpu._tolerances import DTYPES

ROWS = 6
# Register kernels: 768, 4096 (vectors; fp32 up to 12288, 16-bit up to 16384), 4097 (scalar
# slots up to 6144). Loop kernels: fp32 16384, 20000 (4-element vectors), 8191 (odd: scalar).
# 16-bit 16384 is the largest register row; 20000 and 8191 take the loop.
WIDTHS = (768, 4096, 4097, 8191, 12288, 16384, 20000)


def _rows(device: torch.device, dtype: torch.dtype, cols: int, at: int, shift: float) -> torch.Tensor:
    gen = torch.Generator(device=device).manual_seed(cols + at)
    x = torch.randn(ROWS, cols, device=device, generator=gen)
    x[:, at] = 300.0
    return (x + shift).to(dtype)


def _error(y: torch.Tensor, exact: torch.Tensor) -> float:
    return float((y.double() - exact).abs().max())


def _affine(device: torch.device, dtype: torch.dtype, cols: int) -> tuple[torch.Tensor, torch.Tensor]:
    gen = torch.Generator(device=device).manual_seed(7)
    w = torch.randn(cols, device=device, generator=gen).to(dtype)
    return w, torch.randn(cols, device=device, generator=gen).to(dtype)


@pytest.mark.parametrize("offset", [0, 1], ids=["aligned", "offset1"])
@pytest.mark.parametrize("shift", [0.0, 1000.0], ids=["mean0", "mean1000"])
@pytest.mark.parametrize("at", [0, -1], ids=["first", "last"])
@pytest.mark.parametrize("cols", WIDTHS)
@pytest.mark.parametrize("dtype", DTYPES)
def test_layer_norm_within_twice_torchs_error(
    device: torch.device, dtype: torch.dtype, cols: int, at: int, shift: float, offset: int
) -> None:
    x = _rows(device, dtype, cols, at % cols, shift)
    w, b = _affine(device, dtype, cols)
    exact = F.layer_norm(x.double(), (cols,), w.double(), b.double())
    torch_error = _error(F.layer_norm(x, (cols,), w, b), exact)
    if offset:
        x, w, b = (offset_view(t, offset) for t in (x, w, b))
    y = layer_norm(x, cols, w, b, use_kernel=True)
    assert y.dtype == dtype
    ours_error = _error(y, exact)
    assert ours_error <= 2 * torch_error, (ours_error, torch_error)


@pytest.mark.parametrize("offset", [0, 1], ids=["aligned", "offset1"])
@pytest.mark.parametrize("at", [0, -1], ids=["first", "last"])
@pytest.mark.parametrize("cols", WIDTHS)
@pytest.mark.parametrize("dtype", DTYPES)
def test_residual_layer_norm_within_twice_torchs_error(
    device: torch.device, dtype: torch.dtype, cols: int, at: int, offset: int
) -> None:
    """The sum x + residual rounded to the dtype (the op's contract) is what both normalize."""
    x = _rows(device, dtype, cols, at % cols, 0.0)
    gen = torch.Generator(device=device).manual_seed(11)
    r = (torch.randn(ROWS, cols, device=device, generator=gen) * 0.5).to(dtype)
    s = (x.float() + r.float()).to(dtype)
    exact = F.layer_norm(s.double(), (cols,))
    torch_error = _error(F.layer_norm(s, (cols,)), exact)
    if offset:
        x, r = offset_view(x, offset), offset_view(r, offset)
    y, total = residual_layer_norm(x, r, cols, return_sum=True, use_kernel=True)
    assert torch.equal(total, s)
    ours_error = _error(y, exact)
    assert ours_error <= 2 * torch_error, (ours_error, torch_error)


@pytest.mark.parametrize("cols", WIDTHS)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_rows_of_huge_equal_values_give_beta_as_torch_does(
    device: torch.device, dtype: torch.dtype, cols: int
) -> None:
    """A row of 1e35 (and one of -1e35) sums past FLT_MAX: the register kernels sum x * 2^-k
    (gpu_row_stats.h) and the loop kernels merge moments, so y is beta, as torch gives."""
    x = torch.full((2, cols), 1e35, device=device, dtype=dtype)
    x[1] = -x[1]
    w, b = _affine(device, dtype, cols)
    expected = F.layer_norm(x, (cols,), w, b)
    assert torch.equal(expected, b.expand_as(expected))  # torch's own answer, on this device
    y = layer_norm(x, cols, w, b, use_kernel=True)
    assert torch.equal(y, expected)
