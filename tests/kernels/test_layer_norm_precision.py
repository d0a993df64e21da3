"""LayerNorm's statistics on rows whose values sit far from their mean, fallback against torch.

The reference is ``F.layer_norm`` in float64; the bound is torch's own fp32 error on the same
rows, twice over (``F.layer_norm`` in fp32 keeps its statistics with Welford's method). Rows of
N(0, 1) with one value of 300: a one-pass variance E[d^2] - E[d]^2 over d = x - x[0] cancels
there (with the 300 at position 0 every d is about -300), and its error grows with the width
(1.8e-3 at 768 columns, 1.9e-1 at 16384, against torch's 5e-6 and 2e-5); the fallback's two
passes, summed in float64, stay well under torch's error (2e-6 at 16384).
tests/gpu/test_gpu_layer_norm_precision.py holds the kernels to the same bound.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import Tensor

from kernels.transformer import layer_norm, residual_layer_norm

pytestmark = pytest.mark.filterwarnings("ignore:.*using the PyTorch fallback:RuntimeWarning")

WIDTHS = (7, 768, 4096, 4097, 16384)
ROWS = 6


def outlier_rows(cols: int, at: int = 0, value: float = 300.0, seed: int = 0) -> Tensor:
    """ROWS rows of N(0, 1) in fp32 with ``value`` at column ``at`` (every row)."""
    x = torch.randn(ROWS, cols, generator=torch.Generator().manual_seed(seed))
    x[:, at] = value
    return x


def max_error(y: Tensor, exact: Tensor) -> float:
    return float((y.double() - exact).abs().max())


def one_pass_layer_norm(x: Tensor, eps: float = 1e-5) -> Tensor:
    """The former statistics, E[d^2] - E[d]^2 over d = x - x[0] in fp32: the broken input."""
    d = x - x[:, :1]
    s = d.mean(-1, keepdim=True)
    var = ((d * d).mean(-1, keepdim=True) - s * s).clamp_min(0.0)
    return (d - s) * torch.rsqrt(var + eps)


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("at", [0, -1], ids=["first", "last"])
@pytest.mark.parametrize("cols", WIDTHS)
def test_layer_norm_within_twice_torchs_error(cols: int, at: int, seed: int) -> None:
    x = outlier_rows(cols, at % cols, seed=seed)
    gen = torch.Generator().manual_seed(1 + seed)
    w, b = torch.randn(cols, generator=gen), torch.randn(cols, generator=gen)
    exact = F.layer_norm(x.double(), (cols,), w.double(), b.double())
    torch_error = max_error(F.layer_norm(x, (cols,), w, b), exact)
    ours_error = max_error(layer_norm(x, cols, w, b, use_kernel=False), exact)
    assert ours_error <= 2 * torch_error, (ours_error, torch_error)


@pytest.mark.parametrize("cols", [768, 4096, 16384])
def test_far_from_the_mean_values_and_a_large_mean(cols: int) -> None:
    """The outlier rows shifted by 1000 (a large mean too), and rows of 1000 + 0.01 N(0, 1)."""
    for x in (outlier_rows(cols, 5) + 1000.0, 1000.0 + 0.01 * outlier_rows(cols, 0, 0.0, seed=2)):
        exact = F.layer_norm(x.double(), (cols,))
        torch_error = max_error(F.layer_norm(x, (cols,)), exact)
        assert max_error(layer_norm(x, cols, use_kernel=False), exact) <= 2 * torch_error


@pytest.mark.parametrize("cols", [768, 4096, 16384])
def test_residual_layer_norm_within_twice_torchs_error(cols: int) -> None:
    x = outlier_rows(cols)
    r = torch.randn(ROWS, cols, generator=torch.Generator().manual_seed(3))
    s = x + r  # the fp32 sum both sides normalize
    exact = F.layer_norm(s.double(), (cols,))
    torch_error = max_error(F.layer_norm(s, (cols,)), exact)
    assert max_error(residual_layer_norm(x, r, cols, use_kernel=False), exact) <= 2 * torch_error


@pytest.mark.parametrize("cols", [768, 4096, 16384])
def test_the_rows_catch_a_one_pass_variance(cols: int) -> None:
    """The bound fails the former formula on these rows, by more each width."""
    x = outlier_rows(cols)
    exact = F.layer_norm(x.double(), (cols,))
    torch_error = max_error(F.layer_norm(x, (cols,)), exact)
    assert max_error(one_pass_layer_norm(x), exact) > 10 * torch_error
