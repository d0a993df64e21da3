// acme_rmsnorm_cuda: RMSNorm forward on CUDA tensors, one block per row.
//
// Each thread sums the squares of a strided slice of its row in fp32; warps reduce with
// shuffles, then the first warp reduces the warps' sums. A second pass scales the row. Rows
// of any length work: a block has a multiple of 32 threads, at most 1024, and loops over
// longer rows.
#include <cuda_fp16.h>
#ifdef BF16_AVAILABLE
#include <cuda_bf16.h>
#endif

#include <algorithm>

#include "acme_rmsnorm.h"

namespace {

constexpr int kWarp = 32;
constexpr int kMaxThreads = 1024;

__device__ __forceinline__ float to_float(float v) { return v; }
__device__ __forceinline__ float to_float(__half v) { return __half2float(v); }
__device__ __forceinline__ void store(float* p, float v) { *p = v; }
__device__ __forceinline__ void store(__half* p, float v) { *p = __float2half_rn(v); }
#ifdef BF16_AVAILABLE
__device__ __forceinline__ float to_float(__nv_bfloat16 v) { return __bfloat162float(v); }
__device__ __forceinline__ void store(__nv_bfloat16* p, float v) { *p = __float2bfloat16_rn(v); }
#endif

// The sum of v over each group of 32 lanes, valid in all of them. Built for ROCm (hipified),
// a wavefront has 64 or 32 lanes; shuffles of width 32 keep the groups apart either way.
__device__ __forceinline__ float warp_sum(float v) {
  for (int offset = kWarp / 2; offset > 0; offset /= 2) {
#if defined(__HIP_PLATFORM_AMD__) || defined(USE_ROCM)
    v += __shfl_xor(v, offset, kWarp);
#else
    v += __shfl_xor_sync(0xffffffffu, v, offset);
#endif
  }
  return v;
}

// The sum of v over the block, valid in every thread. blockDim.x is a multiple of 32.
__device__ float block_sum(float v) {
  __shared__ float warp_sums[kMaxThreads / kWarp];
  __shared__ float total;
  v = warp_sum(v);
  const int lane = threadIdx.x % kWarp;
  const int warp = threadIdx.x / kWarp;
  if (lane == 0) warp_sums[warp] = v;
  __syncthreads();
  if (warp == 0) {
    v = warp_sum(lane < static_cast<int>(blockDim.x) / kWarp ? warp_sums[lane] : 0.0f);
    if (lane == 0) total = v;
  }
  __syncthreads();
  return total;
}

template <typename T>
__global__ void rms_norm_kernel(const T* __restrict__ x, const T* __restrict__ weight, T* __restrict__ y,
                                int64_t cols, float eps) {
  const int64_t row = blockIdx.x;
  const T* xr = x + row * cols;
  T* yr = y + row * cols;
  float sum = 0.0f;
  for (int64_t i = threadIdx.x; i < cols; i += blockDim.x) {
    const float v = to_float(xr[i]);
    sum += v * v;
  }
  const float scale = rsqrtf(block_sum(sum) / static_cast<float>(cols) + eps);
  for (int64_t i = threadIdx.x; i < cols; i += blockDim.x) {
    store(yr + i, to_float(xr[i]) * scale * to_float(weight[i]));
  }
}

template <typename T>
cudaError_t launch(const void* x, const void* weight, void* y, int64_t rows, int64_t cols, float eps,
                   cudaStream_t stream) {
  // Enough warps to cover the row once, up to a full block.
  const int64_t warps = std::min<int64_t>((cols + kWarp - 1) / kWarp, kMaxThreads / kWarp);
  rms_norm_kernel<T><<<static_cast<unsigned>(rows), static_cast<unsigned>(warps * kWarp), 0, stream>>>(
      static_cast<const T*>(x), static_cast<const T*>(weight), static_cast<T*>(y), cols, eps);
  return cudaGetLastError();
}

}  // namespace

namespace acme {

cudaError_t rms_norm_forward(const void* x, const void* weight, void* y, int64_t rows, int64_t cols,
                             float eps, DType dtype, cudaStream_t stream) {
  // One block per row: the grid's x dimension takes up to 2^31 - 1 blocks.
  if (rows == 0 || cols == 0) return cudaSuccess;
  if (rows > 0x7fffffff) return cudaErrorInvalidValue;
  switch (dtype) {
    case DType::kFloat32:
      return launch<float>(x, weight, y, rows, cols, eps, stream);
    case DType::kFloat16:
      return launch<__half>(x, weight, y, rows, cols, eps, stream);
    case DType::kBFloat16:
#ifdef BF16_AVAILABLE
      return launch<__nv_bfloat16>(x, weight, y, rows, cols, eps, stream);
#else
      return cudaErrorInvalidValue;
#endif
  }
  return cudaErrorInvalidValue;
}

bool has_bf16() {
#ifdef BF16_AVAILABLE
  return true;
#else
  return false;
#endif
}

}  // namespace acme
