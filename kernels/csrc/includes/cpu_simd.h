// Vector primitives for the CPU optimizer ops, one namespace per instruction set, and the
// run-time choice between them.
//
// The ops are compiled without -march (images must run on CPUs other than the build host), so
// each instruction set lives in its own `#pragma GCC target` region and the best one the running
// CPU supports is picked once, at first use. Every namespace offers the same names (V, kWidth,
// vload, vstore, ..., store_half); an op's kernel body is written once against `isa::` and included once per
// namespace (see cpu_optim/cpu_adam.cpp).
//
// Torch-free on purpose: only the bindings (cpu_optim_binding.h) see tensors.
#pragma once

#include <immintrin.h>
#include <omp.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstring>

namespace cpu_simd {

enum class Level : int { kScalar = 0, kAvx2 = 1, kAvx512 = 2 };

// Which reduced-precision copy of the updated parameters a kernel also writes.
enum class HalfKind : int { kNone = 0, kBF16 = 1, kFP16 = 2 };

// How a tensor the kernel reads and writes (params, grads, state) is stored. The arithmetic is
// fp32 whatever the storage: bf16 / fp16 values are widened on load and rounded on store.
enum class Dtype : int { kFloat = 0, kBFloat16 = 1, kHalf = 2 };

template <Dtype kDtype>
struct Storage {
  using type = uint16_t;  // the bits of a bf16 or fp16 value
};
template <>
struct Storage<Dtype::kFloat> {
  using type = float;
};
template <Dtype kDtype>
using storage_t = typename Storage<kDtype>::type;

inline const char* level_name(Level level) {
  switch (level) {
    case Level::kAvx512:
      return "avx512";
    case Level::kAvx2:
      return "avx2";
    default:
      return "scalar";
  }
}

// What the running CPU can execute. The AVX2 path also uses FMA and F16C (fp16 stores);
// every CPU with AVX2 so far has both, but they are separate CPUID bits, so check them.
inline Level detect_level() {
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx512f")) return Level::kAvx512;
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && __builtin_cpu_supports("f16c")) {
    return Level::kAvx2;
  }
  return Level::kScalar;
}

// Probed once per process (thread-safe static), never per call.
inline Level supported_level() {
  static const Level level = detect_level();
  return level;
}

// -1: follow the CPU; otherwise a Level forced by set_simd_level (tests use it to run the
// scalar path on an AVX2 machine). Atomic because steps run with the GIL released.
inline std::atomic<int>& forced_level() {
  static std::atomic<int> forced{-1};
  return forced;
}

inline Level active_level() {
  const int forced = forced_level().load(std::memory_order_relaxed);
  return forced < 0 ? supported_level() : static_cast<Level>(forced);
}

// ---------------------------------------------------------------- scalar conversions

inline uint32_t float_bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof(u));
  return u;
}

inline float bits_float(uint32_t u) {
  float f;
  std::memcpy(&f, &u, sizeof(f));
  return f;
}

// Round to nearest even, NaN -> 0x7FC0: c10::BFloat16's round_to_nearest_even, which is what
// tensor.to(torch.bfloat16) computes.
inline uint16_t float_to_bf16(float f) {
  if (std::isnan(f)) return 0x7FC0;
  const uint32_t u = float_bits(f);
  return static_cast<uint16_t>((u + 0x7FFFu + ((u >> 16) & 1u)) >> 16);
}

// IEEE half, round to nearest even: c10::detail::fp16_ieee_from_fp32_value (the same
// algorithm, so scalar results match torch bit for bit, subnormals and overflow included).
inline uint16_t float_to_fp16(float f) {
  const float scale_to_inf = bits_float(0x77800000u);   // 2^112
  const float scale_to_zero = bits_float(0x08800000u);  // 2^-110
  float base = (std::fabs(f) * scale_to_inf) * scale_to_zero;
  const uint32_t w = float_bits(f);
  const uint32_t shl1_w = w + w;
  const uint32_t sign = w & 0x80000000u;
  uint32_t bias = shl1_w & 0xFF000000u;
  if (bias < 0x71000000u) bias = 0x71000000u;
  base = bits_float((bias >> 1) + 0x07800000u) + base;
  const uint32_t bits = float_bits(base);
  const uint32_t exp_bits = (bits >> 13) & 0x00007C00u;
  const uint32_t mantissa_bits = bits & 0x00000FFFu;
  const uint32_t nonsign = exp_bits + mantissa_bits;
  return static_cast<uint16_t>((sign >> 16) | (shl1_w > 0xFF000000u ? 0x7E00u : nonsign));
}

// Exact widenings (every bf16 and fp16 value is a float).
inline float bf16_to_float(uint16_t h) { return bits_float(static_cast<uint32_t>(h) << 16); }

// c10::detail::fp16_ieee_to_fp32_value: normals by rescaling the exponent, subnormals through
// a magic-number subtraction, infinities and NaNs by the rescale overflowing.
inline float fp16_to_float(uint16_t h) {
  const uint32_t w = static_cast<uint32_t>(h) << 16;
  const uint32_t sign = w & 0x80000000u;
  const uint32_t two_w = w + w;
  const float normalized = bits_float((two_w >> 4) + (0xE0u << 23)) * bits_float(0x07800000u);  // * 2^-112
  const float denormalized = bits_float((two_w >> 17) | (126u << 23)) - 0.5f;
  const uint32_t magnitude = two_w < (1u << 27) ? float_bits(denormalized) : float_bits(normalized);
  return bits_float(sign | magnitude);
}

// ---------------------------------------------------------------- scalar "vectors"

namespace scalar {
using V = float;
constexpr int64_t kWidth = 1;
inline V vload(const float* p) { return *p; }
inline void vstore(float* p, V x) { *p = x; }
inline V vset1(float x) { return x; }
inline V vadd(V a, V b) { return a + b; }
inline V vsub(V a, V b) { return a - b; }
inline V vmul(V a, V b) { return a * b; }
inline V vdiv(V a, V b) { return a / b; }
inline V vfmadd(V a, V b, V c) { return a * b + c; }  // a*b + c
inline V vsqrt(V a) { return std::sqrt(a); }
// +1, -1, or 0 (for +-0): torch.sign.
inline V vsign(V a) { return static_cast<float>((a > 0.0f) - (a < 0.0f)); }
// An optimization barrier: the compiler may not fuse a product that passes through here into
// an FMA, so code that must round each step like a chain of torch ops can say so.
inline V vround(V a) {
  __asm__("" : "+x"(a));
  return a;
}
using H = uint16_t;  // kWidth halves
inline H vbf16(V x) { return float_to_bf16(x); }
inline H vfp16(V x) { return float_to_fp16(x); }
inline V vload_bf16(const uint16_t* src) { return bf16_to_float(*src); }
inline V vload_fp16(const uint16_t* src) { return fp16_to_float(*src); }
inline void hstore(uint16_t* dst, H h) { *dst = h; }
inline void hstream(uint16_t* dst, H h) { *dst = h; }
inline bool hstreamable(const uint16_t*) { return false; }
inline void vfence() {}
#include "cpu_simd_half.h"
}  // namespace scalar

// ---------------------------------------------------------------- AVX2 + FMA + F16C

#pragma GCC push_options
#pragma GCC target("avx2,fma,f16c")
namespace avx2 {
using V = __m256;
constexpr int64_t kWidth = 8;
inline V vload(const float* p) { return _mm256_loadu_ps(p); }
inline void vstore(float* p, V x) { _mm256_storeu_ps(p, x); }
inline V vset1(float x) { return _mm256_set1_ps(x); }
inline V vadd(V a, V b) { return _mm256_add_ps(a, b); }
inline V vsub(V a, V b) { return _mm256_sub_ps(a, b); }
inline V vmul(V a, V b) { return _mm256_mul_ps(a, b); }
inline V vdiv(V a, V b) { return _mm256_div_ps(a, b); }
inline V vfmadd(V a, V b, V c) { return _mm256_fmadd_ps(a, b, c); }
inline V vsqrt(V a) { return _mm256_sqrt_ps(a); }
inline V vsign(V a) {
  const V zero = _mm256_setzero_ps();
  const V one = _mm256_set1_ps(1.0f);
  const V pos = _mm256_and_ps(_mm256_cmp_ps(a, zero, _CMP_GT_OQ), one);
  const V neg = _mm256_and_ps(_mm256_cmp_ps(a, zero, _CMP_LT_OQ), one);
  return _mm256_sub_ps(pos, neg);
}
inline V vround(V a) {
  __asm__("" : "+x"(a));
  return a;
}
using H = __m128i;
// Same rounding as float_to_bf16, eight lanes at a time with integer ops.
inline H vbf16(V x) {
  const __m256i u = _mm256_castps_si256(x);
  const __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(1));
  const __m256i bias = _mm256_add_epi32(lsb, _mm256_set1_epi32(0x7FFF));
  __m256i r = _mm256_srli_epi32(_mm256_add_epi32(u, bias), 16);
  const __m256i nan = _mm256_castps_si256(_mm256_cmp_ps(x, x, _CMP_UNORD_Q));
  r = _mm256_blendv_epi8(r, _mm256_set1_epi32(0x7FC0), nan);
  // Values are < 2^16 after the shift, so the saturating pack is exact.
  return _mm_packus_epi32(_mm256_castsi256_si128(r), _mm256_extracti128_si256(r, 1));
}
inline H vfp16(V x) { return _mm256_cvtps_ph(x, _MM_FROUND_TO_NEAREST_INT); }
inline V vload_bf16(const uint16_t* src) {
  const __m256i wide = _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(src)));
  return _mm256_castsi256_ps(_mm256_slli_epi32(wide, 16));
}
inline V vload_fp16(const uint16_t* src) {
  return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(src)));
}
inline void hstore(uint16_t* dst, H h) { _mm_storeu_si128(reinterpret_cast<__m128i*>(dst), h); }
// Non-temporal: the copy is written once and not read back by the step, so streaming it
// skips the read-for-ownership a normal store of a cold line costs (2 of every 32 bytes).
inline void hstream(uint16_t* dst, H h) { _mm_stream_si128(reinterpret_cast<__m128i*>(dst), h); }
inline bool hstreamable(const uint16_t* p) { return reinterpret_cast<uintptr_t>(p) % sizeof(H) == 0; }
inline void vfence() { _mm_sfence(); }
#include "cpu_simd_half.h"
}  // namespace avx2
#pragma GCC pop_options

// ---------------------------------------------------------------- AVX-512F

#pragma GCC push_options
#pragma GCC target("avx512f,avx2,fma,f16c")
namespace avx512 {
using V = __m512;
constexpr int64_t kWidth = 16;
inline V vload(const float* p) { return _mm512_loadu_ps(p); }
inline void vstore(float* p, V x) { _mm512_storeu_ps(p, x); }
inline V vset1(float x) { return _mm512_set1_ps(x); }
inline V vadd(V a, V b) { return _mm512_add_ps(a, b); }
inline V vsub(V a, V b) { return _mm512_sub_ps(a, b); }
inline V vmul(V a, V b) { return _mm512_mul_ps(a, b); }
inline V vdiv(V a, V b) { return _mm512_div_ps(a, b); }
inline V vfmadd(V a, V b, V c) { return _mm512_fmadd_ps(a, b, c); }
inline V vsqrt(V a) { return _mm512_sqrt_ps(a); }
inline V vsign(V a) {
  const V zero = _mm512_setzero_ps();
  const __mmask16 pos = _mm512_cmp_ps_mask(a, zero, _CMP_GT_OQ);
  const __mmask16 neg = _mm512_cmp_ps_mask(a, zero, _CMP_LT_OQ);
  const V plus = _mm512_mask_blend_ps(pos, zero, _mm512_set1_ps(1.0f));
  return _mm512_mask_blend_ps(neg, plus, _mm512_set1_ps(-1.0f));
}
inline V vround(V a) {
  __asm__("" : "+v"(a));
  return a;
}
using H = __m256i;
inline H vbf16(V x) {
  const __m512i u = _mm512_castps_si512(x);
  const __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(1));
  const __m512i bias = _mm512_add_epi32(lsb, _mm512_set1_epi32(0x7FFF));
  __m512i r = _mm512_srli_epi32(_mm512_add_epi32(u, bias), 16);
  const __mmask16 nan = _mm512_cmp_ps_mask(x, x, _CMP_UNORD_Q);
  r = _mm512_mask_blend_epi32(nan, r, _mm512_set1_epi32(0x7FC0));
  // vpmovdw truncates each lane to its low 16 bits, which hold the whole result.
  return _mm512_cvtepi32_epi16(r);
}
inline H vfp16(V x) { return _mm512_cvtps_ph(x, _MM_FROUND_TO_NEAREST_INT); }
inline V vload_bf16(const uint16_t* src) {
  const __m512i wide = _mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(src)));
  return _mm512_castsi512_ps(_mm512_slli_epi32(wide, 16));
}
inline V vload_fp16(const uint16_t* src) {
  return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(src)));
}
inline void hstore(uint16_t* dst, H h) { _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst), h); }
inline void hstream(uint16_t* dst, H h) { _mm256_stream_si256(reinterpret_cast<__m256i*>(dst), h); }
inline bool hstreamable(const uint16_t* p) { return reinterpret_cast<uintptr_t>(p) % sizeof(H) == 0; }
inline void vfence() { _mm_sfence(); }
#include "cpu_simd_half.h"
}  // namespace avx512
#pragma GCC pop_options

// ---------------------------------------------------------------- threads

// Below this many elements per thread, waking a thread costs more than it saves.
constexpr int64_t kMinPerThread = 1 << 15;
// Thread boundaries fall on multiples of 32 floats (128 B; 64 B of a half copy), so no two
// threads write into the same cache line.
constexpr int64_t kThreadAlign = 32;

// Split [0, n) into one contiguous block per thread (static schedule: each thread streams
// through its own range once) and call fn(begin, end) on each.
template <class F>
inline void parallel_for(int64_t n, int num_threads, const F& fn) {
  const int64_t threads = std::max<int64_t>(1, std::min<int64_t>(num_threads, n / kMinPerThread));
  if (threads <= 1) {
    if (n > 0) fn(int64_t{0}, n);
    return;
  }
  int64_t chunk = (n + threads - 1) / threads;
  chunk = (chunk + kThreadAlign - 1) / kThreadAlign * kThreadAlign;
#pragma omp parallel for schedule(static) num_threads(static_cast<int>(threads))
  for (int64_t t = 0; t < threads; ++t) {
    const int64_t begin = t * chunk;
    const int64_t end = std::min(n, begin + chunk);
    if (begin < end) fn(begin, end);
  }
}

}  // namespace cpu_simd
