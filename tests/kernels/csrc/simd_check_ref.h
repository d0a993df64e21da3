// The independent side of simd_check.cpp: conversions and update rules written out plainly,
// in double where arithmetic is involved, sharing no code with kernels/optim (so a bug there
// cannot hide in both). Values follow torch: round to nearest even, bf16 NaN -> 0x7FC0.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>

namespace ref {

inline uint32_t bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof(u));
  return u;
}

inline float from_bits(uint32_t u) {
  float f;
  std::memcpy(&f, &u, sizeof(f));
  return f;
}

// Keep the upper half of the float's bits; round up when the dropped half is above the
// midpoint, or at it when the kept half is odd. Carries into the exponent give the next
// binade, or infinity, as they should.
inline uint16_t to_bf16(float x) {
  if (std::isnan(x)) return 0x7FC0;
  const uint32_t u = bits(x);
  uint32_t upper = u >> 16;
  const uint32_t dropped = u & 0xFFFFu;
  if (dropped > 0x8000u || (dropped == 0x8000u && (upper & 1u))) ++upper;
  return static_cast<uint16_t>(upper);
}

inline float from_bf16(uint16_t h) { return from_bits(static_cast<uint32_t>(h) << 16); }

// IEEE binary16 from the value: scale the magnitude to an integer count of the result's ulps
// (exact in double) and round that with nearbyint, which rounds half to even.
inline uint16_t to_fp16(float x) {
  const uint16_t sign = std::signbit(x) ? 0x8000 : 0;
  if (std::isnan(x)) return sign | 0x7E00;  // NaN payloads are not compared (see simd_check.cpp)
  const double a = std::fabs(static_cast<double>(x));
  if (a >= 65520.0) return sign | 0x7C00;  // at or past the midpoint between 65504 and 2^16
  if (a < std::ldexp(1.0, -14)) {          // subnormal: units of 2^-24; 1024 units is the smallest normal
    return sign | static_cast<uint16_t>(std::nearbyint(a * std::ldexp(1.0, 24)));
  }
  int e;
  const double m = std::frexp(a, &e);  // a = m * 2^e, m in [0.5, 1)
  double q = std::nearbyint(m * 2048.0);  // 11 significant bits: [1024, 2048]
  int exponent = e - 1;
  if (q == 2048.0) {
    q = 1024.0;
    ++exponent;
  }
  if (exponent > 15) return sign | 0x7C00;
  return sign | static_cast<uint16_t>(((exponent + 15) << 10) | (static_cast<int>(q) - 1024));
}

inline float from_fp16(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const int exponent = (h >> 10) & 0x1F;
  const int mantissa = h & 0x3FF;
  if (exponent == 0x1F) {  // infinities; NaNs come back quiet, their payload kept
    return from_bits(sign | 0x7F800000u | (mantissa ? 0x00400000u | (mantissa << 13) : 0u));
  }
  const double magnitude = exponent == 0 ? std::ldexp(static_cast<double>(mantissa), -24)
                                         : std::ldexp(static_cast<double>(1024 + mantissa), exponent - 25);
  return from_bits(sign | bits(static_cast<float>(magnitude)));
}

// ---------------------------------------------------------------- update rules, one element

struct Adam {
  double lr, beta1, beta2, eps, weight_decay;
  int step;
  bool adamw;
  double bc1 = 1.0 - std::pow(beta1, step);  // bias corrections
  double bc2 = 1.0 - std::pow(beta2, step);
  // p, g, m, v in; p, m, v out (torch.optim.Adam / AdamW).
  void apply(double& p, double g, double& m, double& v) const {
    if (adamw) {
      p *= 1.0 - lr * weight_decay;
    } else {
      g += weight_decay * p;
    }
    m = beta1 * m + (1.0 - beta1) * g;
    v = beta2 * v + (1.0 - beta2) * g * g;
    p -= lr / bc1 * m / (std::sqrt(v) / std::sqrt(bc2) + eps);
  }
};

struct Adagrad {
  double lr, lr_decay, eps, weight_decay;
  int step;
  void apply(double& p, double g, double& sum) const {
    g += weight_decay * p;
    sum += g * g;
    p -= lr / (1.0 + (step - 1) * lr_decay) * g / (std::sqrt(sum) + eps);
  }
};

struct Lion {
  double lr, beta1, beta2, weight_decay;
  // sign() turns a rounding difference in c near 0 into a step of 2 * lr, so c is rounded as
  // the kernel's contract says, like torch's chain of fp32 ops (two products, then a sum); the
  // rest is in double. `volatile` keeps the compiler from fusing a product into an FMA.
  void apply(double& p, float g, float m, double& m_new) const {
    volatile float b1m = static_cast<float>(beta1) * m;
    volatile float b1g = static_cast<float>(1.0 - beta1) * g;
    const float c = b1m + b1g;
    const double sign = c > 0.0f ? 1.0 : c < 0.0f ? -1.0 : 0.0;
    p = p * (1.0 - lr * weight_decay) - lr * sign;
    m_new = beta2 * m + (1.0 - beta2) * g;
  }
};

}  // namespace ref
