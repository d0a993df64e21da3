// The aarch64 instruction sets of cpu_simd.h: NEON (every aarch64 CPU has it, so no target
// region) and SVE (optional: its own `#pragma GCC target("+sve")` region, chosen at run time
// from AT_HWCAP). Included by cpu_simd.h only, after the scalar namespace, with the same names
// (see there). Conversions round exactly as the x86 paths do, so every level stores the same bits.
#pragma once

#if defined(CPU_SIMD_SVE)
#pragma GCC push_options
#pragma GCC target("+sve")
#include <arm_sve.h>
#pragma GCC pop_options
#endif

namespace cpu_simd {

// ---------------------------------------------------------------- NEON (128-bit)

namespace neon {
using V = float32x4_t;
using C = V;
constexpr int64_t kWidth = 4;
constexpr int64_t kMaxWidth = kWidth;
constexpr int64_t width() { return kWidth; }
inline V vload(const float* p) { return vld1q_f32(p); }
inline void vstore(float* p, V x) { vst1q_f32(p, x); }
inline V vset1(float x) { return vdupq_n_f32(x); }
inline C vconst(float x) { return vset1(x); }
inline V vadd(V a, V b) { return vaddq_f32(a, b); }
inline V vsub(V a, V b) { return vsubq_f32(a, b); }
inline V vmul(V a, V b) { return vmulq_f32(a, b); }
inline V vdiv(V a, V b) { return vdivq_f32(a, b); }
inline V vfmadd(V a, V b, V c) { return vfmaq_f32(c, a, b); }  // c + a*b, one rounding
inline V vsqrt(V a) { return vsqrtq_f32(a); }
inline V vsign(V a) {  // compares are false for NaN, so NaN -> 0 as on x86
  const uint32x4_t one = vreinterpretq_u32_f32(vdupq_n_f32(1.0f));
  const V pos = vreinterpretq_f32_u32(vandq_u32(vcgtzq_f32(a), one));
  const V neg = vreinterpretq_f32_u32(vandq_u32(vcltzq_f32(a), one));
  return vsubq_f32(pos, neg);
}
inline V vround(V a) {
  __asm__("" : "+w"(a));
  return a;
}
using H = uint16x4_t;
// float_to_bf16 four lanes at a time: round to nearest even with integer ops, NaN -> 0x7FC0.
inline H vbf16(V x) {
  const uint32x4_t u = vreinterpretq_u32_f32(x);
  const uint32x4_t lsb = vandq_u32(vshrq_n_u32(u, 16), vdupq_n_u32(1));
  uint32x4_t r = vshrq_n_u32(vaddq_u32(u, vaddq_u32(lsb, vdupq_n_u32(0x7FFF))), 16);
  r = vbslq_u32(vceqq_f32(x, x), r, vdupq_n_u32(0x7FC0));  // x == x: all lanes but NaNs
  return vmovn_u32(r);  // the low 16 bits hold the whole result
}
// FCVT rounds as FPCR says: to nearest even (Linux starts every thread so), as F16C's does here.
inline H vfp16(V x) { return vreinterpret_u16_f16(vcvt_f16_f32(x)); }
inline V vload_bf16(const uint16_t* src) { return vreinterpretq_f32_u32(vshll_n_u16(vld1_u16(src), 16)); }
inline V vload_fp16(const uint16_t* src) { return vcvt_f32_f16(vreinterpret_f16_u16(vld1_u16(src))); }
inline void hstore(uint16_t* dst, H h) { vst1_u16(dst, h); }
// No non-temporal variant: Arm cores detect a streaming write and skip the read-for-ownership
// themselves (Neoverse "write streaming mode"), which is what x86's hstream buys.
inline void hstream(uint16_t* dst, H h) { hstore(dst, h); }
inline bool hstreamable(const uint16_t*) { return false; }
inline void vfence() {}
#include "cpu_simd_half.h"
}  // namespace neon

// ---------------------------------------------------------------- SVE (128 to 2048-bit)

#if defined(CPU_SIMD_SVE)
#pragma GCC push_options
#pragma GCC target("+sve")
// Vector-length agnostic: width() is the CPU's lane count (svcntw), read at run time, so one
// binary uses 256-bit vectors on Graviton3 and 512-bit ones on A64FX. Every operation is on all
// lanes; the kernels' tails go through zero-padded buffers of kMaxWidth, as on the other sets.
//
// SVE vectors are sizeless types: no struct may hold one. So C, the type of a kernel's
// loop-invariant operands, is a float, and each arithmetic operation takes a C or a V for any
// operand (a C is broadcast with svdup, which the compiler hoists out of the loop).
namespace sve {
using V = svfloat32_t;
using C = float;
constexpr int64_t kMaxWidth = 2048 / 32;  // the architecture's largest vector
inline int64_t width() { return static_cast<int64_t>(svcntw()); }
inline svbool_t all() { return svptrue_b32(); }
inline V as_v(V x) { return x; }
inline V as_v(C x) { return svdup_n_f32(x); }
inline V vload(const float* p) { return svld1_f32(all(), p); }
inline void vstore(float* p, V x) { svst1_f32(all(), p, x); }
inline V vset1(float x) { return svdup_n_f32(x); }
inline C vconst(float x) { return x; }
template <class A, class B>
inline V vadd(A a, B b) {
  return svadd_f32_x(all(), as_v(a), as_v(b));
}
template <class A, class B>
inline V vsub(A a, B b) {
  return svsub_f32_x(all(), as_v(a), as_v(b));
}
template <class A, class B>
inline V vmul(A a, B b) {
  return svmul_f32_x(all(), as_v(a), as_v(b));
}
template <class A, class B>
inline V vdiv(A a, B b) {
  return svdiv_f32_x(all(), as_v(a), as_v(b));
}
template <class A, class B, class D>
inline V vfmadd(A a, B b, D c) {  // a*b + c, one rounding
  return svmad_f32_x(all(), as_v(a), as_v(b), as_v(c));
}
inline V vsqrt(V a) { return svsqrt_f32_x(all(), a); }
inline V vsign(V a) {  // compares are false for NaN, so NaN -> 0 as on x86
  const V plus = svdup_n_f32_z(svcmpgt_n_f32(all(), a, 0.0f), 1.0f);
  return svsel_f32(svcmplt_n_f32(all(), a, 0.0f), svdup_n_f32(-1.0f), plus);
}
inline V vround(V a) {
  __asm__("" : "+w"(a));
  return a;
}
// width() halves, each in the low 16 bits of a 32-bit lane: what the widening loads (ld1h into
// .s lanes) read and the narrowing stores (st1h from .s lanes) write.
using H = svuint32_t;
inline H vbf16(V x) {  // as neon::vbf16
  const svuint32_t u = svreinterpret_u32_f32(x);
  const svuint32_t lsb = svand_n_u32_x(all(), svlsr_n_u32_x(all(), u, 16), 1);
  const svuint32_t r = svlsr_n_u32_x(all(), svadd_u32_x(all(), u, svadd_n_u32_x(all(), lsb, 0x7FFF)), 16);
  return svsel_u32(svcmpuo_f32(all(), x, x), svdup_n_u32(0x7FC0), r);
}
// FCVT to half writes each result into the low half of its 32-bit lane (round to nearest even
// per FPCR, as neon::vfp16), and converts back from there.
inline H vfp16(V x) { return svreinterpret_u32_f16(svcvt_f16_f32_x(all(), x)); }
inline V vload_bf16(const uint16_t* src) {
  return svreinterpret_f32_u32(svlsl_n_u32_x(all(), svld1uh_u32(all(), src), 16));
}
inline V vload_fp16(const uint16_t* src) {
  return svcvt_f32_f16_x(all(), svreinterpret_f16_u32(svld1uh_u32(all(), src)));
}
inline void hstore(uint16_t* dst, H h) { svst1h_u32(all(), dst, h); }
inline void hstream(uint16_t* dst, H h) { hstore(dst, h); }  // see neon::hstream
inline bool hstreamable(const uint16_t*) { return false; }
inline void vfence() {}
#include "cpu_simd_half.h"
}  // namespace sve
#pragma GCC pop_options
#endif  // CPU_SIMD_SVE

}  // namespace cpu_simd
