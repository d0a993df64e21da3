// The x86 instruction sets of cpu_simd.h: AVX2 (with FMA and F16C) and AVX-512F, each in its own
// `#pragma GCC target` region (no -march: the CPU is probed at run time). Included by cpu_simd.h
// only, after the scalar namespace, with the same names (see there).
#pragma once

namespace cpu_simd {

// ---------------------------------------------------------------- AVX2 + FMA + F16C

#pragma GCC push_options
#pragma GCC target("avx2,fma,f16c")
namespace avx2 {
using V = __m256;
using C = V;
constexpr int64_t kWidth = 8;
constexpr int64_t kMaxWidth = kWidth;
constexpr int64_t width() { return kWidth; }
inline V vload(const float* p) { return _mm256_loadu_ps(p); }
inline void vstore(float* p, V x) { _mm256_storeu_ps(p, x); }
inline V vset1(float x) { return _mm256_set1_ps(x); }
inline C vconst(float x) { return vset1(x); }
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
using C = V;
constexpr int64_t kWidth = 16;
constexpr int64_t kMaxWidth = kWidth;
constexpr int64_t width() { return kWidth; }
inline V vload(const float* p) { return _mm512_loadu_ps(p); }
inline void vstore(float* p, V x) { _mm512_storeu_ps(p, x); }
inline V vset1(float x) { return _mm512_set1_ps(x); }
inline C vconst(float x) { return vset1(x); }
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

}  // namespace cpu_simd
