"""The LayerNorm fallback on rows of extreme values, against F.layer_norm in float64.

The reference is torch's own LayerNorm on the same values in float64, where none of these rows
overflows; torch's fp32 CPU LayerNorm is no reference here (it gives NaN for a row of 1e35 and
beta for a row of +-1e19, whose variance, 1e38, fp32 holds). The fallback once summed the raw
row in fp32 for its mean: 4096 values of 1e35 sum past FLT_MAX (3.4e38), and so do a few values
near FLT_MAX with mixed signs, which made those rows NaN. The kernels' twin of these rows is in
tests/gpu/test_gpu_layer_norm_extreme_rows.py.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch
import torch.nn.functional as F
from torch import Tensor

from kernels.transformer import layer_norm, residual_layer_norm

pytestmark = pytest.mark.filterwarnings("ignore:.*using the PyTorch fallback:RuntimeWarning")

FLT_MAX = torch.finfo(torch.float32).max


def _alternating(cols: int, a: float, b: float) -> Tensor:
    x = torch.full((cols,), a)
    x[1::2] = b
    return x


def _cycle(cols: int, *values: float) -> Tensor:
    return torch.tensor(values).repeat(cols // len(values) + 1)[:cols]


def _normal(cols: int) -> Tensor:
    return torch.randn(cols, generator=torch.Generator().manual_seed(cols))


# One row each, fp32 values. Names say what the row is; each needs its sums taken with care.
ROWS: dict[str, Callable[[int], Tensor]] = {
    "constant 1e35": lambda cols: torch.full((cols,), 1e35),
    "constant -1e35": lambda cols: torch.full((cols,), -1e35),
    "+-1e19 (var 1e38, n * var past FLT_MAX)": lambda cols: _alternating(cols, 1e19, -1e19),
    "+-3e38 (var past FLT_MAX)": lambda cols: _alternating(cols, 3e38, -3e38),
    "1e35 and its next float (huge mean, tiny variance)": lambda cols: _alternating(
        cols, 1e35, float(torch.nextafter(torch.tensor(1e35), torch.tensor(FLT_MAX)))
    ),
    "3e38, 3e38, -3e38 (mixed signs, x - mean past FLT_MAX)": lambda cols: _cycle(cols, 3e38, 3e38, -3e38),
    "N(0, 1) * 1e37 (mixed signs)": lambda cols: _normal(cols) * 1e37,
}
# 7: short; 4096 and 4097: rows whose plain fp32 sum of 1e35 overflows (n > 3402).
WIDTHS = (7, 4096, 4097)


def _affine(cols: int, dtype: torch.dtype) -> tuple[Tensor, Tensor]:
    gen = torch.Generator().manual_seed(7)
    return torch.randn(cols, generator=gen).to(dtype), torch.randn(cols, generator=gen).to(dtype)


def _assert_matches_float64_torch(y: Tensor, x: Tensor, w: Tensor, b: Tensor) -> None:
    """y (in x's dtype) is torch's float64 answer rounded to that dtype, within one unit of
    the dtype's rounding (the sums are taken in another order than torch's)."""
    cols = x.shape[-1]
    exact = F.layer_norm(x.double(), (cols,), w.double(), b.double())
    assert torch.isfinite(exact).all()  # the reference itself holds every one of these rows
    assert y.dtype == x.dtype
    unit = torch.finfo(x.dtype).eps
    torch.testing.assert_close(y.double(), exact.to(x.dtype).double(), rtol=unit, atol=unit)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("cols", WIDTHS)
@pytest.mark.parametrize("name", list(ROWS))
def test_extreme_rows_match_float64_torch(name: str, cols: int, dtype: torch.dtype) -> None:
    x = ROWS[name](cols).to(dtype).unsqueeze(0)  # bf16: the rounded values are the row
    w, b = _affine(cols, dtype)
    _assert_matches_float64_torch(layer_norm(x, cols, w, b, use_kernel=False), x, w, b)


@pytest.mark.parametrize("name", list(ROWS))
def test_extreme_rows_without_affine_and_as_a_residual_sum(name: str) -> None:
    cols = 4096
    x = ROWS[name](cols).unsqueeze(0)
    ones, zeros = torch.ones(cols), torch.zeros(cols)
    _assert_matches_float64_torch(layer_norm(x, cols, use_kernel=False), x, ones, zeros)
    # x + 0 is x: the residual variant normalizes the same row through the same fallback.
    y = residual_layer_norm(x, torch.zeros_like(x), cols, use_kernel=False)
    _assert_matches_float64_torch(y, x, ones, zeros)


def test_a_row_of_equal_huge_values_gives_beta_exactly() -> None:
    """Every value equals the mean: y is beta, bit for bit, as torch gives in float64."""
    cols = 4096
    x = torch.full((2, cols), 1e35)
    x[1] = -x[1]
    w, b = _affine(cols, torch.float32)
    assert torch.equal(F.layer_norm(x.double(), (cols,), w.double(), b.double()), b.double().expand(2, cols))
    assert torch.equal(layer_norm(x, cols, w, b, use_kernel=False), b.expand(2, cols))
