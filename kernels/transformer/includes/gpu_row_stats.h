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
// about 2^-126 * n lose low bits when scaled; the kernels' second pass (the mean of x - mean,
// taken without scaling) carries what the first pass's mean lost.
//
// Second pass, over d = x - mean: where |mean| > 2^64, the sums of d and d^2 are taken over
// d * 2^-64 and scaled back after (residue * 2^64, var * 2^128, inf where that overflows:
// rstd is then 0 and y is beta, as torch gives for a variance past FLT_MAX). There the mean's
// rounding alone makes d a few units of |mean|'s last place, whose square (about 1e56 at
// |mean| = 1e35) would overflow, and inf - inf would make the row NaN; scaled, a row of equal
// values gets d - residue = 0 and var = 0 exactly (d is then a small multiple of one power of
// two, and so are the sums), so y = beta. Below 2^64 the scale is 1: the same bits as before.
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
  float scale;     // 2^-k, the smallest power of two with 2^k >= n
  float scaled_n;  // n * 2^-k, in (0.5, 1]: exact for n up to 2^24
};

GPU_ROW_STATS_HD RowCount row_count(int64_t n) {
  float scale = 1.0f;
  int64_t power = 1;
  while (power < n) {
    power <<= 1;
    scale *= 0.5f;  // exact: a power of two well inside fp32's range for any row length
  }
  return RowCount{scale, static_cast<float>(n) * scale};
}

// The second pass's scale for a row with this mean, and its inverse (both powers of two).
struct RowSpread {
  float scale;
  float inverse;
};

GPU_ROW_STATS_HD RowSpread row_spread(float mean) {
  const float huge = 18446744073709551616.0f;  // 2^64
  return (mean > huge || mean < -huge) ? RowSpread{1.0f / huge, huge} : RowSpread{1.0f, 1.0f};
}
