// Small float formats on fp32 bits (encode, decode) and the Philox4x32-10 counter-based
// generator behind their stochastic rounding: the rules of kernels/fp_quantization.py.
//
// Formats 1 + EXP + MAN bits wide, exponent bias 2^(EXP - 1) - 1, subnormals kept:
//   8 bits: OCP FP8, e4m3fn (NaN at S.1111.111, no infinity) and e5m2 (IEEE infinities / NaN);
//   others (e3m2, e2m3, e2m1, e4m7): every code finite, as OCP MX FP6 / FP4 (no inf / NaN code).
// encode rounds |v| in units of the format's step at v (2^(e - MAN) in binade e, 2^(1 - bias - MAN)
// below the smallest normal) and saturates at the largest finite value; infinities saturate too.
// A NaN becomes FP8's NaN code with the sign cleared (x86 and CUDA make NaNs of different sign
// from inf / inf: a fixed code keeps the two implementations equal) or 0 in formats without one.
//
// Plain C++ (host and device), so a host build can check it against the Python rules.
#pragma once

#include <cstdint>
#include <cstring>

#if defined(__CUDACC__) || defined(__HIPCC__)
#define GPU_FPF_HD __host__ __device__ __forceinline__
#else
#define GPU_FPF_HD inline
#endif

namespace gpu_fpf {

constexpr float pow2(int e) {
  float v = 1.0f;
  for (; e > 0; --e) v *= 2.0f;
  for (; e < 0; ++e) v *= 0.5f;
  return v;
}

template <int EXP, int MAN>
struct Format {
  static constexpr int kBits = 1 + EXP + MAN;
  static constexpr int kBias = (1 << (EXP - 1)) - 1;
  static constexpr bool kFp8 = kBits == 8;
  static_assert(!kFp8 || (EXP == 4 && MAN == 3) || (EXP == 5 && MAN == 2), "8-bit formats are OCP FP8 only");
  static_assert(MAN >= 1 && MAN <= 7, "the rounding shift 23 - MAN stays within 16..22");
  // Largest finite magnitude code: the top code for the all-finite formats; below FP8's NaN
  // (e4m3fn: S.1111.110) or infinity (e5m2: S.11110.11).
  static constexpr uint32_t kMaxCode = !kFp8 ? (1u << (EXP + MAN)) - 1u : (EXP == 4 ? 0x7Eu : 0x7Bu);
  static constexpr uint32_t kNaN = !kFp8 ? 0u : (EXP == 4 ? 0x7Fu : 0x7Eu);
  static constexpr float kMax = pow2(static_cast<int>(kMaxCode >> MAN) - kBias) *
                                (1.0f + static_cast<float>(kMaxCode & ((1u << MAN) - 1u)) / (1 << MAN));
  // fp32 exponent field of the smallest normal 2^(1 - bias).
  static constexpr uint32_t kMinNormalField = static_cast<uint32_t>(128 - kBias);
  static constexpr float kSubnormalStep = pow2(1 - kBias - MAN);
};

GPU_FPF_HD uint32_t float_bits(float f) {
  uint32_t u;
  memcpy(&u, &f, sizeof(u));
  return u;
}

GPU_FPF_HD float bits_float(uint32_t u) {
  float f;
  memcpy(&f, &u, sizeof(f));
  return f;
}

// The code of `value`. Nearest: ties to the even code. Stochastic: up to the next step with
// probability floor(2^32 * f) / 2^32 for f the fraction of a step above the lower neighbour
// (f itself when |value| is at least 2^-9 times the smallest subnormal: shift <= 32), taken as
// `random < threshold` for `random` a uniform 32-bit word.
//
// |value| is an integer `src` times 2^-shift steps: in the normal range src is the fp32 bits
// themselves (exponent and mantissa: the rounding carry walks into the exponent, and the code
// is those bits less the exponent's rebias), below it the 24-bit significand.
template <int EXP, int MAN>
GPU_FPF_HD uint32_t encode(float value, bool stochastic, uint32_t random) {
  using F = Format<EXP, MAN>;
  const uint32_t u = float_bits(value);
  const uint32_t a = u & 0x7FFFFFFFu;
  if (a > 0x7F800000u) return F::kNaN;
  const uint32_t field = a >> 23;
  uint32_t src;
  uint32_t rebias;
  int shift;
  if (field >= F::kMinNormalField) {
    src = a;
    shift = 23 - MAN;
    rebias = static_cast<uint32_t>(127 - F::kBias) << MAN;
  } else {
    src = field != 0 ? (a & 0x7FFFFFu) | 0x800000u : a;
    shift = 151 - F::kBias - MAN - static_cast<int>(field != 0 ? field : 1u);
    rebias = 0;
  }
  uint32_t kept = 0;
  uint32_t rem = src;
  if (shift < 32) {
    kept = src >> shift;
    rem = src & ((1u << shift) - 1u);
  }
  uint32_t up;
  if (stochastic) {
    // threshold = floor(rem * 2^32 / 2^shift); src < 2^24 once shift >= 32.
    const uint32_t threshold = shift <= 32 ? rem << (32 - shift) : (shift < 56 ? rem >> (shift - 32) : 0u);
    up = random < threshold ? 1u : 0u;
  } else {
    // shift >= 32 leaves less than half a step (src < 2^24): 0.
    const uint32_t half = shift < 32 ? 1u << (shift - 1) : 0xFFFFFFFFu;
    up = (rem > half || (rem == half && (kept & 1u) != 0)) ? 1u : 0u;
  }
  uint32_t mag = kept + up - rebias;
  if (mag > F::kMaxCode) mag = F::kMaxCode;
  return ((u >> 31) << (F::kBits - 1)) | mag;
}

template <int EXP, int MAN>
GPU_FPF_HD float decode(uint32_t code) {
  using F = Format<EXP, MAN>;
  const uint32_t field = (code >> MAN) & ((1u << EXP) - 1u);
  const uint32_t man = code & ((1u << MAN) - 1u);
  float mag = field == 0 ? static_cast<float>(man) * F::kSubnormalStep
                         : bits_float(((field + 127u - F::kBias) << 23) | (man << (23 - MAN)));
  if constexpr (F::kFp8) {
    if (EXP == 4 && field == 15u && man == 7u) mag = bits_float(0x7FC00000u);
    if (EXP == 5 && field == 31u) mag = man == 0 ? bits_float(0x7F800000u) : bits_float(0x7FC00000u);
  }
  return ((code >> (F::kBits - 1)) & 1u) != 0 ? -mag : mag;
}

// ---- Philox4x32-10 (Salmon et al., "Parallel random numbers: as easy as 1, 2, 3", SC 2011;
// the constants and round of Random123's philox.h).
struct Words4 {
  uint32_t v[4];
};

GPU_FPF_HD void mulhilo(uint32_t a, uint32_t b, uint32_t& hi, uint32_t& lo) {
  const uint64_t p = static_cast<uint64_t>(a) * b;
  hi = static_cast<uint32_t>(p >> 32);
  lo = static_cast<uint32_t>(p);
}

GPU_FPF_HD Words4 philox4x32_10(uint32_t c0, uint32_t c1, uint32_t c2, uint32_t c3, uint32_t k0, uint32_t k1) {
#if defined(__CUDACC__) || defined(__HIPCC__)
#pragma unroll
#endif
  for (int round = 0; round < 10; ++round) {
    if (round > 0) {
      k0 += 0x9E3779B9u;
      k1 += 0xBB67AE85u;
    }
    uint32_t hi0, lo0, hi1, lo1;
    mulhilo(0xD2511F53u, c0, hi0, lo0);
    mulhilo(0xCD9E8D57u, c2, hi1, lo1);
    c0 = hi1 ^ c1 ^ k0;
    c1 = lo1;
    c2 = hi0 ^ c3 ^ k1;
    c3 = lo0;
  }
  return Words4{{c0, c1, c2, c3}};
}

// The random words of elements 4b .. 4b + 3 (b = `block`, elements numbered in the quantized
// tensor's flat order) under the 64-bit seed: counter (b low, b high, 0, 0), key (seed low,
// seed high). A word depends on the seed and the element's index only, never on who computes it.
GPU_FPF_HD Words4 random_block(uint64_t block, uint64_t seed) {
  return philox4x32_10(static_cast<uint32_t>(block), static_cast<uint32_t>(block >> 32), 0u, 0u,
                       static_cast<uint32_t>(seed), static_cast<uint32_t>(seed >> 32));
}

}  // namespace gpu_fpf
