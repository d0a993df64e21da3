// Device-code portability layer: CUDA (nvcc) and ROCm (hipcc, hipified or not).
//
// Kernels use only the names defined here for things that differ between the two
// (warp shuffles, warp size, bf16 type, IEEE division), so one source serves both.
// Included only by .cu files: it pulls in the CUDA/HIP device headers.
#pragma once

#include <cstdint>
#include <type_traits>

#include "gpu_runtime.h"

#ifdef GPU_ROCM
#include <hip/hip_runtime.h>
#include <hip/hip_fp16.h>
#ifdef GPU_HAS_BF16
// ROCm < 6.0 (Debian ships 5.2) has no <hip/hip_bf16.h>; hip_bfloat16 exists in
// every release and converts to and from float, which is all the kernels need.
#if defined(__has_include) && __has_include(<hip/hip_bf16.h>)
#include <hip/hip_bf16.h>
using gpu_bf16 = __hip_bfloat16;
#define GPU_BF16_IS_HIP_NEW 1
#else
#include <hip/hip_bfloat16.h>
using gpu_bf16 = hip_bfloat16;
#endif
#endif
#else
#include <cuda_runtime.h>
#include <cuda_fp16.h>
#ifdef GPU_HAS_BF16
#include <cuda_bf16.h>
using gpu_bf16 = __nv_bfloat16;
#endif
#endif

// Warp (wavefront) size as a compile-time constant in device code. AMD CDNA runs
// wave64 and RDNA wave32; the compiler defines __AMDGCN_WAVEFRONT_SIZE per target.
// Host code must not size launches by it: blocks are multiples of 64.
#if defined(GPU_ROCM)
#if defined(__AMDGCN_WAVEFRONT_SIZE__)  // newer clang spelling
#define GPU_WARP_SIZE __AMDGCN_WAVEFRONT_SIZE__
#elif defined(__AMDGCN_WAVEFRONT_SIZE)
#define GPU_WARP_SIZE __AMDGCN_WAVEFRONT_SIZE
#elif defined(__HIP_DEVICE_COMPILE__)
#error "the compiler does not say the wavefront size of this target"
#else
#define GPU_WARP_SIZE 64  // host pass: device code is not generated from it
#endif
#else
#define GPU_WARP_SIZE 32
#endif

// Most warps a block of up to 1024 threads can hold (wave32 is the smaller size).
constexpr int kGpuMaxWarps = 1024 / 32;

// float, or double (LayerNorm's long-row statistics); no other type converts in silently.
template <typename V, std::enable_if_t<std::is_same_v<V, float> || std::is_same_v<V, double>, int> = 0>
__device__ __forceinline__ V gpu_shfl_xor(V v, int mask, int width) {
#ifdef GPU_ROCM
  // ROCm 5.x has no *_sync shuffles; its wavefronts execute in lockstep.
  return __shfl_xor(v, mask, width);
#else
  return __shfl_xor_sync(0xffffffffu, v, mask, width);
#endif
}

__device__ __forceinline__ float2 gpu_shfl_xor(float2 v, int mask, int width) {
  // float(...): HIP's float2 members are accessor objects, which the float / double
  // template above does not admit.
  const float x = v.x;
  const float y = v.y;
  return make_float2(gpu_shfl_xor(x, mask, width), gpu_shfl_xor(y, mask, width));
}

// Correctly rounded division. --use_fast_math makes '/' approximate, and the
// quantizers must agree bit for bit with the PyTorch reference.
__device__ __forceinline__ float gpu_div_rn(float a, float b) {
#ifdef GPU_ROCM
  return a / b;  // hipcc builds without fast math: '/' is IEEE
#else
  return __fdiv_rn(a, b);
#endif
}

// Correctly rounded product that is never fused into a neighbouring add (an FMA
// rounds once where the written a * b - c rounds twice). For the places whose
// exactness is reasoned about, e.g. LayerNorm's dy * gamma - mean(dy * gamma).
__device__ __forceinline__ float gpu_mul_rn(float a, float b) {
#ifdef GPU_ROCM
#pragma clang fp contract(off)
  return a * b;
#else
  return __fmul_rn(a, b);
#endif
}

// Correctly rounded product and sum that are never fused and keep denormals whatever the
// build's fast-math flags (--use_fast_math implies -ftz=true, which flushes them to zero, inputs
// and results): each rounds as torch's own CUDA ops do. For values whose sign is taken (Lion's
// update direction), where a fused or flushed rounding near zero gives the opposite sign.
__device__ __forceinline__ float gpu_mul_rn_denorm(float a, float b) {
#ifdef GPU_ROCM
#pragma clang fp contract(off)
  return a * b;  // HIP keeps fp32 denormals unless -fgpu-flush-denormals-to-zero, which we never pass
#else
  float r;
  asm("mul.rn.f32 %0, %1, %2;" : "=f"(r) : "f"(a), "f"(b));
  return r;
#endif
}
__device__ __forceinline__ float gpu_add_rn_denorm(float a, float b) {
#ifdef GPU_ROCM
#pragma clang fp contract(off)
  return a + b;
#else
  float r;
  asm("add.rn.f32 %0, %1, %2;" : "=f"(r) : "f"(a), "f"(b));
  return r;
#endif
}

// torch.sign: -1 or +1, and 0 for zeros and NaN (torch's (0 < x) - (x < 0)), read from the bits:
// under -ftz=true a comparison flushes a denormal to zero, where torch gives it its sign.
__device__ __forceinline__ float gpu_sign(float x) {
  const uint32_t bits = __float_as_uint(x);
  const uint32_t magnitude = bits & 0x7FFFFFFFu;
  if (magnitude == 0u || magnitude > 0x7F800000u) return 0.0f;
  return (bits >> 31) != 0u ? -1.0f : 1.0f;
}

// max / min that return NaN when either operand is NaN, as torch.amax / amin /
// maximum do. fmaxf / fminf return the other operand instead, which would let a
// NaN vanish from a group's range. Otherwise fmaxf / fminf (-0 vs +0 included).
__device__ __forceinline__ float gpu_fmax_nan(float a, float b) {
  return (isnan(a) || isnan(b)) ? a + b : fmaxf(a, b);
}
__device__ __forceinline__ float gpu_fmin_nan(float a, float b) {
  return (isnan(a) || isnan(b)) ? a + b : fminf(a, b);
}

// ---- conversions between storage types and fp32 math
__device__ __forceinline__ float to_float(float v) { return v; }
__device__ __forceinline__ float to_float(__half v) { return __half2float(v); }
#ifdef GPU_HAS_BF16
__device__ __forceinline__ float to_float(gpu_bf16 v) {
#if defined(GPU_ROCM) && !defined(GPU_BF16_IS_HIP_NEW)
  return static_cast<float>(v);
#else
  return __bfloat162float(v);
#endif
}
#endif

template <typename T>
__device__ __forceinline__ T from_float(float v);
template <>
__device__ __forceinline__ float from_float<float>(float v) {
  return v;
}
template <>
__device__ __forceinline__ __half from_float<__half>(float v) {
  return __float2half_rn(v);
}
#ifdef GPU_HAS_BF16
template <>
__device__ __forceinline__ gpu_bf16 from_float<gpu_bf16>(float v) {
#if defined(GPU_ROCM) && !defined(GPU_BF16_IS_HIP_NEW)
  return gpu_bf16(v);  // rounds to nearest even
#elif defined(GPU_ROCM)
  // HIP's __float2bfloat16 rounds to nearest even too; ROCm 5.7's <hip/hip_bf16.h> has no
  // _rn spelling (make compat: hipcc 5.7).
  return __float2bfloat16(v);
#else
  return __float2bfloat16_rn(v);
#endif
}
#endif

// ---- vectorized access: N elements in one load when the address allows it
template <typename T, int N>
struct alignas(sizeof(T) * N) GpuVec {
  T v[N];
};

template <int N, typename T>
__device__ __forceinline__ void load_as_float(float (&out)[N], const T* p) {
  if constexpr (N == 1) {
    out[0] = to_float(p[0]);
  } else {
    const GpuVec<T, N> vec = *reinterpret_cast<const GpuVec<T, N>*>(p);
#pragma unroll
    for (int k = 0; k < N; ++k) out[k] = to_float(vec.v[k]);
  }
}

// N elements with N / W loads of W elements each: for an address aligned to W
// elements but maybe not to N (W divides N).
template <int N, int W, typename T>
__device__ __forceinline__ void load_as_float_by(float (&out)[N], const T* p) {
  static_assert(N % W == 0, "the load width must divide the step");
#pragma unroll
  for (int j = 0; j < N; j += W) {
    float part[W];
    load_as_float<W>(part, p + j);
#pragma unroll
    for (int k = 0; k < W; ++k) out[j + k] = part[k];
  }
}

template <int N, typename T>
__device__ __forceinline__ void store_from_float(T* p, const float (&in)[N]) {
  if constexpr (N == 1) {
    p[0] = from_float<T>(in[0]);
  } else {
    GpuVec<T, N> vec;
#pragma unroll
    for (int k = 0; k < N; ++k) vec.v[k] = from_float<T>(in[k]);
    *reinterpret_cast<GpuVec<T, N>*>(p) = vec;
  }
}

template <typename T>
__host__ __device__ __forceinline__ bool gpu_is_aligned(const T* p, int elements) {
  return reinterpret_cast<std::uintptr_t>(p) % (sizeof(T) * elements) == 0;
}

inline __host__ __device__ int64_t gpu_ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// ---- dtype dispatch: calls f(T{}) with T the storage type named by `dtype`.
template <typename F>
gpuError_t gpu_dispatch_float(gpu_ops::DType dtype, F&& f) {
  switch (dtype) {
    case gpu_ops::DType::kFloat32:
      return f(float{});
    case gpu_ops::DType::kFloat16:
      return f(__half{});
#ifdef GPU_HAS_BF16
    case gpu_ops::DType::kBFloat16:
      return f(gpu_bf16{});
#endif
    default:
      break;
  }
  return gpuErrorInvalidValue;
}
