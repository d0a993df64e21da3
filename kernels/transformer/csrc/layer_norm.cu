// LayerNorm over the last dimension, forward and backward.
//
// The work is memory bound: the forward must read x and write y, the backward read dy
// and x and write dx, and anything more (a second read of a row, a separate pass for
// dgamma / dbeta, idle threads, narrow loads) shows up directly in the time. So:
//
// * A row is split over a group of `tpr` threads (a power of two, 32..512: one warp
//   for hidden sizes up to ~1K, several for larger ones), each holding NV vectors of
//   VEC elements of the row in registers (VEC = 16 bytes when cols and every pointer
//   allow it, else 1). Vector k of thread t is the row's vector t + k * tpr, so each
//   load instruction of a warp reads consecutive 16-byte pieces. The row is read from
//   global memory once; the statistics and the output come from the registers.
//   Blocks hold several row groups (blockDim = (tpr, rows per block)).
// * Forward statistics: two passes over the registers. The row's mean m first (summed over
//   x * 2^-k, 2^k >= cols, so a row of huge values cannot overflow the sum: gpu_row_stats.h),
//   then over d = x - m both s = mean(d) (the rounding left in m, ~0) and mean(d^2), var =
//   mean(d^2) - s^2: s^2 is at rounding level, so nothing cancels, and y is formed from
//   (d - s), so no precision is lost to rounding m to fp32 when |mean| >> std. Those sums are
//   taken over d times a power of two whose square is at most 1/cols (2^-64 smaller where
//   |m| > 2^64), so the sum of d^2 stays finite wherever var does: a row of +-1e19 (var 1e38)
//   gets y = +-1, as from the loop kernels and from torch in float64, not beta. (Shifting
//   by x[0] instead rounded every d = x - x[0] at the scale of |x[0] - mean|, far too
//   coarse when x[0] is an outlier.)
// * Backward: one kernel computes dx and, for its slab of rows, the per-column partial
//   sums of dy * xhat (dgamma) and dy (dbeta) in registers (a thread's columns are the
//   same for every row it handles); each block writes one fp32 partial row of each to
//   the workspace, and a small kernel adds the partials in a fixed order. No float
//   atomics: the result is deterministic on a given device. The backward grid is
//   persistent (one 512-thread block per multiprocessor), so the partial rows are few,
//   and each thread loads the next row it will handle before working on the current
//   one, which keeps loads in flight through the row reductions.
// * Rows too long for the register slices take the generic loop kernels at the end,
//   which re-read the row: rare sizes, correct, slower. Their forward statistics are taken in
//   double over three reads (the sum, the squared deviations from its mean, the output), and
//   y is formed from x minus the mean as two floats (hi + lo): see ln_forward_loop_kernel.
//   The register kernels hold up
//   to 16384 (fp16/bf16) or 12288 (fp32) columns forward, 12288 or 8192 backward, and
//   6144 forward / 5120 backward when not vectorizable (odd hidden size, misaligned).
// * The residual variant (DeepSpeed's layer_norm_residual_store_pre_ln_res) is the same
//   kernels with a compile-time flag: the forward reads x, the residual and the hidden
//   bias instead of x, writes their sum and normalizes it in the same pass; the backward
//   adds the gradient the sum itself received into dx as it writes it, and writes that
//   gradient twice (x's and the residual's: equal, but separate tensors). With the flag
//   off the kernels are the plain LayerNorm ones, instruction for instruction.
#include <algorithm>
#include <type_traits>

#include "gpu_reduce.h"
#include "gpu_row_stats.h"
#include "gpu_transformer.h"

namespace {

// ---------------------------------------------------------------- shared pieces

// Largest row group (threads per row) of the register kernels. The backward kernel is
// declared for 512-thread blocks, one per multiprocessor (__launch_bounds__(512, 1)):
// up to 128 registers per thread, which its slices need; the forward for two such
// blocks (64 registers), so that it keeps more warps, hence loads, in flight. Without
// the explicit minimum ptxas picked smaller budgets for some slices and spilled.
constexpr int kMaxRowThreads = 512;
// Threads per block: forward blocks are small and many (the grid covers the rows
// once); backward blocks are persistent, one per multiprocessor.
constexpr int kForwardBlockThreads = 256;
constexpr int kBackwardBlockThreads = 512;
constexpr int kBackwardBlocksPerSm = 1;

template <int N>
using IntC = std::integral_constant<int, N>;

// Sum of v over the blockDim.x threads of a row group (same threadIdx.y). Every thread
// of the block must call it. Row groups of at most a warp reduce with shuffles alone
// (they never share a warp with another row's lanes in a way that mixes them: the
// shuffle width is the group size). Wider groups combine their warps through
// `scratch` (blockDim.y * blockDim.x / warp slots) with one barrier: callers alternate
// between two scratch buffers, so a buffer is rewritten only after a later call's
// barrier, which every reader of the previous round has passed.
template <typename V>
__device__ __forceinline__ V group_sum(V v, V* scratch) {
  const int tpr = static_cast<int>(blockDim.x);
  if (tpr <= GPU_WARP_SIZE) {
    for (int offset = tpr / 2; offset > 0; offset >>= 1) v = GpuSumOp()(v, gpu_shfl_xor(v, offset, tpr));
    return v;
  }
#pragma unroll
  for (int offset = GPU_WARP_SIZE / 2; offset > 0; offset >>= 1) {
    v = GpuSumOp()(v, gpu_shfl_xor(v, offset, GPU_WARP_SIZE));
  }
  const int warps = tpr / GPU_WARP_SIZE;
  V* slots = scratch + threadIdx.y * warps;
  if (threadIdx.x % GPU_WARP_SIZE == 0) slots[threadIdx.x / GPU_WARP_SIZE] = v;
  __syncthreads();
  V total = slots[0];
  for (int w = 1; w < warps; ++w) total = GpuSumOp()(total, slots[w]);  // same order in every thread
  return total;
}

template <int VEC, typename T>
__device__ __forceinline__ void load_params(float (&out)[VEC], const T* p, int64_t at, float absent) {
  if (p != nullptr) {
    load_as_float<VEC>(out, p + at);
  } else {
#pragma unroll
    for (int e = 0; e < VEC; ++e) out[e] = absent;
  }
}

// ---------------------------------------------------------------- the residual variant's sum

// The residual variant normalizes sum = (x + hidden_bias) + residual, added in fp32 and
// rounded once to T (no hidden bias: x + residual, without a + 0.0 that would turn a
// -0.0 sum into +0.0). It writes that rounded sum, and its statistics and y come from the
// rounded values too, not from the fp32 ones: the backward reads the stored sum back as
// its x, so forward and backward are one function of it. The rounding is torch's
// x + b + r computed in fp32 and cast, bit for bit.

// The sum's VEC elements at `at` (element offset into the [rows, cols] tensors) of
// column `col`: written to sum_out, and returned as floats.
template <int VEC, typename T>
__device__ __forceinline__ void residual_sum(float (&out)[VEC], const T* x, const T* residual, const T* hidden_bias,
                                             T* sum_out, int64_t at, int64_t col) {
  float r[VEC];
  load_as_float<VEC>(out, x + at);
  load_as_float<VEC>(r, residual + at);
  if (hidden_bias != nullptr) {
    float b[VEC];
    load_as_float<VEC>(b, hidden_bias + col);
#pragma unroll
    for (int e = 0; e < VEC; ++e) out[e] += b[e];
  }
  GpuVec<T, VEC> rounded;
#pragma unroll
  for (int e = 0; e < VEC; ++e) {
    rounded.v[e] = from_float<T>(out[e] + r[e]);
    out[e] = to_float(rounded.v[e]);
  }
  *reinterpret_cast<GpuVec<T, VEC>*>(sum_out + at) = rounded;
}

// ---------------------------------------------------------------- forward, row in registers

// kResidual: the row is the residual variant's sum (residual_sum), written to sum_out;
// otherwise residual, hidden_bias and sum_out are unused (null). They come last, so the
// plain kernel's parameters keep their offsets. `count` is row_count(cols), made on the host:
// a parameter's scales are read from the constant bank where they are used, while made in
// the kernel its four floats held registers through the row loop, and more slices spilled
// (nvcc 13.0 -Xptxas -v: the fp32 vector kernels on sm_80, the scalar ones on both).
template <typename T, int VEC, int NV, bool kResidual>
__global__ void __launch_bounds__(kMaxRowThreads, 2)
    ln_forward_reg_kernel(const T* __restrict__ x, const T* __restrict__ gamma, const T* __restrict__ beta,
                          T* __restrict__ y, float* __restrict__ mean_out, float* __restrict__ rstd_out,
                          int64_t rows, int64_t cols, float eps, RowCount count, const T* __restrict__ residual,
                          const T* __restrict__ hidden_bias, T* __restrict__ sum_out) {
  // One buffer per reduction of a row: each is rewritten only after the other's barrier, which
  // every reader of its previous round has passed (see group_sum).
  __shared__ float sum_scratch[kGpuMaxWarps];
  __shared__ float2 moment_scratch[kGpuMaxWarps];
  const int tpr = static_cast<int>(blockDim.x);
  const int tx = static_cast<int>(threadIdx.x);
  const int nvec = static_cast<int>(cols / VEC);
  const float n = static_cast<float>(cols);
  const int64_t step = static_cast<int64_t>(gridDim.x) * blockDim.y;
  // `base` is the same in every thread of the block, so all of them run the same
  // iterations and reach every reduction, including the row groups past the last row.
  for (int64_t base = static_cast<int64_t>(blockIdx.x) * blockDim.y; base < rows; base += step) {
    const int64_t row = base + threadIdx.y;
    const bool active = row < rows;
    const int64_t offset = (active ? row : 0) * cols;
    const T* xr = x + offset;
    float d[NV][VEC];
    float sum = 0.0f;
#pragma unroll
    for (int k = 0; k < NV; ++k) {
      const int j = tx + k * tpr;
      if (active && j < nvec) {
        if constexpr (kResidual) {
          const int64_t col = static_cast<int64_t>(j) * VEC;
          residual_sum<VEC>(d[k], x, residual, hidden_bias, sum_out, offset + col, col);
        } else {
          load_as_float<VEC>(d[k], xr + static_cast<int64_t>(j) * VEC);
        }
      } else {
#pragma unroll
        for (int e = 0; e < VEC; ++e) d[k][e] = 0.0f;
      }
#pragma unroll
      for (int e = 0; e < VEC; ++e) sum += d[k][e] * count.scale;
    }
    sum = group_sum(sum, sum_scratch);
    const float row_mean = gpu_div_rn(sum, count.scaled_n);
    // 2^-ceil(k/2), and 2^-64 more where |mean| > 2^64: the sum of n squares stays finite
    // wherever var does (gpu_row_stats.h). Exact scalings: the bits are those of the plain sums.
    const RowSpread spread = row_spread(row_mean, count);
    float2 moments = make_float2(0.0f, 0.0f);  // sums of d and d^2 (d scaled), d = x - row_mean
#pragma unroll
    for (int k = 0; k < NV; ++k) {
      const bool valid = tx + k * tpr < nvec;  // padding slots hold 0, but 0 - m is not 0
#pragma unroll
      for (int e = 0; e < VEC; ++e) {
        d[k][e] -= row_mean;
        if (valid) {
          const float scaled = d[k][e] * spread.scale;
          moments.x += scaled;
          moments.y += scaled * scaled;
        }
      }
    }
    moments = group_sum(moments, moment_scratch);
    const float scaled_residue = gpu_div_rn(moments.x, n);
    // NaN rows stay NaN (gpu_fmax_nan); the scales are powers of two, so scaling back is exact.
    const float scaled_var = gpu_fmax_nan(gpu_div_rn(moments.y, n) - scaled_residue * scaled_residue, 0.0f);
    const float residue = scaled_residue * spread.inverse;  // the rounding left in row_mean
    const float var = scaled_var * spread.inverse * spread.inverse;
    const float rstd = rsqrtf(var + eps);
    if (!active) continue;  // after both reductions
    if (tx == 0) {
      mean_out[row] = row_mean + residue;
      rstd_out[row] = rstd;
    }
    T* yr = y + row * cols;
#pragma unroll
    for (int k = 0; k < NV; ++k) {
      const int j = tx + k * tpr;
      if (j >= nvec) continue;
      const int64_t at = static_cast<int64_t>(j) * VEC;
      float g[VEC], b[VEC], out[VEC];
      load_params<VEC>(g, gamma, at, 1.0f);
      load_params<VEC>(b, beta, at, 0.0f);
#pragma unroll
      for (int e = 0; e < VEC; ++e) out[e] = (d[k][e] - residue) * rstd * g[e] + b[e];
      store_from_float<VEC>(yr + at, out);
    }
  }
}

// ---------------------------------------------------------------- backward, row in registers

// The raw (storage type) slices of dy and x of one row, and its statistics.
template <typename T, int VEC, int NV>
struct RowSlices {
  GpuVec<T, VEC> dy[NV];
  GpuVec<T, VEC> x[NV];
  float mean;
  float rstd;
};

template <typename T, int VEC, int NV>
__device__ __forceinline__ void fetch_row(RowSlices<T, VEC, NV>& s, const T* __restrict__ dy,
                                          const T* __restrict__ x, const float* __restrict__ mean,
                                          const float* __restrict__ rstd, int64_t row, int64_t rows,
                                          int64_t cols, int tx, int tpr, int nvec) {
  if (row >= rows) return;
  const int64_t base = row * cols;
#pragma unroll
  for (int k = 0; k < NV; ++k) {
    const int j = tx + k * tpr;
    if (j < nvec) {
      const int64_t at = base + static_cast<int64_t>(j) * VEC;
      s.dy[k] = *reinterpret_cast<const GpuVec<T, VEC>*>(dy + at);
      s.x[k] = *reinterpret_cast<const GpuVec<T, VEC>*>(x + at);
    }
  }
  s.mean = mean[row];
  s.rstd = rstd[row];
}

// dx = rstd * (dy*g - mean(dy*g) - xhat * mean(dy*g*xhat)), xhat = (x - mean) * rstd.
// dy*g is rounded once, the same way in both uses (gpu_mul_rn: never fused into the
// subtraction that follows). Then dy*g - mean(dy*g) is exactly 0 where every dy*g of
// the row is equal, e.g. a row of one column, where x - mean is 0 as well and dx is
// exactly 0; a fused multiply-add would leave the rounding error of dy*g times rstd
// there (about 1e-5 with eps = 1e-5).
//
// With `partial` set, block b also writes the sums over its rows of dy * xhat to
// partial[b * cols + c] and of dy to partial[(gridDim.x + b) * cols + c]. The block's
// row groups hold the same columns, so they add their register sums through dynamic
// shared memory (2 * blockDim.x * blockDim.y * VEC floats), in the order of threadIdx.y.
//
// kResidual: the residual variant's backward, x its stored sum. dx_add ([rows, cols], the
// gradient the returned sum received; null: none) is added to dx in fp32 before the one
// rounding, and dx2 ([rows, cols]; null: none) receives dx too: the residual's gradient,
// x's values in a tensor of its own (autograd would otherwise hand both leaves one
// storage). Without kResidual both are unused (null).
template <typename T, int VEC, int NV, bool kResidual>
__global__ void __launch_bounds__(kMaxRowThreads, 1)
    ln_backward_reg_kernel(const T* __restrict__ dy, const T* __restrict__ x, const T* __restrict__ gamma,
                           const float* __restrict__ mean, const float* __restrict__ rstd, T* __restrict__ dx,
                           float* __restrict__ partial, int64_t rows, int64_t cols, const T* __restrict__ dx_add,
                           T* __restrict__ dx2) {
  __shared__ float2 scratch[2][kGpuMaxWarps];
  extern __shared__ float ln_col_scratch[];
  const int tpr = static_cast<int>(blockDim.x);
  const int tx = static_cast<int>(threadIdx.x);
  const int nvec = static_cast<int>(cols / VEC);
  const float n = static_cast<float>(cols);
  const int64_t step = static_cast<int64_t>(gridDim.x) * blockDim.y;
  const int64_t first = static_cast<int64_t>(blockIdx.x) * blockDim.y;

  float dgamma[NV][VEC], dbeta[NV][VEC];
#pragma unroll
  for (int k = 0; k < NV; ++k) {
#pragma unroll
    for (int e = 0; e < VEC; ++e) dgamma[k][e] = dbeta[k][e] = 0.0f;
  }
  // Loading the next row before working on the current one costs a second set of raw
  // slices: worth it while the slices are small (the persistent grid has few warps per
  // multiprocessor to hide latency with), not where it would spill.
  constexpr bool kPrefetch = NV * VEC <= 16;
  RowSlices<T, VEC, NV> next{};  // zeros until fetched: a row group past the end copies them, unused
  if constexpr (kPrefetch) fetch_row(next, dy, x, mean, rstd, first + threadIdx.y, rows, cols, tx, tpr, nvec);
  int parity = 0;
  for (int64_t base = first; base < rows; base += step, parity ^= 1) {  // same trip count block-wide
    const int64_t row = base + threadIdx.y;
    const bool active = row < rows;
    RowSlices<T, VEC, NV> cur;
    if constexpr (kPrefetch) {
      cur = next;
      fetch_row(next, dy, x, mean, rstd, row + step, rows, cols, tx, tpr, nvec);  // in flight meanwhile
    } else {
      fetch_row(cur, dy, x, mean, rstd, row, rows, cols, tx, tpr, nvec);
    }
    const float mu = active ? cur.mean : 0.0f;
    const float rs = active ? cur.rstd : 0.0f;
    float2 acc = make_float2(0.0f, 0.0f);
#pragma unroll
    for (int k = 0; k < NV; ++k) {
      const int j = tx + k * tpr;
      if (!active || j >= nvec) continue;
      float g[VEC];
      load_params<VEC>(g, gamma, static_cast<int64_t>(j) * VEC, 1.0f);
#pragma unroll
      for (int e = 0; e < VEC; ++e) {
        const float d = to_float(cur.dy[k].v[e]);
        const float xm = to_float(cur.x[k].v[e]) - mu;
        const float dyg = gpu_mul_rn(d, g[e]);
        acc.x += dyg;
        acc.y += dyg * xm * rs;
        dgamma[k][e] += d * xm * rs;
        dbeta[k][e] += d;
      }
    }
    acc = group_sum(acc, scratch[parity]);
    const float c1 = gpu_div_rn(acc.x, n);
    const float c2 = gpu_div_rn(acc.y, n);
    if (!active) continue;
    T* dxr = dx + row * cols;
#pragma unroll
    for (int k = 0; k < NV; ++k) {
      const int j = tx + k * tpr;
      if (j >= nvec) continue;
      // gamma again (an L1 hit) and dy*g recomputed, bit for bit the product summed
      // above: cheaper than holding dy*g in registers through the reduction.
      float g[VEC], out[VEC];
      load_params<VEC>(g, gamma, static_cast<int64_t>(j) * VEC, 1.0f);
#pragma unroll
      for (int e = 0; e < VEC; ++e) {
        const float dyg = gpu_mul_rn(to_float(cur.dy[k].v[e]), g[e]);
        const float xm = to_float(cur.x[k].v[e]) - mu;
        out[e] = rs * (dyg - c1 - xm * rs * c2);
      }
      const int64_t at = static_cast<int64_t>(j) * VEC;
      if constexpr (kResidual) {
        // The addend is read here, not with the row's other slices: held through the
        // reduction (or prefetched with the next row) it spills the larger slices (ptxas
        // -v, sm_80 / sm_90); the block's other row groups cover this load's latency.
        if (dx_add != nullptr) {
          float add[VEC];
          load_as_float<VEC>(add, dx_add + row * cols + at);
#pragma unroll
          for (int e = 0; e < VEC; ++e) out[e] += add[e];
        }
        if (dx2 != nullptr) store_from_float<VEC>(dx2 + row * cols + at, out);
      }
      store_from_float<VEC>(dxr + at, out);
    }
  }
  if (partial == nullptr) return;

  // Column partials of the block. Chunk k holds the columns of every thread's vector k:
  // [k * tpr * VEC, (k + 1) * tpr * VEC); each row group writes its sums of the chunk to
  // shared memory (dgamma's, then dbeta's, chunk floats each), then the block's threads
  // add the row groups' values column by column, in row-group order. The loop over k is
  // kept rolled (one copy of this code rather than NV): it always stores slot 0 and then
  // shifts the register arrays down by one slot, so they are indexed by constants only.
  const int threads = tpr * static_cast<int>(blockDim.y);
  const int lin = static_cast<int>(threadIdx.y) * tpr + tx;
  const int chunk = tpr * VEC;
  const int group_floats = 2 * chunk;
  float* const out_dgamma = partial + static_cast<int64_t>(blockIdx.x) * cols;
  float* const out_dbeta = partial + (static_cast<int64_t>(gridDim.x) + blockIdx.x) * cols;
#pragma unroll 1
  for (int k = 0; k < NV && k * tpr < nvec; ++k) {  // the same trip count in every thread
    float* mine = ln_col_scratch + threadIdx.y * group_floats + tx * VEC;
#pragma unroll
    for (int e = 0; e < VEC; ++e) {
      mine[e] = dgamma[0][e];
      mine[chunk + e] = dbeta[0][e];
    }
    __syncthreads();
    for (int c = lin; c < group_floats; c += threads) {
      const int which = c < chunk ? 0 : 1;
      const int64_t col = static_cast<int64_t>(k) * chunk + (c - which * chunk);
      if (col >= cols) continue;
      float total = 0.0f;
      for (int r = 0; r < static_cast<int>(blockDim.y); ++r) total += ln_col_scratch[r * group_floats + c];
      (which == 0 ? out_dgamma : out_dbeta)[col] = total;
    }
    __syncthreads();
#pragma unroll
    for (int i = 0; i + 1 < NV; ++i) {
#pragma unroll
      for (int e = 0; e < VEC; ++e) {
        dgamma[i][e] = dgamma[i + 1][e];
        dbeta[i][e] = dbeta[i + 1][e];
      }
    }
  }
}

// out[c] = sum over p (in order) of partial[p * cols + c], for dgamma (blockIdx.y 0, the
// first `parts` partial rows) and dbeta (blockIdx.y 1, the next `parts`). Block
// (32 columns, kFinalizeLanes lanes): lane l adds rows l, l + lanes, ... and the lanes'
// sums are added in lane order, so the order is fixed for given parts.
constexpr int kFinalizeCols = 32;
constexpr int kFinalizeLanes = 16;

template <typename T>
__global__ void ln_params_finalize_kernel(const float* __restrict__ partial, int64_t parts, int64_t cols,
                                          T* __restrict__ dgamma, T* __restrict__ dbeta) {
  __shared__ float lanes[kFinalizeLanes][kFinalizeCols + 1];
  T* out = blockIdx.y == 0 ? dgamma : dbeta;
  if (out == nullptr) return;  // the whole block
  const float* src = partial + static_cast<int64_t>(blockIdx.y) * parts * cols;
  const int64_t col = static_cast<int64_t>(blockIdx.x) * kFinalizeCols + threadIdx.x;
  float total = 0.0f;
  if (col < cols) {
#pragma unroll 4
    for (int64_t p = threadIdx.y; p < parts; p += kFinalizeLanes) total += src[p * cols + col];
  }
  lanes[threadIdx.y][threadIdx.x] = total;
  __syncthreads();
  if (threadIdx.y != 0 || col >= cols) return;
  total = lanes[0][threadIdx.x];
#pragma unroll
  for (int l = 1; l < kFinalizeLanes; ++l) total += lanes[l][threadIdx.x];
  out[col] = from_float<T>(total);
}

// ---------------------------------------------------------------- generic loop kernels

// For rows longer than the register slices hold. One block per row group as in
// gpu_row_launch. Three reads of the row, the statistics in double: the mean from the row's
// sum, then the variance as the mean of (x - mean)^2 (two passes: nothing cancels however far
// the values sit from their mean), then the output. Double, because these rows are long: an
// fp32 sum or moment merge of 16K-20K values rounds a few units in its last place, and y
// carries the mean's error times rstd, which put the fp32 kernels at 2-3x torch's error on
// rows with a large mean or a far outlier (H200, 2026-11-27). In double both statistics are
// exact to well below fp32's rounding, and no fp32 value can overflow a double sum or square
// (|x| <= FLT_MAX: x^2 < 1.2e77), so a row of 1e35 gets mean 1e35 exactly and y = beta. The
// mean reaches y as two floats (hi + lo), so y does not carry the rounding of the mean to
// fp32 either. The variance is rounded to fp32 before rstd, so one past FLT_MAX is inf and
// rstd 0 (y = beta), as torch gives. The second and third reads mostly hit L2 (a row is at
// most a few hundred KB), and these sizes are rare.
// kResidual as in ln_forward_reg_kernel: the first pass forms and writes the sum, the later
// ones read it back (each thread the elements it wrote).
template <typename T, int VEC, bool kResidual>
__global__ void ln_forward_loop_kernel(const T* __restrict__ x, const T* __restrict__ gamma,
                                       const T* __restrict__ beta, T* __restrict__ y, float* __restrict__ mean_out,
                                       float* __restrict__ rstd_out, int64_t rows, int64_t cols, float eps,
                                       const T* __restrict__ residual, const T* __restrict__ hidden_bias,
                                       T* __restrict__ sum_out) {
  // One buffer per reduction (see group_sum).
  __shared__ double sum_scratch[kGpuMaxWarps];
  __shared__ double square_scratch[kGpuMaxWarps];
  const int64_t row = static_cast<int64_t>(blockIdx.x) * blockDim.y + threadIdx.y;
  const bool active = row < rows;
  const int64_t offset = (active ? row : 0) * cols;
  const T* xr = x + offset;
  // What the later passes read: the input, or the sum the first pass wrote.
  const T* normalized = xr;
  if constexpr (kResidual) normalized = sum_out + offset;
  const int64_t first = static_cast<int64_t>(threadIdx.x) * VEC;
  const int64_t stride = static_cast<int64_t>(blockDim.x) * VEC;
  double sum = 0.0;
  if (active) {
    for (int64_t i = first; i < cols; i += stride) {
      float v[VEC];
      if constexpr (kResidual) {
        residual_sum<VEC>(v, x, residual, hidden_bias, sum_out, offset + i, i);
      } else {
        load_as_float<VEC>(v, xr + i);
      }
#pragma unroll
      for (int k = 0; k < VEC; ++k) sum += static_cast<double>(v[k]);
    }
  }
  const double mean = group_sum(sum, sum_scratch) / static_cast<double>(cols);
  double squares = 0.0;
  if (active) {
    for (int64_t i = first; i < cols; i += stride) {
      float v[VEC];
      load_as_float<VEC>(v, normalized + i);
#pragma unroll
      for (int k = 0; k < VEC; ++k) {
        const double d = static_cast<double>(v[k]) - mean;
        squares += d * d;
      }
    }
  }
  const double var = static_cast<double>(static_cast<float>(group_sum(squares, square_scratch) / cols));
  if (!active) return;  // after both block-wide reductions
  const float rstd = static_cast<float>(1.0 / sqrt(var + static_cast<double>(eps)));
  const float mean_hi = static_cast<float>(mean);
  const float mean_lo = static_cast<float>(mean - static_cast<double>(mean_hi));
  if (threadIdx.x == 0) {
    mean_out[row] = mean_hi;
    rstd_out[row] = rstd;
  }
  T* yr = y + row * cols;
  for (int64_t i = first; i < cols; i += stride) {
    float v[VEC], g[VEC], b[VEC];
    load_as_float<VEC>(v, normalized + i);
    load_params<VEC>(g, gamma, i, 1.0f);
    load_params<VEC>(b, beta, i, 0.0f);
#pragma unroll
    for (int k = 0; k < VEC; ++k) v[k] = ((v[k] - mean_hi) - mean_lo) * rstd * g[k] + b[k];
    store_from_float<VEC>(yr + i, v);
  }
}

// dx as ln_backward_reg_kernel (same formula and roundings, kResidual with dx_add and
// dx2 too), reading the row twice.
template <typename T, int VEC, bool kResidual>
__global__ void ln_backward_dx_loop_kernel(const T* __restrict__ dy, const T* __restrict__ x,
                                           const T* __restrict__ gamma, const float* __restrict__ mean,
                                           const float* __restrict__ rstd, T* __restrict__ dx, int64_t rows,
                                           int64_t cols, const T* __restrict__ dx_add, T* __restrict__ dx2) {
  __shared__ float2 scratch[kGpuMaxWarps];
  const int64_t row = static_cast<int64_t>(blockIdx.x) * blockDim.y + threadIdx.y;
  const bool active = row < rows;
  const int64_t base = (active ? row : 0) * cols;
  const float mu = mean[active ? row : 0];
  const float rs = rstd[active ? row : 0];
  float2 acc = make_float2(0.0f, 0.0f);
  if (active) {
    for (int64_t i = static_cast<int64_t>(threadIdx.x) * VEC; i < cols; i += static_cast<int64_t>(blockDim.x) * VEC) {
      float d[VEC], v[VEC], g[VEC];
      load_as_float<VEC>(d, dy + base + i);
      load_as_float<VEC>(v, x + base + i);
      load_params<VEC>(g, gamma, i, 1.0f);
#pragma unroll
      for (int k = 0; k < VEC; ++k) {
        const float dyg = gpu_mul_rn(d[k], g[k]);
        acc.x += dyg;
        acc.y += dyg * (v[k] - mu) * rs;
      }
    }
  }
  acc = row_reduce(acc, GpuSumOp(), scratch);
  if (!active) return;
  const float n = static_cast<float>(cols);
  const float c1 = gpu_div_rn(acc.x, n);
  const float c2 = gpu_div_rn(acc.y, n);
  for (int64_t i = static_cast<int64_t>(threadIdx.x) * VEC; i < cols; i += static_cast<int64_t>(blockDim.x) * VEC) {
    float d[VEC], v[VEC], g[VEC];
    load_as_float<VEC>(d, dy + base + i);
    load_as_float<VEC>(v, x + base + i);
    load_params<VEC>(g, gamma, i, 1.0f);
#pragma unroll
    for (int k = 0; k < VEC; ++k) d[k] = rs * (gpu_mul_rn(d[k], g[k]) - c1 - (v[k] - mu) * rs * c2);
    if constexpr (kResidual) {
      if (dx_add != nullptr) {
        float a[VEC];
        load_as_float<VEC>(a, dx_add + base + i);
#pragma unroll
        for (int k = 0; k < VEC; ++k) d[k] += a[k];
      }
      if (dx2 != nullptr) store_from_float<VEC>(dx2 + base + i, d);
    }
    store_from_float<VEC>(dx + base + i, d);
  }
}

// Partial column sums of dy * xhat (dgamma) and dy (dbeta) over a slice of rows, for
// the loop path: block (kColTileX columns, kColTileY row lanes), blockIdx.y the slice.
template <typename T>
__global__ void ln_backward_params_loop_kernel(const T* __restrict__ dy, const T* __restrict__ x,
                                               const float* __restrict__ mean, const float* __restrict__ rstd,
                                               float* __restrict__ partial, int64_t rows, int64_t cols,
                                               int64_t parts) {
  __shared__ float tile[kColTileY][kColTileX + 1];
  const int64_t col = static_cast<int64_t>(blockIdx.x) * kColTileX + threadIdx.x;
  float dgamma = 0.0f;
  float dbeta = 0.0f;
  if (col < cols) {
    for (int64_t r = static_cast<int64_t>(blockIdx.y) * kColTileY + threadIdx.y; r < rows;
         r += parts * kColTileY) {
      const float d = to_float(dy[r * cols + col]);
      dgamma += d * (to_float(x[r * cols + col]) - mean[r]) * rstd[r];
      dbeta += d;
    }
  }
  dgamma = col_tile_sum(dgamma, tile);
  dbeta = col_tile_sum(dbeta, tile);
  if (threadIdx.y == 0 && col < cols) {
    partial[static_cast<int64_t>(blockIdx.y) * cols + col] = dgamma;
    partial[(parts + blockIdx.y) * cols + col] = dbeta;
  }
}

// ---------------------------------------------------------------- host side

struct RegShape {
  int tpr = 0;  // threads per row
  int nv = 0;   // vectors per thread; 0: the row does not fit in registers
};

// The slice sizes (vectors per thread) instantiated for one kernel, ascending. A row
// takes the smallest row group (power of two, 32..kMaxRowThreads threads) whose
// threads can hold it in one of the sizes, and the smallest such size: fewer threads
// per row mean more independent loads per thread and cheaper reductions. A size
// larger than the row needs costs registers only: slot k holds vectors tx + k * tpr,
// so the slots past the row end are past it for all the lanes of a warp but at most
// one, and are skipped by a branch the warp takes together. Hence one or two sizes
// per kernel, which keeps the number of kernels, and the compile time, down.
template <int... Sizes>
struct SliceSizes {
  static RegShape pick(int64_t nvec) {
    RegShape shape;
    for (int tpr = 32; tpr <= kMaxRowThreads; tpr *= 2) {
      const int64_t need = gpu_ceil_div(nvec, tpr);
      for (int size : {Sizes...}) {
        if (need <= size) {
          shape.tpr = tpr;
          shape.nv = size;
          return shape;
        }
      }
    }
    return shape;
  }
  // f(IntC<nv>{}) for the picked size nv.
  template <typename F>
  static gpuError_t with(int nv, F&& f) {
    gpuError_t err = gpuErrorInvalidValue;
    (void)((nv == Sizes ? (err = f(IntC<Sizes>{}), true) : false) || ...);
    return err;
  }
};

// The register budget sets the sizes. The forward keeps one float per element (d),
// within 64 registers; the backward about four (raw dy and x, the next row's raw dy
// and x, the two column sums), within 128. Each size is the largest that compiles
// without spills for sm_80 and sm_90 (nvcc -Xptxas -v): 16-bit types 32 elements
// forward, 16 or 24 backward; fp32 24 forward, 16 backward; a scalar slot (VEC == 1)
// takes a whole register even for a 16-bit element: 12 slots forward, 10 backward
// (4097 columns in 512 threads need 9). One exception: the plain forward's scalar kernels
// (12 slots), which hold the sums of d and d^2 through their second pass, spill a little
// (ptxas, nvcc 13.0: 4 bytes of spill stores and 8 of loads on sm_90, 20 and 24 on sm_80);
// kept, since 11 slots would send odd rows of 5633..6144 columns to the loop kernels, which
// read the row three times. (The residual forward's scalar kernels do not spill.) Backward
// 16-bit rows take 2 vectors (16 elements, with the next-row prefetch) or 3 (24, without):
// the smallest row group wins, so 768 columns take one warp with 3 vectors, 1024 two warps
// with 2, 12288 512 threads with 3.
//
// The residual forward also loads the residual and the hidden bias and stores the sum,
// which leaves fewer registers for the row, by the same measure: 4 vectors (16-bit 32
// elements as before, fp32 16: 8192 columns in 512 threads), and scalar slots 11 for
// 16-bit types, 8 for fp32 (so an odd fp32 hidden size above 4096, 4097 included, takes
// the loop kernel). The residual backward's extra input and output cost no slice
// registers (see ln_backward_reg_kernel).
template <typename T, int VEC, bool kResidual = false>
using ForwardSlices = std::conditional_t<
    kResidual, std::conditional_t<VEC == 1, SliceSizes<sizeof(T) == 2 ? 11 : 8>, SliceSizes<4>>,
    std::conditional_t<VEC == 1, SliceSizes<12>, std::conditional_t<sizeof(T) == 2, SliceSizes<4>, SliceSizes<6>>>>;
template <typename T, int VEC>
using BackwardSlices =
    std::conditional_t<VEC == 1, SliceSizes<10>, std::conditional_t<sizeof(T) == 2, SliceSizes<2, 3>, SliceSizes<4>>>;

template <typename T>
constexpr int vec_width() {
  return 16 / static_cast<int>(sizeof(T));
}

// The widest vector (16 bytes or 1 element) that cols and every pointer allow.
template <typename T>
int pick_vec(int64_t cols, std::initializer_list<const T*> pointers) {
  constexpr int kVec = vec_width<T>();
  if (cols % kVec != 0) return 1;
  for (const T* p : pointers) {
    if (p != nullptr && !gpu_is_aligned(p, kVec)) return 1;
  }
  return kVec;
}

// The backward's buffers are handed over untyped to its plan, before the launch sees them typed.
template <typename T>
int pick_vec(int64_t cols, std::initializer_list<const void*> pointers) {
  constexpr int kVec = vec_width<T>();
  if (cols % kVec != 0) return 1;
  for (const void* p : pointers) {
    if (p != nullptr && !gpu_is_aligned(static_cast<const T*>(p), kVec)) return 1;
  }
  return kVec;
}

// The backward's kernels and grid for a shape: the register kernel's row group (shape.nv 0:
// the loop kernels) and blocks, and `parts`, the partial rows of dgamma (and of dbeta) it
// writes: one per block of the persistent register grid, or one per slice of rows of the loop
// path's column kernel, at most `multiprocessors` * kBackwardBlocksPerSm either way. The plan
// (the workspace) and the launch (the grid) both take it from here, with the same count.
struct BackwardGrid {
  RegShape shape;
  int per_block = 0;  // row groups per block of the register kernel
  int64_t parts = 1;
};

template <typename T, int VEC>
BackwardGrid backward_grid(int64_t rows, int64_t cols, int multiprocessors) {
  BackwardGrid grid;
  grid.shape = BackwardSlices<T, VEC>::pick(cols / VEC);
  const int64_t blocks = static_cast<int64_t>(std::max(1, multiprocessors)) * kBackwardBlocksPerSm;
  if (grid.shape.nv == 0) {
    grid.parts = std::min(gpu_ops::col_reduce_parts(rows), blocks);
  } else {
    grid.per_block = std::max(1, kBackwardBlockThreads / grid.shape.tpr);
    grid.parts = std::min(gpu_ceil_div(rows, grid.per_block), blocks);
  }
  grid.parts = std::max<int64_t>(1, grid.parts);
  return grid;
}

template <typename T>
int loop_vec(int64_t cols, std::initializer_list<const T*> pointers) {
  if (cols % 4 != 0) return 1;
  for (const T* p : pointers) {
    if (p != nullptr && !gpu_is_aligned(p, 4)) return 1;
  }
  return 4;
}

unsigned grid_of(int64_t blocks) {
  return static_cast<unsigned>(std::max<int64_t>(1, std::min<int64_t>(blocks, int64_t{1} << 30)));
}

// residual null: plain LayerNorm of x. Otherwise the residual variant (hidden_bias may be
// null), which writes the sum to `sum`.
template <typename T>
gpuError_t forward_typed(const T* x, const T* residual, const T* hidden_bias, const T* gamma, const T* beta, T* sum,
                         T* y, float* mean, float* rstd, int64_t rows, int64_t cols, float eps, gpuStream_t stream) {
  const int vec = pick_vec<T>(cols, {x, residual, hidden_bias, gamma, beta, sum, y});
  const auto launch = [&](auto vec_tag, auto residual_tag) -> gpuError_t {
    constexpr int VEC = decltype(vec_tag)::value;
    constexpr bool kResidual = decltype(residual_tag)::value;
    using Slices = ForwardSlices<T, VEC, kResidual>;
    const RegShape shape = Slices::pick(cols / VEC);
    if (shape.nv == 0) {
      const GpuRowLaunch loop = gpu_row_launch(rows, cols, 8);
      if (loop_vec<T>(cols, {x, residual, hidden_bias, gamma, beta, sum, y}) == 4) {
        ln_forward_loop_kernel<T, 4, kResidual><<<loop.grid, loop.block, 0, stream>>>(
            x, gamma, beta, y, mean, rstd, rows, cols, eps, residual, hidden_bias, sum);
      } else {
        ln_forward_loop_kernel<T, 1, kResidual><<<loop.grid, loop.block, 0, stream>>>(
            x, gamma, beta, y, mean, rstd, rows, cols, eps, residual, hidden_bias, sum);
      }
      return gpuGetLastError();
    }
    const int per_block = std::max(1, kForwardBlockThreads / shape.tpr);
    const dim3 block(static_cast<unsigned>(shape.tpr), static_cast<unsigned>(per_block));
    const unsigned grid = grid_of(gpu_ceil_div(rows, per_block));
    return Slices::with(shape.nv, [&](auto nv_tag) {
      constexpr int NV = decltype(nv_tag)::value;
      ln_forward_reg_kernel<T, VEC, NV, kResidual><<<grid, block, 0, stream>>>(
          x, gamma, beta, y, mean, rstd, rows, cols, eps, row_count(cols), residual, hidden_bias, sum);
      return gpuGetLastError();
    });
  };
  const auto with_vec = [&](auto residual_tag) {
    return vec == 1 ? launch(IntC<1>{}, residual_tag) : launch(IntC<vec_width<T>()>{}, residual_tag);
  };
  return residual == nullptr ? with_vec(std::false_type{}) : with_vec(std::true_type{});
}

// `residual`: the residual variant's kernels, with dx_add and dx2 (either may be null);
// otherwise the plain LayerNorm ones (dx_add and dx2 null).
// The kernels, grid and vector width come from `plan` (made for these buffers and this
// device); the workspace holds plan.workspace floats.
template <typename T>
gpuError_t backward_typed(bool residual, const T* dy, const T* x, const T* gamma, const float* mean,
                          const float* rstd, T* dx, const T* dx_add, T* dx2, T* dgamma, T* dbeta, float* workspace,
                          const gpu_ops::LayerNormBackwardPlan& plan, int64_t rows, int64_t cols,
                          gpuStream_t stream) {
  const bool params = dgamma != nullptr || dbeta != nullptr;
  if (params && workspace == nullptr) return gpuErrorInvalidValue;
  float* partial = params ? workspace : nullptr;
  const int vec = plan.vec;
  // A plan made for other buffers: its vectors may not fit these, nor its workspace this grid.
  if (plan.rows != rows || plan.cols != cols || plan.elem_bytes != static_cast<int>(sizeof(T)) ||
      (vec != 1 && pick_vec<T>(cols, {dy, x, gamma, dx, dx_add, dx2}) != vec)) {
    return gpuErrorInvalidValue;
  }
  const auto launch = [&](auto vec_tag, auto residual_tag) -> gpuError_t {
    constexpr int VEC = decltype(vec_tag)::value;
    constexpr bool kResidual = decltype(residual_tag)::value;
    using Slices = BackwardSlices<T, VEC>;
    const BackwardGrid planned = backward_grid<T, VEC>(rows, cols, plan.multiprocessors);
    const RegShape shape = planned.shape;
    const int64_t parts = planned.parts;
    if (shape.nv == 0) {
      const GpuRowLaunch loop = gpu_row_launch(rows, cols, 8);
      if (loop_vec<T>(cols, {dy, x, gamma, dx, dx_add, dx2}) == 4) {
        ln_backward_dx_loop_kernel<T, 4, kResidual><<<loop.grid, loop.block, 0, stream>>>(
            dy, x, gamma, mean, rstd, dx, rows, cols, dx_add, dx2);
      } else {
        ln_backward_dx_loop_kernel<T, 1, kResidual><<<loop.grid, loop.block, 0, stream>>>(
            dy, x, gamma, mean, rstd, dx, rows, cols, dx_add, dx2);
      }
      gpuError_t err = gpuGetLastError();
      if (err != gpuSuccess || !params) return err;
      const dim3 grid(static_cast<unsigned>(gpu_ceil_div(cols, kColTileX)), static_cast<unsigned>(parts));
      ln_backward_params_loop_kernel<T><<<grid, dim3(kColTileX, kColTileY), 0, stream>>>(dy, x, mean, rstd, partial,
                                                                                         rows, cols, parts);
    } else {
      const int per_block = planned.per_block;
      const dim3 block(static_cast<unsigned>(shape.tpr), static_cast<unsigned>(per_block));
      const size_t smem = params ? 2 * sizeof(float) * VEC * shape.tpr * per_block : 0;
      const gpuError_t err = Slices::with(shape.nv, [&](auto nv_tag) {
        constexpr int NV = decltype(nv_tag)::value;
        ln_backward_reg_kernel<T, VEC, NV, kResidual><<<static_cast<unsigned>(parts), block, smem, stream>>>(
            dy, x, gamma, mean, rstd, dx, partial, rows, cols, dx_add, dx2);
        return gpuGetLastError();
      });
      if (err != gpuSuccess || !params) return err;
    }
    const dim3 grid(static_cast<unsigned>(gpu_ceil_div(cols, kFinalizeCols)), 2);
    ln_params_finalize_kernel<T><<<grid, dim3(kFinalizeCols, kFinalizeLanes), 0, stream>>>(partial, parts, cols,
                                                                                           dgamma, dbeta);
    return gpuGetLastError();
  };
  const auto with_vec = [&](auto residual_tag) {
    return vec == 1 ? launch(IntC<1>{}, residual_tag) : launch(IntC<vec_width<T>()>{}, residual_tag);
  };
  return residual ? with_vec(std::true_type{}) : with_vec(std::false_type{});
}

}  // namespace

namespace gpu_ops {

gpuError_t layer_norm_forward(const void* x, const void* gamma, const void* beta, void* y, float* mean,
                              float* rstd, int64_t rows, int64_t cols, float eps, DType dtype,
                              gpuStream_t stream) {
  if (rows == 0 || cols == 0) return gpuSuccess;
  return gpu_dispatch_float(dtype, [&](auto tag) {
    using T = decltype(tag);
    return forward_typed<T>(static_cast<const T*>(x), nullptr, nullptr, static_cast<const T*>(gamma),
                            static_cast<const T*>(beta), nullptr, static_cast<T*>(y), mean, rstd, rows, cols, eps,
                            stream);
  });
}

gpuError_t residual_layer_norm_forward(const void* x, const void* residual, const void* hidden_bias,
                                       const void* gamma, const void* beta, void* sum, void* y, float* mean,
                                       float* rstd, int64_t rows, int64_t cols, float eps, DType dtype,
                                       gpuStream_t stream) {
  if (rows == 0 || cols == 0) return gpuSuccess;
  if (residual == nullptr || sum == nullptr) return gpuErrorInvalidValue;
  return gpu_dispatch_float(dtype, [&](auto tag) {
    using T = decltype(tag);
    return forward_typed<T>(static_cast<const T*>(x), static_cast<const T*>(residual),
                            static_cast<const T*>(hidden_bias), static_cast<const T*>(gamma),
                            static_cast<const T*>(beta), static_cast<T*>(sum), static_cast<T*>(y), mean, rstd, rows,
                            cols, eps, stream);
  });
}

LayerNormBackwardPlan layer_norm_backward_plan(int64_t rows, int64_t cols, DType dtype,
                                               std::initializer_list<const void*> buffers) {
  LayerNormBackwardPlan plan;
  plan.rows = rows;
  plan.cols = cols;
  // The runtime answers from cached properties; the caller has made the buffers' device current.
  plan.multiprocessors = std::max(1, gpu_multiprocessor_count());
  if (rows <= 0 || cols <= 0) return plan;
  (void)gpu_dispatch_float(dtype, [&](auto tag) {
    using T = decltype(tag);
    plan.elem_bytes = static_cast<int>(sizeof(T));
    plan.vec = pick_vec<T>(cols, buffers);
    const int64_t parts = plan.vec == 1 ? backward_grid<T, 1>(rows, cols, plan.multiprocessors).parts
                                        : backward_grid<T, vec_width<T>()>(rows, cols, plan.multiprocessors).parts;
    plan.workspace = 2 * parts * cols;
    return gpuSuccess;
  });
  return plan;
}

namespace {

gpuError_t backward_any(bool residual, const void* dy, const void* x, const void* gamma, const float* mean,
                        const float* rstd, void* dx, const void* dx_add, void* dx2, void* dgamma, void* dbeta,
                        float* workspace, const LayerNormBackwardPlan& plan, int64_t rows, int64_t cols, DType dtype,
                        gpuStream_t stream) {
  if (cols == 0) return gpuSuccess;
  if (rows == 0) {
    // No rows to sum: dgamma and dbeta are zeros, which the callers allocate uninitialized.
    // All-zero bits are +0.0 in every storage type.
    const size_t bytes = static_cast<size_t>(cols) * (dtype == DType::kFloat32 ? 4 : 2);
    for (void* out : {dgamma, dbeta}) {
      if (out == nullptr) continue;
      const gpuError_t err = gpuMemsetAsync(out, 0, bytes, stream);
      if (err != gpuSuccess) return err;
    }
    return gpuSuccess;
  }
  return gpu_dispatch_float(dtype, [&](auto tag) {
    using T = decltype(tag);
    return backward_typed<T>(residual, static_cast<const T*>(dy), static_cast<const T*>(x),
                             static_cast<const T*>(gamma), mean, rstd, static_cast<T*>(dx),
                             static_cast<const T*>(dx_add), static_cast<T*>(dx2), static_cast<T*>(dgamma),
                             static_cast<T*>(dbeta), workspace, plan, rows, cols, stream);
  });
}

}  // namespace

gpuError_t layer_norm_backward(const void* dy, const void* x, const void* gamma, const float* mean,
                               const float* rstd, void* dx, void* dgamma, void* dbeta, float* workspace,
                               const LayerNormBackwardPlan& plan, int64_t rows, int64_t cols, DType dtype,
                               gpuStream_t stream) {
  return backward_any(false, dy, x, gamma, mean, rstd, dx, nullptr, nullptr, dgamma, dbeta, workspace, plan, rows,
                      cols, dtype, stream);
}

gpuError_t residual_layer_norm_backward(const void* dy, const void* sum, const void* gamma, const float* mean,
                                        const float* rstd, const void* dsum, void* dx, void* dresidual,
                                        void* dgamma, void* dbeta, float* workspace,
                                        const LayerNormBackwardPlan& plan, int64_t rows, int64_t cols, DType dtype,
                                        gpuStream_t stream) {
  return backward_any(true, dy, sum, gamma, mean, rstd, dx, dsum, dresidual, dgamma, dbeta, workspace, plan, rows,
                      cols, dtype, stream);
}

}  // namespace gpu_ops
