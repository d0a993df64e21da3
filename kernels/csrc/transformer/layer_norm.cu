// LayerNorm over the last dimension, forward and backward.
//
// Forward reads each row twice (statistics, then output). The statistics use
// sums of (x - x0) and (x - x0)^2 with x0 the row's first element: one read pass,
// and none of the cancellation that raw sums of squares suffer when |mean| >> std.
// The output is formed from (x - x0) - mean(x - x0) for the same reason: rounding
// the mean itself to fp32 would cost precision when |mean| >> std.
// Backward: dx from two row sums; dgamma/dbeta as column sums in two steps.
#include "gpu_reduce.h"
#include "gpu_transformer.h"

namespace {

template <typename T, int VEC>
__global__ void ln_forward_kernel(const T* __restrict__ x, const T* __restrict__ gamma,
                                  const T* __restrict__ beta, T* __restrict__ y, float* __restrict__ mean_out,
                                  float* __restrict__ rstd_out, int64_t rows, int64_t cols, float eps) {
  __shared__ float2 scratch[kGpuMaxWarps];
  const int64_t row = static_cast<int64_t>(blockIdx.x) * blockDim.y + threadIdx.y;
  const bool active = row < rows;
  const T* xr = x + (active ? row : 0) * cols;
  const float shift = to_float(xr[0]);
  float2 acc = make_float2(0.0f, 0.0f);
  if (active) {
    for (int64_t i = static_cast<int64_t>(threadIdx.x) * VEC; i < cols; i += static_cast<int64_t>(blockDim.x) * VEC) {
      float v[VEC];
      load_as_float<VEC>(v, xr + i);
#pragma unroll
      for (int k = 0; k < VEC; ++k) {
        const float d = v[k] - shift;
        acc.x += d;
        acc.y += d * d;
      }
    }
  }
  acc = row_reduce(acc, GpuSumOp(), scratch);
  if (!active) return;  // after the block-wide reduction
  const float n = static_cast<float>(cols);
  const float shifted_mean = gpu_div_rn(acc.x, n);
  const float var = fmaxf(gpu_div_rn(acc.y, n) - shifted_mean * shifted_mean, 0.0f);
  const float mean = shift + shifted_mean;
  const float rstd = rsqrtf(var + eps);
  if (threadIdx.x == 0) {
    mean_out[row] = mean;
    rstd_out[row] = rstd;
  }
  T* yr = y + row * cols;
  for (int64_t i = static_cast<int64_t>(threadIdx.x) * VEC; i < cols; i += static_cast<int64_t>(blockDim.x) * VEC) {
    float v[VEC], g[VEC], b[VEC];
    load_as_float<VEC>(v, xr + i);
    if (gamma != nullptr) {
      load_as_float<VEC>(g, gamma + i);
    } else {
#pragma unroll
      for (int k = 0; k < VEC; ++k) g[k] = 1.0f;
    }
    if (beta != nullptr) {
      load_as_float<VEC>(b, beta + i);
    } else {
#pragma unroll
      for (int k = 0; k < VEC; ++k) b[k] = 0.0f;
    }
#pragma unroll
    for (int k = 0; k < VEC; ++k) v[k] = ((v[k] - shift) - shifted_mean) * rstd * g[k] + b[k];
    store_from_float<VEC>(yr + i, v);
  }
}

// dx = rstd * (dy*g - mean(dy*g) - xhat * mean(dy*g*xhat)), xhat = (x - mean) * rstd.
// dy*g is rounded once, the same way in both passes (gpu_mul_rn: never fused into the
// subtraction that follows). Then dy*g - mean(dy*g) is exactly 0 where every dy*g of
// the row is equal, e.g. a row of one column, where x - mean is 0 as well and dx is
// exactly 0; a fused multiply-add would leave the rounding error of dy*g times rstd
// there (about 1e-5 with eps = 1e-5).
template <typename T, int VEC>
__global__ void ln_backward_dx_kernel(const T* __restrict__ dy, const T* __restrict__ x,
                                      const T* __restrict__ gamma, const float* __restrict__ mean,
                                      const float* __restrict__ rstd, T* __restrict__ dx, int64_t rows,
                                      int64_t cols) {
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
      if (gamma != nullptr) {
        load_as_float<VEC>(g, gamma + i);
      } else {
#pragma unroll
        for (int k = 0; k < VEC; ++k) g[k] = 1.0f;
      }
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
    if (gamma != nullptr) {
      load_as_float<VEC>(g, gamma + i);
    } else {
#pragma unroll
      for (int k = 0; k < VEC; ++k) g[k] = 1.0f;
    }
#pragma unroll
    for (int k = 0; k < VEC; ++k) d[k] = rs * (gpu_mul_rn(d[k], g[k]) - c1 - (v[k] - mu) * rs * c2);
    store_from_float<VEC>(dx + base + i, d);
  }
}

// Partial column sums of dy * xhat (dgamma) and dy (dbeta) over a slice of rows.
template <typename T>
__global__ void ln_backward_params_kernel(const T* __restrict__ dy, const T* __restrict__ x,
                                          const float* __restrict__ mean, const float* __restrict__ rstd,
                                          float* __restrict__ partial, int64_t rows, int64_t cols, int64_t parts) {
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

template <typename T>
bool row_vectorizable(int64_t cols, std::initializer_list<const T*> pointers) {
  if (cols % 4 != 0) return false;
  for (const T* p : pointers) {
    if (p != nullptr && !gpu_is_aligned(p, 4)) return false;
  }
  return true;
}

}  // namespace

namespace gpu_ops {

gpuError_t layer_norm_forward(const void* x, const void* gamma, const void* beta, void* y, float* mean,
                              float* rstd, int64_t rows, int64_t cols, float eps, DType dtype,
                              gpuStream_t stream) {
  if (rows == 0 || cols == 0) return gpuSuccess;
  return gpu_dispatch_float(dtype, [&](auto tag) {
    using T = decltype(tag);
    const T* xt = static_cast<const T*>(x);
    const T* gt = static_cast<const T*>(gamma);
    const T* bt = static_cast<const T*>(beta);
    T* yt = static_cast<T*>(y);
    const GpuRowLaunch launch = gpu_row_launch(rows, cols, 8);
    if (row_vectorizable<T>(cols, {xt, gt, bt, yt})) {
      ln_forward_kernel<T, 4><<<launch.grid, launch.block, 0, stream>>>(xt, gt, bt, yt, mean, rstd, rows, cols, eps);
    } else {
      ln_forward_kernel<T, 1><<<launch.grid, launch.block, 0, stream>>>(xt, gt, bt, yt, mean, rstd, rows, cols, eps);
    }
    return gpuGetLastError();
  });
}

gpuError_t layer_norm_backward(const void* dy, const void* x, const void* gamma, const float* mean,
                               const float* rstd, void* dx, void* dgamma, void* dbeta, float* workspace,
                               int64_t rows, int64_t cols, DType dtype, gpuStream_t stream) {
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
    const T* dyt = static_cast<const T*>(dy);
    const T* xt = static_cast<const T*>(x);
    const T* gt = static_cast<const T*>(gamma);
    T* dxt = static_cast<T*>(dx);
    const GpuRowLaunch launch = gpu_row_launch(rows, cols, 8);
    if (row_vectorizable<T>(cols, {dyt, xt, gt, dxt})) {
      ln_backward_dx_kernel<T, 4><<<launch.grid, launch.block, 0, stream>>>(dyt, xt, gt, mean, rstd, dxt, rows, cols);
    } else {
      ln_backward_dx_kernel<T, 1><<<launch.grid, launch.block, 0, stream>>>(dyt, xt, gt, mean, rstd, dxt, rows, cols);
    }
    gpuError_t err = gpuGetLastError();
    if (err != gpuSuccess || (dgamma == nullptr && dbeta == nullptr)) return err;
    if (workspace == nullptr) return gpuErrorInvalidValue;
    const int64_t parts = col_reduce_parts(rows);
    const dim3 grid(static_cast<unsigned>(gpu_ceil_div(cols, kColTileX)), static_cast<unsigned>(parts));
    ln_backward_params_kernel<T><<<grid, dim3(kColTileX, kColTileY), 0, stream>>>(dyt, xt, mean, rstd, workspace,
                                                                                  rows, cols, parts);
    const unsigned blocks = static_cast<unsigned>(gpu_ceil_div(cols, 256));
    if (dgamma != nullptr) {
      col_finalize_kernel<T><<<blocks, 256, 0, stream>>>(workspace, parts, cols, static_cast<T*>(dgamma));
    }
    if (dbeta != nullptr) {
      col_finalize_kernel<T><<<blocks, 256, 0, stream>>>(workspace + parts * cols, parts, cols,
                                                         static_cast<T*>(dbeta));
    }
    return gpuGetLastError();
  });
}

}  // namespace gpu_ops
