// How LayerNorm's register kernels keep a row's statistics finite wherever its mean is.
//
// First pass, the mean: the sum of n values is taken over x * 2^-k with 2^k >= n, and divided
// by n * 2^-k.
//
// Why: a plain sum of a row overflows long before its mean does (4096 fp32 or bf16 values of
// 1e35 sum past FLT_MAX, 3.4e38: the mean becomes inf and the row NaN, where torch gives beta).
// Scaled by 2^-k the sum is at most max|x|, so it cannot overflow; and scaling by a power of two
// is exact (short of the subnormal range), so the sum, the division and therefore the mean have
// exactly the bits the plain formula gives wherever that one does not overflow. Values below
// about 2^-126 * n lose low bits when scaled; the kernels' second pass (the mean of x - mean)
// carries what the first pass's mean lost.
//
// Second pass, over d = x - mean: the sums of d and d^2 are taken over d * s and scaled back
// after (residue / s, var / s^2), with s = 2^-ceil(k/2), so s^2 <= 1/n, and s times a further
// 2^-64 where |mean| > 2^64.
//
// Why 2^-ceil(k/2): the sum of n squares is n * var, which overflows long before var does (a row
// of +-1e19: var = 1e38, torch's answer in float64 is y = +-1; summed plainly, 4096 squares of
// 1e19 are inf, so rstd was 0 and y beta, while the long-row kernels, in double, gave +-1). With
// s^2 <= 1/n every square and every partial sum is at most var, so the sums stay finite
// wherever var itself is (var past FLT_MAX is inf, rstd 0 and y beta on both paths, as the
// long-row kernels round their double variance to fp32). Being a power of two, s changes no bit
// of residue or var, except that a square below fp32's normal range (|d| < 2^-63 / s, 1.4e-17 at
// 16384 columns, was 2^-63) is flushed to zero under fast math: a loss of under 4n * 1.2e-38 in
// var, which only an eps of about that size or zero could see.
//
// Why the 2^-64 beyond: there the mean's rounding alone makes d a few units of |mean|'s last
// place, whose square (about 1e56 at |mean| = 1e35) would overflow, and so would the residue's,
// and inf - inf would make the row NaN; scaled, a row of equal values gets d - residue = 0 and
// var = 0 exactly (d is then a small multiple of one power of two, and so are the sums), so
// y = beta. d there is a multiple of half an ulp of |mean| (>= 2^40) or about |mean| itself, so
// no square falls below fp32's normal range.
//
// Host and device: tests compile this header for the CPU and check the formula against torch.
#pragma once

#include <cstdint>

#if defined(__CUDACC__) || defined(__HIPCC__)
#define GPU_ROW_STATS_HD __host__ __device__ __forceinline__
#else
#define GPU_ROW_STATS_HD inline
#endif

struct RowCount {
  float scale;           // 2^-k, the smallest power of two with 2^k >= n
  float scaled_n;        // n * 2^-k, in (0.5, 1]: exact for n up to 2^24
  float spread;          // 2^-ceil(k/2): spread^2 <= 1/n, the second pass's scale (row_spread)
  float spread_inverse;  // 2^ceil(k/2)
};

GPU_ROW_STATS_HD RowCount row_count(int64_t n) {
  RowCount count{1.0f, 1.0f, 1.0f, 1.0f};
  int64_t power = 1;
  for (int k = 1; power < n; ++k) {
    power <<= 1;
    count.scale *= 0.5f;  // exact: powers of two well inside fp32's range for any row length
    if (k % 2 == 1) {
      count.spread *= 0.5f;
      count.spread_inverse *= 2.0f;
    }
  }
  count.scaled_n = static_cast<float>(n) * count.scale;
  return count;
}

// The second pass's scale for a row with this mean and length, and its inverse (both powers of
// two).
struct RowSpread {
  float scale;
  float inverse;
};

GPU_ROW_STATS_HD RowSpread row_spread(float mean, const RowCount& count) {
  const float huge = 18446744073709551616.0f;  // 2^64
  const float tiny = 1.0f / huge;              // 2^-64, folded at compile time: exact
  return (mean > huge || mean < -huge) ? RowSpread{count.spread * tiny, count.spread_inverse * huge}
                                       : RowSpread{count.spread, count.spread_inverse};
}
