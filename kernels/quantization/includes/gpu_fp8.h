// FP8 (OCP e4m3fn / e5m2) encode and decode in software: round to nearest even,
// saturating to the largest finite value, NaN preserved.
//
// ROCm 5.x has no FP8 header, so the HIP build of fp_quantizer uses these; the
// CUDA build uses cuda_fp8.h. Plain C++ (host and device) so it can be tested on
// the host against torch's float8 conversions.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>

#if defined(__CUDACC__) || defined(__HIPCC__)
#define GPU_FP8_HD __host__ __device__ __forceinline__
#else
#define GPU_FP8_HD inline
#endif

namespace gpu_fp8 {

// EXP/MAN bits, exponent bias, largest finite value, whether the format has
// infinities (e5m2) or only NaN at the top code (e4m3fn).
template <int EXP, int MAN>
struct Format;
template <>
struct Format<4, 3> {
  static constexpr int kBias = 7;
  static constexpr float kMax = 448.0f;
  static constexpr bool kHasInf = false;
  static constexpr uint8_t kNaN = 0x7F;
};
template <>
struct Format<5, 2> {
  static constexpr int kBias = 15;
  static constexpr float kMax = 57344.0f;
  static constexpr bool kHasInf = true;
  static constexpr uint8_t kNaN = 0x7E;
};

GPU_FP8_HD uint32_t float_bits(float f) {
  uint32_t u;
  memcpy(&u, &f, sizeof(u));
  return u;
}

template <int EXP, int MAN>
GPU_FP8_HD uint8_t encode(float value) {
  using F = Format<EXP, MAN>;
  const uint32_t bits = float_bits(value);
  const uint8_t sign = static_cast<uint8_t>((bits >> 24) & 0x80u);
  if (value != value) return static_cast<uint8_t>(sign | F::kNaN);
  float a = fabsf(value);
  if (a > F::kMax) a = F::kMax;  // saturate (infinities included)
  // Smallest normal: 2^(1 - bias). Below it the code is a multiple of the
  // subnormal step 2^(1 - bias - MAN); rintf rounds to nearest even, and a result of
  // 2^MAN lands exactly on the smallest normal's code.
  const float min_normal = ldexpf(1.0f, 1 - F::kBias);
  if (a < min_normal) {
    const float steps = rintf(ldexpf(a, F::kBias - 1 + MAN));
    return static_cast<uint8_t>(sign | static_cast<uint8_t>(steps));
  }
  const uint32_t abits = float_bits(a);
  int exponent = static_cast<int>((abits >> 23) & 0xFFu) - 127;
  uint32_t mantissa = abits & 0x7FFFFFu;
  constexpr int kShift = 23 - MAN;
  uint32_t kept = mantissa >> kShift;
  const uint32_t rest = mantissa & ((1u << kShift) - 1u);
  const uint32_t half = 1u << (kShift - 1);
  if (rest > half || (rest == half && (kept & 1u))) ++kept;
  if (kept == (1u << MAN)) {  // mantissa overflowed into the exponent
    kept = 0;
    ++exponent;
  }
  const uint32_t code = (static_cast<uint32_t>(exponent + F::kBias) << MAN) | kept;
  return static_cast<uint8_t>(sign | code);
}

template <int EXP, int MAN>
GPU_FP8_HD float decode(uint8_t code) {
  using F = Format<EXP, MAN>;
  const bool negative = (code & 0x80u) != 0;
  const int exponent = (code >> MAN) & ((1 << EXP) - 1);
  const int mantissa = code & ((1 << MAN) - 1);
  float magnitude;
  if (F::kHasInf && exponent == (1 << EXP) - 1) {
    magnitude = mantissa == 0 ? INFINITY : NAN;
  } else if (!F::kHasInf && exponent == (1 << EXP) - 1 && mantissa == (1 << MAN) - 1) {
    magnitude = NAN;
  } else if (exponent == 0) {
    magnitude = ldexpf(static_cast<float>(mantissa), 1 - F::kBias - MAN);
  } else {
    magnitude = ldexpf(static_cast<float>(mantissa + (1 << MAN)), exponent - F::kBias - MAN);
  }
  return negative ? -magnitude : magnitude;
}

}  // namespace gpu_fp8
