// Grouped FP8 (e4m3 / e5m2) quantize and dequantize (rules in gpu_fp_quantizer.h).
//
// One row group of threads per quantization group: a read pass for max|x| with a
// shuffle reduction, then a pass that writes codes. On CUDA the conversions come
// from cuda_fp8.h (hardware cvt on sm_89+; FP8_NATIVE, set by the builder when
// every arch is sm_89+, converts two values per instruction). ROCm 5.x has no FP8
// header, so the HIP build uses the software conversions of gpu_fp8.h. The op is
// built without flush-to-zero (op_builder/ops/fp_quantizer.py): denormal scales
// (groups whose absmax is tiny) round as the PyTorch reference's do.
#include "gpu_fp_quantizer.h"
#include "gpu_reduce.h"

#ifdef GPU_ROCM
#include "gpu_fp8.h"
#else
#include <cuda_fp8.h>
#endif

namespace {

template <bool E4M3>
struct Fp8 {
  static constexpr float kMax = E4M3 ? 448.0f : 57344.0f;

  __device__ static uint8_t encode(float v) {
#ifdef GPU_ROCM
    return E4M3 ? gpu_fp8::encode<4, 3>(v) : gpu_fp8::encode<5, 2>(v);
#else
    return static_cast<uint8_t>(__nv_cvt_float_to_fp8(v, __NV_SATFINITE, E4M3 ? __NV_E4M3 : __NV_E5M2));
#endif
  }

  // Two codes in one 16-bit value, `lo` in the low byte.
  __device__ static uint32_t encode2(float lo, float hi) {
#if !defined(GPU_ROCM) && defined(FP8_NATIVE)
    return static_cast<uint32_t>(
        __nv_cvt_float2_to_fp8x2(make_float2(lo, hi), __NV_SATFINITE, E4M3 ? __NV_E4M3 : __NV_E5M2));
#else
    return static_cast<uint32_t>(encode(lo)) | (static_cast<uint32_t>(encode(hi)) << 8);
#endif
  }

  __device__ static float decode(uint8_t code) {
#ifdef GPU_ROCM
    return E4M3 ? gpu_fp8::decode<4, 3>(code) : gpu_fp8::decode<5, 2>(code);
#else
    const __half_raw raw = __nv_cvt_fp8_to_halfraw(code, E4M3 ? __NV_E4M3 : __NV_E5M2);
    return __half2float(__half(raw));
#endif
  }
};

// x / scale clamped into the format's range, as the reference computes it: 0 when the
// group's scale is not > 0 (a group of zeros, or NaN scale from a NaN in the group), and
// NaN kept through the clamp as torch.clamp keeps it (inf / inf, an infinite element
// under an infinite scale), where fminf / fmaxf would turn it into -fmax.
__device__ __forceinline__ float scaled(float v, float scale, float fmax) {
  if (!(scale > 0.0f)) return 0.0f;
  const float s = gpu_div_rn(v, scale);
  return isnan(s) ? s : fminf(fmaxf(s, -fmax), fmax);
}

template <typename T, int VEC, bool E4M3>
__global__ void fp8_quantize_kernel(const T* __restrict__ x, uint8_t* __restrict__ q, float* __restrict__ scale_out,
                                    int64_t groups, int64_t group_size) {
  using F = Fp8<E4M3>;
  __shared__ float scratch[kGpuMaxWarps];
  const int64_t group = static_cast<int64_t>(blockIdx.x) * blockDim.y + threadIdx.y;
  const bool active = group < groups;
  const T* xg = x + (active ? group : 0) * group_size;
  float absmax = 0.0f;
  if (active) {
    for (int64_t i = static_cast<int64_t>(threadIdx.x) * VEC; i < group_size;
         i += static_cast<int64_t>(blockDim.x) * VEC) {
      float v[VEC];
      load_as_float<VEC>(v, xg + i);
#pragma unroll
      for (int k = 0; k < VEC; ++k) absmax = gpu_fmax_nan(absmax, fabsf(v[k]));
    }
  }
  // NaN anywhere in the group makes absmax and so the scale NaN, as torch.amax does.
  absmax = row_reduce(absmax, GpuMaxNanOp(), scratch);
  if (!active) return;
  const float scale = gpu_div_rn(absmax, F::kMax);
  if (threadIdx.x == 0) scale_out[group] = scale;
  uint8_t* qg = q + group * group_size;
  for (int64_t i = static_cast<int64_t>(threadIdx.x) * VEC; i < group_size;
       i += static_cast<int64_t>(blockDim.x) * VEC) {
    float v[VEC];
    load_as_float<VEC>(v, xg + i);
    if constexpr (VEC == 4) {
      const uint32_t lo = F::encode2(scaled(v[0], scale, F::kMax), scaled(v[1], scale, F::kMax));
      const uint32_t hi = F::encode2(scaled(v[2], scale, F::kMax), scaled(v[3], scale, F::kMax));
      *reinterpret_cast<uint32_t*>(qg + i) = lo | (hi << 16);
    } else {
      static_assert(VEC == 1, "steps are 1 or 4 elements");
      qg[i] = F::encode(scaled(v[0], scale, F::kMax));
    }
  }
}

template <typename T, int VEC, bool E4M3>
__global__ void fp8_dequantize_kernel(const uint8_t* __restrict__ q, const float* __restrict__ scale,
                                      T* __restrict__ y, int64_t n, int64_t group_size) {
  using F = Fp8<E4M3>;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x * VEC;
  for (int64_t i = (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) * VEC; i < n; i += stride) {
    const float s = scale[i / group_size];
    float out[VEC];
    if constexpr (VEC == 4) {
      const uint32_t packed = *reinterpret_cast<const uint32_t*>(q + i);
#pragma unroll
      for (int k = 0; k < 4; ++k) out[k] = F::decode(static_cast<uint8_t>(packed >> (8 * k))) * s;
    } else {
      out[0] = F::decode(q[i]) * s;
    }
    store_from_float<VEC>(y + i, out);
  }
}

template <typename F>
gpuError_t with_fp8_format(gpu_ops::Fp8Format format, F&& f) {
  switch (format) {
    case gpu_ops::Fp8Format::kE4M3:
      return f(std::true_type{});
    case gpu_ops::Fp8Format::kE5M2:
      return f(std::false_type{});
  }
  return gpuErrorInvalidValue;
}

}  // namespace

namespace gpu_ops {

gpuError_t fp8_quantize(const void* x, uint8_t* q, float* scale, int64_t groups, int64_t group_size,
                        Fp8Format format, DType dtype, gpuStream_t stream) {
  if (groups == 0 || group_size == 0) return gpuSuccess;
  return gpu_dispatch_float(dtype, [&](auto tag) {
    using T = decltype(tag);
    const T* xt = static_cast<const T*>(x);
    const bool vec = group_size % 4 == 0 && gpu_is_aligned(xt, 4) && gpu_is_aligned(q, 4);
    const GpuRowLaunch launch = gpu_row_launch(groups, group_size, 8);
    return with_fp8_format(format, [&](auto format_tag) {
      constexpr bool kE4M3 = decltype(format_tag)::value;
      if (vec) {
        fp8_quantize_kernel<T, 4, kE4M3><<<launch.grid, launch.block, 0, stream>>>(xt, q, scale, groups, group_size);
      } else {
        fp8_quantize_kernel<T, 1, kE4M3><<<launch.grid, launch.block, 0, stream>>>(xt, q, scale, groups, group_size);
      }
      return gpuGetLastError();
    });
  });
}

gpuError_t fp8_dequantize(const uint8_t* q, const float* scale, void* y, int64_t groups, int64_t group_size,
                          Fp8Format format, DType dtype, gpuStream_t stream) {
  const int64_t n = groups * group_size;
  if (n == 0) return gpuSuccess;
  return gpu_dispatch_float(dtype, [&](auto tag) {
    using T = decltype(tag);
    T* yt = static_cast<T*>(y);
    const bool vec = group_size % 4 == 0 && gpu_is_aligned(yt, 4) && gpu_is_aligned(q, 4);
    constexpr int kThreads = 256;
    const int64_t per_block = static_cast<int64_t>(kThreads) * (vec ? 4 : 1);
    const int64_t wanted = gpu_ceil_div(n, per_block);
    const unsigned blocks = static_cast<unsigned>(wanted < (1 << 20) ? wanted : (1 << 20));
    return with_fp8_format(format, [&](auto format_tag) {
      constexpr bool kE4M3 = decltype(format_tag)::value;
      if (vec) {
        fp8_dequantize_kernel<T, 4, kE4M3><<<blocks, kThreads, 0, stream>>>(q, scale, yt, n, group_size);
      } else {
        fp8_dequantize_kernel<T, 1, kE4M3><<<blocks, kThreads, 0, stream>>>(q, scale, yt, n, group_size);
      }
      return gpuGetLastError();
    });
  });
}

}  // namespace gpu_ops
