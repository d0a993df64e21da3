// Grouped int8 / int4 quantize and dequantize (see gpu_quantizer.h for the rules).
//
// Work layout, both directions: a "sub-warp" of `lanes` threads (a power of two, at most
// 32, so it never straddles a warp with wave32 or wave64) owns one group at a time, and
// each of its lanes owns "slots" of VEC consecutive elements. On the fast path VEC
// elements are 16 bytes of x / y (8 fp16 / bf16, 4 fp32): one 128-bit load or store per
// slot, VEC (int8) or VEC / 2 (int4) bytes of codes per slot in one store or load. A block
// of 256 threads holds 256 / lanes sub-warps, and the grid is one resident wave of blocks
// walking the groups in a grid-stride loop, so every SM stays busy to the end and no block
// is launched just to do a few hundred bytes of work.
//
// Quantize, groups of at most 128 slots (e.g. group_size 128 with 16-bit x: 16 lanes of one
// slot): the slots stay in registers from the load to the store, so x is read once; the
// group's max |x| or (min, max) is reduced with warp shuffles only (no shared memory, no
// __syncthreads); each thread handles two groups per loop step (two 16-byte loads in
// flight) when a group is at most one slot per lane. Larger groups, and x / q whose
// alignment or group_size allows no 16-byte access, take the streaming kernel: the same
// shuffle reduction over a first pass, then a second pass (from L1 / L2) that writes codes.
// Per element the work is a multiply and a few adds (encode_slot: the IEEE division of
// the reference is needed only near rounding ties, which are detected), so the kernels
// stay memory-bound.
// Dequantize: same layout, no reduction; the group index comes from the layout, with no
// 64-bit division per element.
//
// Exactness: codes, scales and offsets agree bit for bit with the PyTorch reference (and
// with this op's earlier kernels), tiny groups (denormal scales), NaN and infinities
// included: the divisions that decide a result are IEEE (gpu_div_rn; the op is built with
// -ftz=false -prec-div=true, see op_builder/ops/quantizer.py). The reference rules are
// spelled out in IntCode and encode_slot below.
#include "gpu_quant_common.h"
#include "gpu_quant_kernels.h"
#include "gpu_quantizer.h"
#include "gpu_reduce.h"

namespace {

// ---- numerics (the reference rules of kernels/quantization.py)

// 1.5 * 2^23: for |r| <= 2^22, r + kRoundMagic lies in [2^23, 2^24), where the float
// spacing is 1, so the (round-to-nearest-even) add rounds r to the nearest integer, ties
// to even, exactly as __float2int_rn / torch.round; the integer n is then the low bits:
// bits(r + kRoundMagic) = 0x4B400000 + n. The low byte of those bits is n's two's
// complement byte, since 0x4B400000 ends in a zero byte. This keeps the per-element
// rounding on the FP32 pipe instead of the quarter-rate F2I conversion. (Checked
// exhaustively on the host against clamp(rint(r)) for every fp32 value r and each of the
// four code ranges below.)
constexpr float kRoundMagic = 12582912.0f;

template <int BITS, bool SYM>
struct IntCode {
  // Asymmetric codes are 0..levels(); symmetric ones -qmax()..qmax().
  __host__ __device__ static constexpr int levels() { return (1 << BITS) - 1; }
  __host__ __device__ static constexpr int qmax() { return (1 << (BITS - 1)) - 1; }
  __host__ __device__ static constexpr float lowest() { return SYM ? -static_cast<float>(qmax()) : 0.0f; }
  __host__ __device__ static constexpr float highest() {
    return SYM ? static_cast<float>(qmax()) : static_cast<float>(levels());
  }

  // The code of v as the low bits of the result (the byte is the code's two's complement),
  // with the exact division. Only for scale > 0: a scale that is not (0, or NaN from a NaN
  // in the group) gives code 0 for the whole group, which the callers write without
  // calling this. (encode_slot below has the usual, quicker way to the same codes.)
  __device__ static uint32_t encode(float v, float scale, float offset) {
    const float r = SYM ? gpu_div_rn(v, scale) : gpu_div_rn(v - offset, scale);
    // inf / inf (an infinite element, so an infinite scale) is NaN: the reference's code
    // for it is 0 (its NaN -> int conversion leaves 0 in the stored bits on every torch
    // backend). Said explicitly: the clamp below would turn NaN into a bound.
    if (isnan(r)) return 0u;
    // round(clamp(r)) == clamp(round(r)) for integer bounds (rounding is monotonic and
    // leaves integers alone), and the clamped value is small enough for kRoundMagic.
    const float c = fminf(fmaxf(r, lowest()), highest());
    return __float_as_uint(c + kRoundMagic);
  }

  // 2^23 + b is exact for a byte b, and so is subtracting 2^23 (+ the bias that turns a
  // two's complement code into an unsigned one): float(code) without the quarter-rate I2F.
  __device__ static float code_value(uint32_t bits) {
    if constexpr (BITS == 8) {
      return SYM ? __uint_as_float(0x4B000000u | ((bits & 0xFFu) ^ 0x80u)) - 8388736.0f
                 : __uint_as_float(0x4B000000u | (bits & 0xFFu)) - 8388608.0f;
    } else {
      return SYM ? __uint_as_float(0x4B000000u | ((bits & 0xFu) ^ 0x8u)) - 8388616.0f
                 : __uint_as_float(0x4B000000u | (bits & 0xFu)) - 8388608.0f;
    }
  }

  __device__ static float decode(uint32_t bits, float scale, float offset) {
    // Separate multiply and add: a fused multiply-add would round differently from the
    // reference's q * scale + offset.
    const float product = gpu_mul_rn(code_value(bits), scale);
    return SYM ? product : product + offset;
  }
};

// ---- per-element division without a division
//
// The reference divides every element by the group's scale (IEEE, correctly rounded) and
// rounds the quotient r to an integer. An IEEE division is about ten instructions per
// element (reciprocal, refinements, range check, slow-path branch), enough to make the
// kernel compute-bound. Most elements do not need the exact quotient, only its rounding:
// with y = RN(1 / scale) computed once per group and q = RN(d * y) (d the dividend),
//   |q - r| <= |d / scale| * (3u + u^2) + 2^-149   (u = 2^-24, the subnormal term for d * y)
// when scale and 1 / scale are normal floats. In a live group |d / scale| < 256 (symmetric:
// |x| <= absmax and scale = RN(absmax / qmax) >= absmax / qmax * (1 - u); asymmetric:
// 0 <= RN(x - min) <= RN(max - min) and the same for levels), so |q - r| < 2^-14. Then if
// q is within 0.5 - 2^-14 of an integer n, r is within 0.5 of n (no tie either), and
// round(r) = n. The clamp of the reference does nothing here: |d / scale| <= qmax / (1 - u)
// (symmetric) or levels / (1 - u) with d >= 0 (asymmetric), so n is within the code range
// already. Otherwise (q close to a half-integer, about one element in 8000 for random
// data) the slot is redone with the exact division. Groups whose scale is outside the
// normal range (tiny groups: denormal scales; infinite or NaN ones) always take the exact
// division.
constexpr float kTieMargin = 0.5f - 0x1p-14f;

// a + b correctly rounded and never fused or reassociated (the magic-number rounding
// below relies on the exact steps it is written with).
__device__ __forceinline__ float add_rn(float a, float b) {
#ifdef GPU_ROCM
#pragma clang fp contract(off)
  return a + b;  // hipcc builds without fast math: no reassociation
#else
  return __fadd_rn(a, b);
#endif
}

// The VEC codes of a slot, packed (int8: a byte each; int4: a nibble each, the first
// element lowest), as the reference computes them.
template <int BITS, bool SYM, int VEC>
__device__ __forceinline__ uint64_t encode_slot(const float (&v)[VEC], const GroupScale& g) {
  using Code = IntCode<BITS, SYM>;
  constexpr uint64_t kMask = BITS == 8 ? 0xFFu : 0xFu;
  if (g.quick) {
    uint64_t packed = 0;
    uint32_t unsure = 0;  // bit k: element k's quick code is not certain
#pragma unroll
    for (int k = 0; k < VEC; ++k) {
      const float d = SYM ? v[k] : v[k] - g.offset;  // the reference's dividend, bit for bit
      const float c = gpu_mul_rn(d, g.recip);        // q
      const float t = add_rn(c, kRoundMagic);        // rounds q to the nearest integer n, ties to even
      // q - n is exact (n is a multiple of q's ulp and |q - n| <= 0.5), so is t - kRoundMagic.
      unsure |= static_cast<uint32_t>(!(fabsf(add_rn(c, -add_rn(t, -kRoundMagic))) <= kTieMargin)) << k;
      packed |= (static_cast<uint64_t>(__float_as_uint(t)) & kMask) << (BITS * k);
    }
    if (unsure == 0) return packed;
#ifdef QUANTIZER_REDO_UNSURE_ONLY
    // Candidate (issue 37, to be measured against the whole-slot redo below): redo only the
    // unsure elements, one IEEE division each, so a warp waits for as many divisions as its
    // most unsure slot has (about one) instead of 8 (bench/quantizer_exact_path.py: 4-6x fewer
    // for bf16). The element is picked by a select chain: a run-time index into v would move
    // the slot to local memory. The codes are the same: the sure ones are the reference's
    // (see kTieMargin), the others come from the reference's own division.
    while (unsure != 0) {
      const int k = __ffs(static_cast<int>(unsure)) - 1;
      unsure &= unsure - 1;
      float element = v[0];
#pragma unroll
      for (int j = 1; j < VEC; ++j) element = j == k ? v[j] : element;
      const uint64_t code = Code::encode(element, g.scale, g.offset) & kMask;
      packed = (packed & ~(kMask << (BITS * k))) | (code << (BITS * k));
    }
    return packed;
#endif
  }
  if (!g.live) return 0;
  uint64_t packed = 0;
#pragma unroll
  for (int k = 0; k < VEC; ++k) {
    packed |= (static_cast<uint64_t>(Code::encode(v[k], g.scale, g.offset)) & kMask) << (BITS * k);
  }
  return packed;
}

// The statistic a group's scale comes from, accumulated per lane and then merged across
// the sub-warp with shuffles. NaN propagates as torch.amin / amax propagate it (a NaN
// anywhere makes the group's scale NaN), without a NaN test in every min / max.
template <bool SYM>
struct GroupStat;

// Symmetric: max |x|, kept as the bits of |x| (GroupAbsMax, gpu_quant_common.h: a NaN
// anywhere gives a NaN). The reference's max(-min, max) is the same value; only the
// sign of an all-zero group's zero scale may differ, and zero scales give code 0 anyway.
template <>
struct GroupStat<true> : GroupAbsMax {
  template <int BITS>
  __device__ __forceinline__ float2 params() const {  // (scale, offset)
    return make_float2(gpu_div_rn(value(), static_cast<float>(IntCode<BITS, true>::qmax())), 0.0f);
  }
};

// Asymmetric: (min, max). Per element plain fminf / fmaxf (which skip NaN) and a NaN flag;
// seal() turns a lane that saw a NaN into (NaN, NaN) before the merge, whose min / max
// keep NaN (GpuMinMaxNanOp), so the group's min and max both come out NaN, as the
// reference's amin and amax.
template <>
struct GroupStat<false> {
  float lo = INFINITY;
  float hi = -INFINITY;
  bool nan = false;
  __device__ __forceinline__ void add(float v) {
    lo = fminf(lo, v);
    hi = fmaxf(hi, v);
    nan |= isnan(v);  // bitwise: one predicate op per element, no branch
  }
  __device__ __forceinline__ void seal() {
    if (nan) lo = hi = __uint_as_float(0x7FC00000u);
  }
  __device__ __forceinline__ void merge(int offset, int lanes) {
    const float2 r = GpuMinMaxNanOp()(make_float2(lo, hi), gpu_shfl_xor(make_float2(lo, hi), offset, lanes));
    lo = r.x;
    hi = r.y;
  }
  template <int BITS>
  __device__ __forceinline__ float2 params() const {  // (scale, offset = min)
    return make_float2(gpu_div_rn(hi - lo, static_cast<float>(IntCode<BITS, false>::levels())), lo);
  }
};

// ---- the codec (gpu_quant_kernels.h): the kernels' int8 / int4 numerics

template <int BITS, bool SYM>
struct IntCodec {
  using Stat = GroupStat<SYM>;
  using Group = GroupScale;
  static constexpr bool kOffset = !SYM;
  // int4: the two codes of a byte come from one thread (slots of 2 at the least).
  static constexpr int kMinVec = BITS == 8 ? 1 : 2;
  template <int VEC>
  static constexpr int kCodeBytes = BITS == 8 ? VEC : VEC / 2;

  __device__ __forceinline__ static int64_t code_byte(int64_t element) { return BITS == 8 ? element : element / 2; }

  __device__ __forceinline__ static GroupScale group(const Stat& stat, int lane, int64_t index, float* scale_out,
                                                    float* offset_out) {
    const float2 p = stat.template params<BITS>();
    if (lane == 0) {
      scale_out[index] = p.x;
      if constexpr (!SYM) offset_out[index] = p.y;
    }
    return group_scale(p.x, p.y);
  }

  template <int VEC>
  __device__ __forceinline__ static uint64_t encode(const float (&v)[VEC], const GroupScale& g) {
    return encode_slot<BITS, SYM>(v, g);
  }

  template <int VEC>
  __device__ __forceinline__ static void decode(uint64_t codes, float scale, float offset, float (&out)[VEC]) {
#pragma unroll
    for (int k = 0; k < VEC; ++k) {
      out[k] = IntCode<BITS, SYM>::decode(static_cast<uint32_t>(codes >> (BITS * k)), scale, offset);
    }
  }
};

// ---- launch helpers (host)

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

}  // namespace

namespace gpu_ops {

gpuError_t quantize_int(const void* x, uint8_t* q, float* scale, float* offset, int64_t groups,
                        int64_t group_size, int bits, bool symmetric, DType dtype, gpuStream_t stream) {
  if (groups == 0 || group_size == 0) return gpuSuccess;
  if (bits == 4 && group_size % 2 != 0) return gpuErrorInvalidValue;
  return gpu_dispatch_float(dtype, [&](auto tag) {
    using T = decltype(tag);
    return with_format(bits, symmetric, [&](auto bits_tag, auto sym_tag) {
      using Codec = IntCodec<decltype(bits_tag)::value, decltype(sym_tag)::value>;
      quantize_groups<Codec>(static_cast<const T*>(x), q, scale, offset, groups, group_size, stream);
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
    return with_format(bits, symmetric, [&](auto bits_tag, auto sym_tag) {
      using Codec = IntCodec<decltype(bits_tag)::value, decltype(sym_tag)::value>;
      dequantize_groups<Codec>(q, scale, offset, static_cast<T*>(y), groups, group_size, stream);
      return gpuGetLastError();
    });
  });
}

}  // namespace gpu_ops
