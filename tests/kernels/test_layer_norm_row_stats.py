"""The register LayerNorm kernels' forward formula (gpu_row_stats.h: the first pass sums
x * 2^-k, then the residue pass over d times a power of two), compiled for the host and replayed
in fp32 on rows far from zero, against F.layer_norm in float64.

The row sum of 4096 values of 1e35 overflows fp32; torch gives beta there. The sum of the
squares of a row of +-1e19 overflows too, though its variance (1e38) does not; torch in float64
gives +-1 there. The same program replays the formula as the kernels computed it before each
fix (no scaling at all; the second pass scaled only where the mean is huge) to show that these
inputs break it, so the test can tell them apart. The GPU twins are in
tests/gpu/test_gpu_layer_norm_precision.py and tests/gpu/test_gpu_layer_norm_extreme_rows.py
(the kernels themselves, on a device).
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from op_builder import get_builder

INCLUDES = [f"-I{d}" for d in get_builder("transformer").include_paths()]
EPS = 1e-5

# The register forward of layer_norm.cu, one row in order (the device sums in a tree: the same
# formula, another order of additions): mean from the scaled sum, then d = x - mean (scaled by
# row_spread), the residue s = mean(d) and var = mean(d^2) - s^2, y = (d - s) * rstd * g + b.
# Modes: "scaled", the kernels now; "mean", the second pass scaled only where |mean| > 2^64 (the
# kernels before the +-1e19 fix); "plain", without either scale (before the 1e35 fix).
PROGRAM = r"""
#include <cmath>
#include <cstdio>
#include <vector>
#include "gpu_row_stats.h"

// gpu_fmax_nan: a NaN operand stays NaN (std::fmax would drop it and hide a NaN row).
static float fmax_nan(float a, float b) { return a != a ? a : std::fmax(a, b); }

int main(int argc, char** argv) {
  const char mode = argc > 1 ? argv[1][0] : 's';
  const bool scaled = mode != 'p';
  long cols, rows;
  if (std::scanf("%ld %ld", &cols, &rows) != 2) return 2;
  const RowCount count = row_count(cols);
  const float n = static_cast<float>(cols);
  std::vector<float> x(cols), g(cols), b(cols);
  for (float& v : g) if (std::scanf("%a", &v) != 1) return 2;
  for (float& v : b) if (std::scanf("%a", &v) != 1) return 2;
  for (long r = 0; r < rows; ++r) {
    for (float& v : x) if (std::scanf("%a", &v) != 1) return 2;
    float sum = 0.0f;
    for (float v : x) sum += scaled ? v * count.scale : v;
    const float mean = scaled ? sum / count.scaled_n : sum / n;
    RowSpread spread{1.0f, 1.0f};
    if (mode == 's') spread = row_spread(mean, count);
    if (mode == 'm' && std::fabs(mean) > 0x1p64f) spread = RowSpread{0x1p-64f, 0x1p64f};
    float s1 = 0.0f, s2 = 0.0f;
    for (float& v : x) {
      v -= mean;
      const float e = v * spread.scale;
      s1 += e;
      s2 += e * e;
    }
    const float scaled_residue = s1 / n;
    const float scaled_var = fmax_nan(s2 / n - scaled_residue * scaled_residue, 0.0f);
    const float residue = scaled_residue * spread.inverse;
    const float var = scaled_var * spread.inverse * spread.inverse;
    const float rstd = 1.0f / std::sqrt(var + static_cast<float>(%(eps)r));
    for (long c = 0; c < cols; ++c) std::printf("%%a ", (x[c] - residue) * rstd * g[c] + b[c]);
    std::printf("\n");
  }
  return 0;
}
"""


@pytest.fixture(scope="module")
def replay(tmp_path_factory: pytest.TempPathFactory) -> Path:
    if shutil.which("g++") is None:
        pytest.skip("no g++ here (apt-get install g++)")
    folder = tmp_path_factory.mktemp("row_stats")
    source = folder / "replay.cpp"
    source.write_text(PROGRAM.replace("%(eps)r", repr(EPS)).replace("%%", "%"))
    binary = folder / "replay"
    # -ffp-contract=off: no fused multiply-adds the device's rounding would not have either.
    subprocess.run(
        ["g++", "-O2", "-std=c++17", "-ffp-contract=off", *INCLUDES, str(source), "-o", str(binary)],
        check=True,
    )
    return binary


def run(
    binary: Path, x: torch.Tensor, g: torch.Tensor, b: torch.Tensor, mode: str = "scaled"
) -> torch.Tensor:
    rows, cols = x.shape
    values = [g, b, *x]
    text = f"{cols} {rows}\n" + "\n".join(" ".join(float(v).hex() for v in t.tolist()) for t in values)
    out = subprocess.run([str(binary), mode], input=text, capture_output=True, text=True, check=True).stdout
    return torch.tensor([[float.fromhex(v) for v in line.split()] for line in out.splitlines()])


def affine(cols: int) -> tuple[torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(cols)
    return torch.randn(cols, generator=gen), torch.randn(cols, generator=gen)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("cols", [4096, 4097, 768])
def test_a_row_of_huge_equal_values_gives_beta_as_torch_does(
    replay: Path, cols: int, dtype: torch.dtype
) -> None:
    x = torch.full((2, cols), 1e35).to(dtype).float()  # bf16's 1e35 is what the kernel would read
    x[1] = -x[1]
    g, b = affine(cols)
    exact = F.layer_norm(x.double(), (cols,), g.double(), b.double(), eps=EPS)
    assert torch.equal(exact, b.double().expand_as(exact))  # torch: every y is beta
    got = run(replay, x, g, b)
    assert torch.equal(got, b.expand_as(got))
    if cols >= 4096:  # unscaled, the sum overflows (the case): the row is NaN
        assert torch.isnan(run(replay, x, g, b, "plain")).all()


@pytest.mark.parametrize("shift", [0.0, 1000.0, -1e6])
def test_ordinary_and_far_from_zero_rows_match_torch(replay: Path, shift: float) -> None:
    cols = 1000
    gen = torch.Generator().manual_seed(3)
    x = torch.randn(4, cols, generator=gen)
    x[:, 0] = 300.0  # an outlier: the mean and the first value differ
    x = x + shift  # |mean| >> std: where a mean rounded to fp32 would show in y
    g, b = affine(cols)
    exact = F.layer_norm(x.double(), (cols,), g.double(), b.double(), eps=EPS)
    torch_error = (F.layer_norm(x, (cols,), g, b, eps=EPS).double() - exact).abs().max()
    got = run(replay, x, g, b)
    # Within twice torch's own fp32 error on the same rows (its Welford statistics), as the GPU
    # precision tests bound the kernels; a floor for rows where torch's error is at rounding level.
    assert (got.double() - exact).abs().max() <= max(2 * float(torch_error), 1e-5)
    # Where the plain sums do not overflow, the scaled ones give the same bits.
    assert torch.equal(got, run(replay, x, g, b, "plain"))
    assert torch.equal(got, run(replay, x, g, b, "mean"))


@pytest.mark.parametrize("cols", [7, 768, 4096, 4097])
def test_rows_whose_squares_sum_past_flt_max_match_torch_in_float64(replay: Path, cols: int) -> None:
    """+-1e19 (and -+1e19): var = 1e38 fits fp32, n * var does not. With 768 columns and more,
    also a row of N(0, 1) with one 1e20 (var ~1e40 / n, a single square past FLT_MAX)."""
    x = torch.full((2, cols), 1e19)
    x[0, 1::2] = -1e19
    x[1] = -x[0]
    if cols >= 768:
        outlier = torch.randn(1, cols, generator=torch.Generator().manual_seed(cols))
        outlier[0, cols // 3] = 1e20
        x = torch.cat([x, outlier])
    g, b = affine(cols)
    exact = F.layer_norm(x.double(), (cols,), g.double(), b.double(), eps=EPS)
    assert torch.isfinite(exact).all() and (exact - b.double()).abs().max() > 0.5  # not beta
    got = run(replay, x, g, b)
    # The replay sums in order, and fp32's rounding of such sums grows with n (the device sums in
    # a tree): within n half-units of fp32's last place, relative to 1 + |y|.
    error = ((got.double() - exact).abs() / (1 + exact.abs())).max()
    assert error <= cols * torch.finfo(torch.float32).eps / 2, error
    # As the kernels were (the second pass unscaled for a mean near zero): the sum of the
    # squares is inf, rstd 0, and every y beta, where the long-row kernels gave +-1.
    before = run(replay, x[:2], g, b, "mean")
    assert torch.equal(before, b.expand_as(before))
