// Scaled masked softmax over the last dimension, forward and backward.
//
// Forward makes one read pass with an online (running max, running sum) pair,
// merged across threads with the same rescaling rule, then one pass that writes
// the output: two reads of the row instead of three. Masked keys (explicit mask,
// causal, or -inf in the input) contribute nothing; a row with no visible key comes
// out as zeros. A visible +inf or NaN score makes the whole row NaN, as
// torch.softmax does (+inf - max is inf - inf); the running state marks such a row
// with a NaN sum, which every later update and merge keeps.
#include <cmath>

#include "gpu_reduce.h"
#include "gpu_transformer.h"

namespace {

// (running max, sum of exp(v - max)). The max is finite or -inf ("nothing finite seen
// yet"); the sum is 0 exactly when nothing was seen (else >= 1, the max's own term),
// and NaN once a +inf or NaN score was: NaN * anything stays NaN through the merge.
struct OnlineSoftmaxOp {
  __device__ __forceinline__ float2 operator()(float2 a, float2 b) const {
    if (a.y == 0.0f) return b;
    if (b.y == 0.0f) return a;
    const float m = fmaxf(a.x, b.x);  // -inf only when both sums are NaN: the result is NaN anyway
    return make_float2(m, a.y * __expf(a.x - m) + b.y * __expf(b.x - m));
  }
};

template <typename T, int VEC>
__global__ void softmax_forward_kernel(const T* __restrict__ x, const uint8_t* __restrict__ mask, T* __restrict__ y,
                                       gpu_ops::SoftmaxShape shape, float scale, bool causal) {
  __shared__ float2 scratch[kGpuMaxWarps];
  const int64_t rows = shape.batch * shape.heads * shape.q_len;
  const int64_t cols = shape.k_len;
  const int64_t row = static_cast<int64_t>(blockIdx.x) * blockDim.y + threadIdx.y;
  const bool active = row < rows;
  const int64_t r = active ? row : 0;
  const int64_t q = r % shape.q_len;
  const int64_t bh = r / shape.q_len;
  const int64_t h = bh % shape.heads;
  const int64_t b = bh / shape.heads;
  const uint8_t* mrow =
      mask == nullptr
          ? nullptr
          : mask + (((b % shape.mask_batch) * shape.mask_heads + (h % shape.mask_heads)) * shape.q_len + q) * cols;
  // Keys 0..last are visible to this query (before the explicit mask).
  const int64_t last = causal ? q + (shape.k_len - shape.q_len) : cols - 1;
  const T* xr = x + r * cols;

  float2 state = make_float2(-INFINITY, 0.0f);
  if (active) {
    for (int64_t i = static_cast<int64_t>(threadIdx.x) * VEC; i < cols; i += static_cast<int64_t>(blockDim.x) * VEC) {
      float v[VEC];
      load_as_float<VEC>(v, xr + i);
#pragma unroll
      for (int k = 0; k < VEC; ++k) {
        const int64_t j = i + k;
        if (j > last || (mrow != nullptr && mrow[j] != 0)) continue;
        const float s = v[k] * scale;
        if (s == -INFINITY) continue;  // an additive -inf mask in the input: a hidden key
        if (!(s < INFINITY)) {         // +inf or NaN: the row is NaN (torch.softmax's result)
          state.y = NAN;
          continue;
        }
        if (s > state.x) {
          state.y = state.y * __expf(state.x - s) + 1.0f;
          state.x = s;
        } else {
          state.y += __expf(s - state.x);
        }
      }
    }
  }
  state = row_reduce(state, OnlineSoftmaxOp(), scratch);
  if (!active) return;
  const float row_max = state.x;
  const bool nan_row = isnan(state.y);  // hidden keys included, as torch.softmax (0 / NaN)
  const float inv_sum = state.y > 0.0f ? gpu_div_rn(1.0f, state.y) : 0.0f;
  T* yr = y + r * cols;
  for (int64_t i = static_cast<int64_t>(threadIdx.x) * VEC; i < cols; i += static_cast<int64_t>(blockDim.x) * VEC) {
    float v[VEC];
    load_as_float<VEC>(v, xr + i);
#pragma unroll
    for (int k = 0; k < VEC; ++k) {
      const int64_t j = i + k;
      const bool hidden = j > last || (mrow != nullptr && mrow[j] != 0);
      v[k] = nan_row ? NAN : (hidden || inv_sum == 0.0f) ? 0.0f : __expf(v[k] * scale - row_max) * inv_sum;
    }
    store_from_float<VEC>(yr + i, v);
  }
}

template <typename T, int VEC>
__global__ void softmax_backward_kernel(const T* __restrict__ dy, const T* __restrict__ y, T* __restrict__ dx,
                                        int64_t rows, int64_t cols, float scale) {
  __shared__ float scratch[kGpuMaxWarps];
  const int64_t row = static_cast<int64_t>(blockIdx.x) * blockDim.y + threadIdx.y;
  const bool active = row < rows;
  const int64_t base = (active ? row : 0) * cols;
  float dot = 0.0f;
  if (active) {
    for (int64_t i = static_cast<int64_t>(threadIdx.x) * VEC; i < cols; i += static_cast<int64_t>(blockDim.x) * VEC) {
      float d[VEC], p[VEC];
      load_as_float<VEC>(d, dy + base + i);
      load_as_float<VEC>(p, y + base + i);
#pragma unroll
      for (int k = 0; k < VEC; ++k) dot += d[k] * p[k];
    }
  }
  dot = row_reduce(dot, GpuSumOp(), scratch);
  if (!active) return;
  for (int64_t i = static_cast<int64_t>(threadIdx.x) * VEC; i < cols; i += static_cast<int64_t>(blockDim.x) * VEC) {
    float d[VEC], p[VEC];
    load_as_float<VEC>(d, dy + base + i);
    load_as_float<VEC>(p, y + base + i);
#pragma unroll
    for (int k = 0; k < VEC; ++k) d[k] = scale * p[k] * (d[k] - dot);
    store_from_float<VEC>(dx + base + i, d);
  }
}

}  // namespace

namespace gpu_ops {

gpuError_t scaled_masked_softmax_forward(const void* x, const uint8_t* mask, void* y, const SoftmaxShape& shape,
                                         float scale, bool causal, DType dtype, gpuStream_t stream) {
  const int64_t rows = shape.batch * shape.heads * shape.q_len;
  const int64_t cols = shape.k_len;
  if (rows == 0 || cols == 0) return gpuSuccess;
  if (shape.mask_batch < 1 || shape.mask_heads < 1) return gpuErrorInvalidValue;
  return gpu_dispatch_float(dtype, [&](auto tag) {
    using T = decltype(tag);
    const T* xt = static_cast<const T*>(x);
    T* yt = static_cast<T*>(y);
    const GpuRowLaunch launch = gpu_row_launch(rows, cols, 8);
    if (cols % 4 == 0 && gpu_is_aligned(xt, 4) && gpu_is_aligned(yt, 4)) {
      softmax_forward_kernel<T, 4><<<launch.grid, launch.block, 0, stream>>>(xt, mask, yt, shape, scale, causal);
    } else {
      softmax_forward_kernel<T, 1><<<launch.grid, launch.block, 0, stream>>>(xt, mask, yt, shape, scale, causal);
    }
    return gpuGetLastError();
  });
}

gpuError_t scaled_masked_softmax_backward(const void* dy, const void* y, void* dx, int64_t rows, int64_t cols,
                                          float scale, DType dtype, gpuStream_t stream) {
  if (rows == 0 || cols == 0) return gpuSuccess;
  return gpu_dispatch_float(dtype, [&](auto tag) {
    using T = decltype(tag);
    const T* dyt = static_cast<const T*>(dy);
    const T* yt = static_cast<const T*>(y);
    T* dxt = static_cast<T*>(dx);
    const GpuRowLaunch launch = gpu_row_launch(rows, cols, 8);
    if (cols % 4 == 0 && gpu_is_aligned(dyt, 4) && gpu_is_aligned(yt, 4) && gpu_is_aligned(dxt, 4)) {
      softmax_backward_kernel<T, 4><<<launch.grid, launch.block, 0, stream>>>(dyt, yt, dxt, rows, cols, scale);
    } else {
      softmax_backward_kernel<T, 1><<<launch.grid, launch.block, 0, stream>>>(dyt, yt, dxt, rows, cols, scale);
    }
    return gpuGetLastError();
  });
}

}  // namespace gpu_ops
