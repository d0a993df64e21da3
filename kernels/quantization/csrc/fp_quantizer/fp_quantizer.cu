// Grouped FP8 (e4m3 / e5m2) quantize and dequantize (rules in gpu_fp_quantizer.h).
//
// Work layout as in quantizer/quantizer.cu (the two share it, and their helpers, through
// gpu_quant_common.h): a "sub-warp" of `lanes` threads (a power of two, at most 32, so it
// never straddles a warp with wave32 or wave64) owns one group at a time, each lane owning
// "slots" of VEC consecutive elements; on the fast path a slot is 16 bytes of x / y (8
// fp16 / bf16, 4 fp32) read or written with one 128-bit access, and its VEC code bytes
// with one 8- or 4-byte access. Blocks of 256 threads, one resident wave of them walking
// the groups in a grid-stride loop.
//
// Quantize, groups of at most 128 slots: x is read once (the slots stay in registers from
// the load to the store); max |x| is reduced with warp shuffles only (no shared memory, no
// __syncthreads); a thread takes two groups per loop step when a group is at most one slot
// per lane. Larger groups, and x / q whose alignment or group_size allows no 16-byte access,
// take the streaming kernel: a pass for max |x|, then a pass (from L1 / L2) that writes codes.
// Per element the work is a multiply, two fused multiply-adds and a paired conversion
// (encode_slot: the IEEE division of the reference is needed only near rounding ties,
// which are detected), so the kernels stay memory-bound. Codes and scales agree bit for
// bit with the reference and with this op's earlier kernels.
// Dequantize: same layout; the group comes from the layout (no division per element).
//
// On CUDA the conversions come from cuda_fp8.h, two values per call: on sm_89+ that is one
// hardware cvt per pair, on older archs the header's software conversion of each value
// (the same results either way). ROCm 5.x has no FP8 header, so the HIP build uses the
// software conversions of gpu_fp8.h. The op is built without flush-to-zero
// (op_builder/ops/fp_quantizer.py): denormal scales (groups whose absmax is tiny) round as
// the PyTorch reference's do.
#include "gpu_fp_quantizer.h"
#include "gpu_compat.h"
#include "gpu_quant_common.h"
#include "gpu_quant_kernels.h"

#ifdef GPU_ROCM
#include "gpu_fp8.h"
#else
#include <cuda_fp8.h>
#endif

namespace {

template <bool E4M3>
struct Fp8 {
  static constexpr float kMax = E4M3 ? 448.0f : 57344.0f;

  // Two codes in one 16-bit value, `lo` in the low byte.
  __device__ static uint32_t encode2(float lo, float hi) {
#ifdef GPU_ROCM
    return static_cast<uint32_t>(encode(lo)) | (static_cast<uint32_t>(encode(hi)) << 8);
#else
    return static_cast<uint32_t>(
        __nv_cvt_float2_to_fp8x2(make_float2(lo, hi), __NV_SATFINITE, E4M3 ? __NV_E4M3 : __NV_E5M2));
#endif
  }

  __device__ static uint32_t encode(float v) {
#ifdef GPU_ROCM
    return E4M3 ? gpu_fp8::encode<4, 3>(v) : gpu_fp8::encode<5, 2>(v);
#else
    return static_cast<uint32_t>(__nv_cvt_float_to_fp8(v, __NV_SATFINITE, E4M3 ? __NV_E4M3 : __NV_E5M2));
#endif
  }

  // The values of the two codes in the low 16 bits of `pair` (the low byte first). Exact:
  // every FP8 value is a half (and so a float).
  __device__ static float2 decode2(uint32_t pair) {
#ifdef GPU_ROCM
    return make_float2(decode(pair & 0xFFu), decode((pair >> 8) & 0xFFu));
#else
    const __half2_raw raw =
        __nv_cvt_fp8x2_to_halfraw2(static_cast<__nv_fp8x2_storage_t>(pair & 0xFFFFu), E4M3 ? __NV_E4M3 : __NV_E5M2);
    return __half22float2(__half2(raw));
#endif
  }

  __device__ static float decode(uint32_t code) {
#ifdef GPU_ROCM
    return E4M3 ? gpu_fp8::decode<4, 3>(static_cast<uint8_t>(code)) : gpu_fp8::decode<5, 2>(static_cast<uint8_t>(code));
#else
    const __half_raw raw = __nv_cvt_fp8_to_halfraw(static_cast<__nv_fp8_storage_t>(code), E4M3 ? __NV_E4M3 : __NV_E5M2);
    return __half2float(__half(raw));
#endif
  }
};

// x / scale clamped into the format's range, as the reference computes it for a group
// whose scale is > 0 (a group whose scale is not, all zeros or NaN from a NaN in it, gets
// code 0 throughout): the exact path of encode_slot below. NaN is kept through the
// clamp as torch.clamp keeps it (inf / inf, an infinite element under an infinite scale),
// where fminf / fmaxf would turn it into -fmax.
__device__ __forceinline__ float scaled(float v, float scale, float fmax) {
  const float s = gpu_div_rn(v, scale);
  return isnan(s) ? s : fminf(fmaxf(s, -fmax), fmax);
}

// ---- per-element division without a division
//
// The reference divides every element by the group's scale (IEEE, correctly rounded) and
// rounds the quotient r to FP8. An IEEE division is about ten instructions per element,
// enough to make the kernel compute-bound. Most elements need only r's FP8 rounding: with
// y = RN(1 / scale) once per group and q = RN(x * y),
//   |q - r| <= |x / scale| * (3u + u^2) + 2^-149   (u = 2^-24)
// when scale and 1 / scale are normal floats. With m = |q| * 2^-20 = 16u|q|, lo = RN(q - m)
// and hi = RN(q + m) then bracket r whenever q is a normal float (the slack, about 12u|q|,
// covers the 2^-149 and the roundings of lo and hi). The conversion (round to nearest,
// saturating: the reference's clamp to +-fmax followed by the conversion gives the same
// codes) is monotonic, so when lo and hi convert to the same code, r does too. When q is
// below the normal range, q, r, lo and hi all convert to a zero of x's sign (FP8's
// smallest subnormal is 2^-16 at most), except that q = -0 gives lo = -0 and hi = +0,
// two different codes: the unsure case. An unsure slot (lo and hi on either side of a
// rounding boundary, rare for real data) is redone with the exact division, and so are
// the groups whose scale is outside the normal range (tiny groups: denormal scales;
// infinite or NaN scales).
constexpr float kMarginScale = 0x1p-20f;

// lo = RN(q - m) and hi = RN(q + m), m = |q| * 2^-20 (exact: a power-of-two scaling), each
// one fused multiply-add.
__device__ __forceinline__ float below(float q) { return fmaf(fabsf(q), -kMarginScale, q); }
__device__ __forceinline__ float above(float q) { return fmaf(fabsf(q), kMarginScale, q); }

// The VEC codes of a slot, the first in the low byte, as the reference computes them.
template <int VEC, bool E4M3>
__device__ __forceinline__ uint64_t encode_slot(const float (&v)[VEC], const GroupScale& g) {
  using F = Fp8<E4M3>;
  if (g.quick) {
    uint64_t packed = 0;
    uint32_t differ = 0;  // the bits where some lo and hi codes differ
    if constexpr (VEC % 2 == 0) {
#pragma unroll
      for (int k = 0; k < VEC; k += 2) {
        const float q0 = gpu_mul_rn(v[k], g.recip);
        const float q1 = gpu_mul_rn(v[k + 1], g.recip);
        const uint32_t lo = F::encode2(below(q0), below(q1)) & 0xFFFFu;
        differ |= lo ^ (F::encode2(above(q0), above(q1)) & 0xFFFFu);
        packed |= static_cast<uint64_t>(lo) << (8 * k);
      }
    } else {
#pragma unroll
      for (int k = 0; k < VEC; ++k) {
        const float q = gpu_mul_rn(v[k], g.recip);
        const uint32_t lo = F::encode(below(q)) & 0xFFu;
        differ |= lo ^ (F::encode(above(q)) & 0xFFu);
        packed |= static_cast<uint64_t>(lo) << (8 * k);
      }
    }
    if (differ == 0) return packed;
  }
  if (!g.live) return 0;
  uint64_t packed = 0;
  if constexpr (VEC % 2 == 0) {
#pragma unroll
    for (int k = 0; k < VEC; k += 2) {
      const uint64_t pair = F::encode2(scaled(v[k], g.scale, F::kMax), scaled(v[k + 1], g.scale, F::kMax));
      packed |= (pair & 0xFFFFu) << (8 * k);
    }
  } else {
#pragma unroll
    for (int k = 0; k < VEC; ++k) {
      packed |= static_cast<uint64_t>(F::encode(scaled(v[k], g.scale, F::kMax)) & 0xFFu) << (8 * k);
    }
  }
  return packed;
}

// ---- the codec (gpu_quant_kernels.h): the kernels' FP8 numerics

template <bool E4M3>
struct Fp8Codec {
  using F = Fp8<E4M3>;
  using Stat = GroupAbsMax;
  using Group = GroupScale;
  static constexpr bool kOffset = false;
  static constexpr int kMinVec = 1;
  template <int VEC>
  static constexpr int kCodeBytes = VEC;

  __device__ __forceinline__ static int64_t code_byte(int64_t element) { return element; }

  __device__ __forceinline__ static GroupScale group(const GroupAbsMax& stat, int lane, int64_t index,
                                                   float* scale_out, float* /*offset_out*/) {
    const float scale = gpu_div_rn(stat.value(), F::kMax);
    if (lane == 0) scale_out[index] = scale;
    return group_scale(scale, 0.0f);
  }

  template <int VEC>
  __device__ __forceinline__ static uint64_t encode(const float (&v)[VEC], const GroupScale& g) {
    return encode_slot<VEC, E4M3>(v, g);
  }

  template <int VEC>
  __device__ __forceinline__ static void decode(uint64_t codes, float scale, float /*offset*/, float (&out)[VEC]) {
    if constexpr (VEC % 2 == 0) {
#pragma unroll
      for (int k = 0; k < VEC; k += 2) {
        const float2 pair = F::decode2(static_cast<uint32_t>(codes >> (8 * k)));
        out[k] = pair.x * scale;
        out[k + 1] = pair.y * scale;
      }
    } else {
#pragma unroll
      for (int k = 0; k < VEC; ++k) out[k] = F::decode(static_cast<uint32_t>(codes >> (8 * k)) & 0xFFu) * scale;
    }
  }
};

// ---- launch helpers (host)

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
    return with_fp8_format(format, [&](auto format_tag) {
      using Codec = Fp8Codec<decltype(format_tag)::value>;
      quantize_groups<Codec>(static_cast<const T*>(x), q, scale, nullptr, groups, group_size, stream);
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
    return with_fp8_format(format, [&](auto format_tag) {
      using Codec = Fp8Codec<decltype(format_tag)::value>;
      dequantize_groups<Codec>(q, scale, nullptr, static_cast<T*>(y), groups, group_size, stream);
      return gpuGetLastError();
    });
  });
}

}  // namespace gpu_ops
