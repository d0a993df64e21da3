// Grouped int8 / int4 quantize and dequantize (see gpu_quantizer.h for the rules).
//
// Quantize: one row group of threads per quantization group; one read pass for
// (min, max) with a shuffle reduction, one pass that writes codes. Division is
// IEEE (not fast-math) and the op is built without flush-to-zero (see
// op_builder/ops/quantizer.py), so codes agree bit for bit with the PyTorch
// reference, tiny groups (denormal scales), NaN and infinities included.
// Dequantize: a vectorized elementwise pass.
#include <algorithm>

#include "gpu_quantizer.h"
#include "gpu_reduce.h"

namespace {

template <int BITS, bool SYM>
struct IntCode {
  // Asymmetric codes are 0..levels(); symmetric ones -qmax()..qmax().
  __host__ __device__ static constexpr int levels() { return (1 << BITS) - 1; }
  __host__ __device__ static constexpr int qmax() { return (1 << (BITS - 1)) - 1; }

  __device__ static int encode(float v, float scale, float offset) {
    // As the reference: a scale that is not > 0 (0, or NaN from a NaN in the group)
    // gives code 0 for the whole group.
    if (!(scale > 0.0f)) return 0;
    const float r = SYM ? gpu_div_rn(v, scale) : gpu_div_rn(v - offset, scale);
    // inf / inf (an infinite element, so an infinite scale) is NaN: the reference's code
    // for it is 0 (its NaN -> int conversion leaves 0 in the stored bits on every torch
    // backend). Said here rather than left to __float2int_rn(NaN), which is 0 on CUDA only.
    if (isnan(r)) return 0;
    const int q = __float2int_rn(r);  // saturates; the clamp below then matches the reference's
    if constexpr (SYM) {
      return q < -qmax() ? -qmax() : (q > qmax() ? qmax() : q);
    } else {
      return q < 0 ? 0 : (q > levels() ? levels() : q);
    }
  }
  __device__ static float decode(int code, float scale, float offset) {
    // Separate multiply and add: a fused multiply-add would round differently
    // from the reference's q * scale + offset.
    const float product = gpu_mul_rn(static_cast<float>(code), scale);
    return SYM ? product : product + offset;
  }
};

// VEC elements per thread step, read LOAD at a time (LOAD divides VEC): the host
// picks both from the sizes and the actual addresses, since a vector access needs
// its address aligned to its whole width. For int4 VEC is even so the two codes of
// a byte come from one thread. Codes are stored VEC at a time (one 8/16/32-bit store).
template <typename T, int VEC, int LOAD, int BITS, bool SYM>
__global__ void quantize_kernel(const T* __restrict__ x, uint8_t* __restrict__ q, float* __restrict__ scale_out,
                                float* __restrict__ offset_out, int64_t groups, int64_t group_size) {
  using Code = IntCode<BITS, SYM>;
  __shared__ float2 scratch[kGpuMaxWarps];
  const int64_t group = static_cast<int64_t>(blockIdx.x) * blockDim.y + threadIdx.y;
  const bool active = group < groups;
  const T* xg = x + (active ? group : 0) * group_size;
  float2 range = make_float2(INFINITY, -INFINITY);  // (min, max)
  if (active) {
    for (int64_t i = static_cast<int64_t>(threadIdx.x) * VEC; i < group_size;
         i += static_cast<int64_t>(blockDim.x) * VEC) {
      float v[VEC];
      load_as_float_by<VEC, LOAD>(v, xg + i);
#pragma unroll
      for (int k = 0; k < VEC; ++k) {
        range.x = gpu_fmin_nan(range.x, v[k]);
        range.y = gpu_fmax_nan(range.y, v[k]);
      }
    }
  }
  // A NaN anywhere in the group makes (min, max) and so the scale NaN, as torch.amin / amax.
  range = row_reduce(range, GpuMinMaxNanOp(), scratch);
  if (!active) return;
  float scale;
  float offset = 0.0f;
  if constexpr (SYM) {
    scale = gpu_div_rn(gpu_fmax_nan(-range.x, range.y), static_cast<float>(Code::qmax()));
  } else {
    scale = gpu_div_rn(range.y - range.x, static_cast<float>(Code::levels()));
    offset = range.x;
  }
  if (threadIdx.x == 0) {
    scale_out[group] = scale;
    if constexpr (!SYM) offset_out[group] = offset;
  }
  for (int64_t i = static_cast<int64_t>(threadIdx.x) * VEC; i < group_size;
       i += static_cast<int64_t>(blockDim.x) * VEC) {
    float v[VEC];
    load_as_float_by<VEC, LOAD>(v, xg + i);
    const int64_t element = group * group_size + i;
    if constexpr (BITS == 8) {
      uint32_t packed = 0;
#pragma unroll
      for (int k = 0; k < VEC; ++k) {
        const uint32_t byte = static_cast<uint8_t>(static_cast<int8_t>(Code::encode(v[k], scale, offset)));
        packed |= byte << (8 * k);
      }
      if constexpr (VEC == 4) {
        *reinterpret_cast<uint32_t*>(q + element) = packed;
      } else if constexpr (VEC == 2) {
        *reinterpret_cast<uint16_t*>(q + element) = static_cast<uint16_t>(packed);
      } else {
        static_assert(VEC == 1, "int8 steps are 1, 2 or 4 elements");
        q[element] = static_cast<uint8_t>(packed);
      }
    } else {
      uint32_t packed = 0;
#pragma unroll
      for (int k = 0; k < VEC; ++k) {
        const uint32_t nibble = static_cast<uint32_t>(Code::encode(v[k], scale, offset)) & 0xFu;
        packed |= nibble << (4 * k);
      }
      if constexpr (VEC == 2) {
        q[element / 2] = static_cast<uint8_t>(packed);
      } else {
        static_assert(VEC == 4, "int4 steps are 2 or 4 elements");
        *reinterpret_cast<uint16_t*>(q + element / 2) = static_cast<uint16_t>(packed);
      }
    }
  }
}

template <int BITS, bool SYM>
__device__ __forceinline__ int code_at(const uint8_t* q, int64_t element) {
  if constexpr (BITS == 8) {
    return SYM ? static_cast<int>(static_cast<int8_t>(q[element])) : static_cast<int>(q[element]);
  } else {
    const int nibble = (q[element / 2] >> (4 * (element & 1))) & 0xF;
    return SYM ? ((nibble ^ 8) - 8) : nibble;  // sign-extend 4-bit two's complement
  }
}

// VEC > 1 only when group_size % VEC == 0: a vector stays inside one group.
template <typename T, int VEC, int BITS, bool SYM>
__global__ void dequantize_kernel(const uint8_t* __restrict__ q, const float* __restrict__ scale,
                                  const float* __restrict__ offset, T* __restrict__ y, int64_t n,
                                  int64_t group_size) {
  using Code = IntCode<BITS, SYM>;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x * VEC;
  for (int64_t i = (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) * VEC; i < n; i += stride) {
    const int64_t group = i / group_size;
    const float s = scale[group];
    const float o = SYM ? 0.0f : offset[group];
    float out[VEC];
    if constexpr (BITS == 8 && VEC == 4) {
      const uint32_t packed = *reinterpret_cast<const uint32_t*>(q + i);
#pragma unroll
      for (int k = 0; k < 4; ++k) {
        const uint32_t byte = (packed >> (8 * k)) & 0xFFu;
        const int code = SYM ? static_cast<int>(static_cast<int8_t>(byte)) : static_cast<int>(byte);
        out[k] = Code::decode(code, s, o);
      }
    } else {
#pragma unroll
      for (int k = 0; k < VEC; ++k) out[k] = Code::decode(code_at<BITS, SYM>(q, i + k), s, o);
    }
    store_from_float<VEC>(y + i, out);
  }
}

template <typename F>
gpuError_t with_format(int bits, bool symmetric, F&& f) {
  if (bits == 8) {
    return symmetric ? f(std::integral_constant<int, 8>{}, std::true_type{})
                     : f(std::integral_constant<int, 8>{}, std::false_type{});
  }
  if (bits == 4) {
    return symmetric ? f(std::integral_constant<int, 4>{}, std::true_type{})
                     : f(std::integral_constant<int, 4>{}, std::false_type{});
  }
  return gpuErrorInvalidValue;
}

unsigned elementwise_blocks(int64_t n, int threads, int vec) {
  const int64_t blocks = gpu_ceil_div(n, static_cast<int64_t>(threads) * vec);
  return static_cast<unsigned>(blocks < (1 << 20) ? blocks : (1 << 20));
}

// The widest of 4, 2, 1 elements that divides group_size and to which `p` is aligned:
// every group then starts aligned too. A view such as x[1:] of a fresh tensor is only
// sizeof(T)-aligned, so width 1.
template <typename T>
int widest_access(const T* p, int64_t group_size) {
  for (int width = 4; width > 1; width /= 2) {
    if (group_size % width == 0 && gpu_is_aligned(p, width)) return width;
  }
  return 1;
}

}  // namespace

namespace gpu_ops {

gpuError_t quantize_int(const void* x, uint8_t* q, float* scale, float* offset, int64_t groups,
                        int64_t group_size, int bits, bool symmetric, DType dtype, gpuStream_t stream) {
  if (groups == 0 || group_size == 0) return gpuSuccess;
  if (bits == 4 && group_size % 2 != 0) return gpuErrorInvalidValue;
  return gpu_dispatch_float(dtype, [&](auto tag) {
    using T = decltype(tag);
    const T* xt = static_cast<const T*>(x);
    const int load = widest_access(xt, group_size);
    // Codes go out `step` at a time: step (int8) or step / 2 (int4) bytes per store, at
    // offsets that are multiples of that from q, which must be aligned to it as well.
    const int step = bits == 8 ? std::min(load, widest_access(q, group_size))
                               : (load == 4 && gpu_is_aligned(q, 2) ? 4 : 2);  // int4: pairs share a byte
    const GpuRowLaunch launch = gpu_row_launch(groups, group_size, 8);
    return with_format(bits, symmetric, [&](auto bits_tag, auto sym_tag) {
      constexpr int kBits = decltype(bits_tag)::value;
      constexpr bool kSym = decltype(sym_tag)::value;
      auto run = [&](auto step_tag, auto load_tag) {
        quantize_kernel<T, decltype(step_tag)::value, decltype(load_tag)::value, kBits, kSym>
            <<<launch.grid, launch.block, 0, stream>>>(xt, q, scale, offset, groups, group_size);
      };
      using I1 = std::integral_constant<int, 1>;
      using I2 = std::integral_constant<int, 2>;
      using I4 = std::integral_constant<int, 4>;
      if (step == 4) {
        run(I4{}, I4{});
      } else if (step == 2 && load >= 2) {
        run(I2{}, I2{});
      } else if constexpr (kBits == 4) {
        run(I2{}, I1{});  // int4 steps by pairs even when x is only element-aligned
      } else {
        run(I1{}, I1{});
      }
      return gpuGetLastError();
    });
  });
}

gpuError_t dequantize_int(const uint8_t* q, const float* scale, const float* offset, void* y, int64_t groups,
                          int64_t group_size, int bits, bool symmetric, DType dtype, gpuStream_t stream) {
  const int64_t n = groups * group_size;
  if (n == 0) return gpuSuccess;
  if (bits == 4 && group_size % 2 != 0) return gpuErrorInvalidValue;
  return gpu_dispatch_float(dtype, [&](auto tag) {
    using T = decltype(tag);
    T* yt = static_cast<T*>(y);
    const bool vec = group_size % 4 == 0 && gpu_is_aligned(yt, 4) && gpu_is_aligned(q, 4);
    constexpr int kThreads = 256;
    return with_format(bits, symmetric, [&](auto bits_tag, auto sym_tag) {
      constexpr int kBits = decltype(bits_tag)::value;
      constexpr bool kSym = decltype(sym_tag)::value;
      if (vec) {
        dequantize_kernel<T, 4, kBits, kSym>
            <<<elementwise_blocks(n, kThreads, 4), kThreads, 0, stream>>>(q, scale, offset, yt, n, group_size);
      } else {
        dequantize_kernel<T, 1, kBits, kSym>
            <<<elementwise_blocks(n, kThreads, 1), kThreads, 0, stream>>>(q, scale, offset, yt, n, group_size);
      }
      return gpuGetLastError();
    });
  });
}

}  // namespace gpu_ops
