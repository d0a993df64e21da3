// Host-visible portability names shared by device code (.cu) and torch bindings (.cpp).
//
// Launchers declared in the gpu_*_ops.h headers take raw pointers, sizes and a
// gpuStream_t; this header gives those names one spelling for CUDA and for ROCm so
// the same sources compile with nvcc, and with hipcc with or without hipify.
#pragma once

#include <cstdint>

#if defined(__HIP_PLATFORM_AMD__) || defined(USE_ROCM)
#define GPU_ROCM 1
#include <hip/hip_runtime_api.h>
using gpuStream_t = hipStream_t;
using gpuError_t = hipError_t;
#define gpuSuccess hipSuccess
#define gpuErrorInvalidValue hipErrorInvalidValue
#define gpuGetLastError hipGetLastError
#define gpuGetErrorString hipGetErrorString
#define gpuMemsetAsync hipMemsetAsync
#else
#include <cuda_runtime_api.h>
using gpuStream_t = cudaStream_t;
using gpuError_t = cudaError_t;
#define gpuSuccess cudaSuccess
#define gpuErrorInvalidValue cudaErrorInvalidValue
#define gpuGetLastError cudaGetLastError
#define gpuGetErrorString cudaGetErrorString
#define gpuMemsetAsync cudaMemsetAsync
#endif

// bf16 code paths: on CUDA the op builder defines BF16_AVAILABLE when every arch
// of the op is sm_80 or newer; every ROCm target we build for has bf16 storage.
#if defined(BF16_AVAILABLE) || defined(GPU_ROCM)
#define GPU_HAS_BF16 1
#endif

// Multiprocessors (CUs on ROCm) of the current device, for launchers that size a persistent
// grid; 0 when the runtime cannot tell, its error cleared so that it does not surface as the
// next launch's error. The runtime answers from cached properties.
inline int gpu_multiprocessor_count() {
  int device = 0;
  int count = 0;
#ifdef GPU_ROCM
  const bool ok = hipGetDevice(&device) == hipSuccess &&
                  hipDeviceGetAttribute(&count, hipDeviceAttributeMultiprocessorCount, device) == hipSuccess;
#else
  const bool ok = cudaGetDevice(&device) == cudaSuccess &&
                  cudaDeviceGetAttribute(&count, cudaDevAttrMultiProcessorCount, device) == cudaSuccess;
#endif
  if (!ok) {
    (void)gpuGetLastError();
    return 0;
  }
  return count;
}

namespace gpu_ops {

// Element types the launchers accept; the bindings map torch dtypes onto these.
enum class DType : int { kFloat32 = 0, kFloat16 = 1, kBFloat16 = 2 };

inline constexpr bool has_bf16() {
#ifdef GPU_HAS_BF16
  return true;
#else
  return false;
#endif
}

}  // namespace gpu_ops
