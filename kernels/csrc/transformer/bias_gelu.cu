// y = gelu(x + bias) and its backward, exact ("none", erf) or tanh-approximated,
// matching torch.nn.functional.gelu(x + b, approximate=...).
//
// Forward is a vectorized elementwise pass. Backward is one fused pass: each
// thread owns a column, walks a slice of rows writing dx and summing it for
// dbias, so dy and x are read exactly once.
#include "gpu_reduce.h"
#include "gpu_transformer.h"

namespace {

constexpr float kSqrtHalf = 0.70710678118654752f;      // 1 / sqrt(2)
constexpr float kInvSqrt2Pi = 0.39894228040143268f;    // 1 / sqrt(2 pi)
constexpr float kSqrt2OverPi = 0.79788456080286536f;   // sqrt(2 / pi)
constexpr float kTanhCoeff = 0.044715f;

// tanh to a few fp32 ulps. The ops build with --use_fast_math, which turns tanhf into
// tanh.approx.f32 (relative error ~2^-11): enough for bf16, but ~3e-5 off in fp32 GeLU's
// backward. expm1f keeps its accuracy under fast math, also near 0 where 1 - 2/(e^2a + 1)
// would cancel; past |u| = 10, tanh rounds to +-1 in fp32. A NaN passes through.
__device__ __forceinline__ float accurate_tanh(float u) {
  const float a = fabsf(u) > 10.0f ? 10.0f : fabsf(u);
  const float e = expm1f(2.0f * a);
  return copysignf(e / (e + 2.0f), u);
}

template <bool TANH>
__device__ __forceinline__ float gelu(float z) {
  if constexpr (TANH) {
    return 0.5f * z * (1.0f + accurate_tanh(kSqrt2OverPi * (z + kTanhCoeff * z * z * z)));
  } else {
    return 0.5f * z * (1.0f + erff(z * kSqrtHalf));
  }
}

template <bool TANH>
__device__ __forceinline__ float gelu_grad(float z) {
  if constexpr (TANH) {
    const float t = accurate_tanh(kSqrt2OverPi * (z + kTanhCoeff * z * z * z));
    return 0.5f * (1.0f + t) + 0.5f * z * (1.0f - t * t) * kSqrt2OverPi * (1.0f + 3.0f * kTanhCoeff * z * z);
  } else {
    return 0.5f * (1.0f + erff(z * kSqrtHalf)) + z * kInvSqrt2Pi * __expf(-0.5f * z * z);
  }
}

// VEC > 1 only when cols % VEC == 0, so a vector never straddles two rows.
template <typename T, int VEC, bool TANH>
__global__ void bias_gelu_forward_kernel(const T* __restrict__ x, const T* __restrict__ bias, T* __restrict__ y,
                                         int64_t n, int64_t cols) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x * VEC;
  for (int64_t i = (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) * VEC; i < n; i += stride) {
    float v[VEC], b[VEC];
    load_as_float<VEC>(v, x + i);
    load_as_float<VEC>(b, bias + i % cols);
#pragma unroll
    for (int k = 0; k < VEC; ++k) v[k] = gelu<TANH>(v[k] + b[k]);
    store_from_float<VEC>(y + i, v);
  }
}

template <typename T, bool TANH>
__global__ void bias_gelu_backward_kernel(const T* __restrict__ dy, const T* __restrict__ x,
                                          const T* __restrict__ bias, T* __restrict__ dx,
                                          float* __restrict__ partial, int64_t rows, int64_t cols, int64_t parts) {
  __shared__ float tile[kColTileY][kColTileX + 1];
  const int64_t col = static_cast<int64_t>(blockIdx.x) * kColTileX + threadIdx.x;
  float dbias = 0.0f;
  if (col < cols) {
    const float b = to_float(bias[col]);
    for (int64_t r = static_cast<int64_t>(blockIdx.y) * kColTileY + threadIdx.y; r < rows;
         r += parts * kColTileY) {
      const int64_t i = r * cols + col;
      const float d = to_float(dy[i]) * gelu_grad<TANH>(to_float(x[i]) + b);
      dx[i] = from_float<T>(d);
      dbias += d;
    }
  }
  dbias = col_tile_sum(dbias, tile);
  if (threadIdx.y == 0 && col < cols) partial[static_cast<int64_t>(blockIdx.y) * cols + col] = dbias;
}

template <typename F>
gpuError_t with_approx(gpu_ops::GeluApprox approx, F&& f) {
  if (approx == gpu_ops::GeluApprox::kTanh) return f(std::true_type{});
  return f(std::false_type{});
}

}  // namespace

namespace gpu_ops {

gpuError_t bias_gelu_forward(const void* x, const void* bias, void* y, int64_t rows, int64_t cols,
                             GeluApprox approx, DType dtype, gpuStream_t stream) {
  const int64_t n = rows * cols;
  if (n == 0) return gpuSuccess;
  return gpu_dispatch_float(dtype, [&](auto tag) {
    using T = decltype(tag);
    const T* xt = static_cast<const T*>(x);
    const T* bt = static_cast<const T*>(bias);
    T* yt = static_cast<T*>(y);
    const bool vec = cols % 4 == 0 && gpu_is_aligned(xt, 4) && gpu_is_aligned(bt, 4) && gpu_is_aligned(yt, 4);
    const int threads = 256;
    const int64_t per_block = static_cast<int64_t>(threads) * (vec ? 4 : 1);
    // Grid-stride beyond a million blocks: more blocks only add scheduling cost.
    const int64_t blocks = gpu_ceil_div(n, per_block) < (1 << 20) ? gpu_ceil_div(n, per_block) : (1 << 20);
    return with_approx(approx, [&](auto tanh_tag) {
      constexpr bool kTanh = decltype(tanh_tag)::value;
      if (vec) {
        bias_gelu_forward_kernel<T, 4, kTanh><<<static_cast<unsigned>(blocks), threads, 0, stream>>>(xt, bt, yt, n, cols);
      } else {
        bias_gelu_forward_kernel<T, 1, kTanh><<<static_cast<unsigned>(blocks), threads, 0, stream>>>(xt, bt, yt, n, cols);
      }
      return gpuGetLastError();
    });
  });
}

gpuError_t bias_gelu_backward(const void* dy, const void* x, const void* bias, void* dx, void* dbias,
                              float* workspace, int64_t rows, int64_t cols, GeluApprox approx, DType dtype,
                              gpuStream_t stream) {
  if (rows == 0 || cols == 0) return gpuSuccess;
  return gpu_dispatch_float(dtype, [&](auto tag) {
    using T = decltype(tag);
    const int64_t parts = col_reduce_parts(rows);
    const dim3 grid(static_cast<unsigned>(gpu_ceil_div(cols, kColTileX)), static_cast<unsigned>(parts));
    const dim3 block(kColTileX, kColTileY);
    gpuError_t err = with_approx(approx, [&](auto tanh_tag) {
      constexpr bool kTanh = decltype(tanh_tag)::value;
      bias_gelu_backward_kernel<T, kTanh><<<grid, block, 0, stream>>>(
          static_cast<const T*>(dy), static_cast<const T*>(x), static_cast<const T*>(bias), static_cast<T*>(dx),
          workspace, rows, cols, parts);
      return gpuGetLastError();
    });
    if (err != gpuSuccess) return err;
    col_finalize_kernel<T><<<static_cast<unsigned>(gpu_ceil_div(cols, 256)), 256, 0, stream>>>(
        workspace, parts, cols, static_cast<T*>(dbias));
    return gpuGetLastError();
  });
}

}  // namespace gpu_ops
