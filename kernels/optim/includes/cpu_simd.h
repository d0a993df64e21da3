// Vector primitives for the CPU optimizer ops, one namespace per instruction set, and the
// run-time choice between them.
//
// The ops are compiled without -march (images must run on CPUs other than the build host), so
// each instruction set beyond the architecture's baseline lives in its own `#pragma GCC target`
// region and the best one the running CPU supports is picked once, at first use: scalar, AVX2 or
// AVX-512 on x86 (cpu_simd_x86.h); scalar, NEON or SVE on aarch64 (cpu_simd_arm.h); scalar
// elsewhere. Every namespace offers the same names (V, C, width, vload, vstore, ..., store_half);
// an op's kernel body is written once against `isa::` and included once per namespace (see
// csrc/cpu_adam.cpp).
//
// Torch-free on purpose: only the bindings (cpu_optim_binding.h) see tensors, and
// tests/kernels/csrc/simd_check.cpp runs the kernels without torch (cross-compiled for aarch64).
#pragma once

#if defined(__x86_64__) || defined(__i386__)
#define CPU_SIMD_X86 1
#include <immintrin.h>
#elif defined(__aarch64__)
#define CPU_SIMD_ARM 1
#include <arm_neon.h>
#if defined(__linux__)
#include <sys/auxv.h>
#ifndef HWCAP_SVE
#define HWCAP_SVE (1UL << 22)  // the Linux UAPI value, for C libraries older than SVE (glibc < 2.27)
#endif
#endif
// SVE needs GCC (clang ignores `#pragma GCC target`) with the ACLE header (GCC 10+), and Linux
// to say whether the CPU has it; elsewhere, or with -DCPU_SIMD_NO_SVE, NEON is the best level.
#if defined(__linux__) && defined(__GNUC__) && !defined(__clang__) && !defined(CPU_SIMD_NO_SVE) && \
    defined(__has_include)
#if __has_include(<arm_sve.h>)
#define CPU_SIMD_SVE 1
#endif
#endif
#endif

#include <omp.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <utility>
#include <vector>
#include <cstring>

namespace cpu_simd {

// Instruction sets in increasing order of preference; each architecture has its own, so a level
// is comparable only with another of the same build.
#if defined(CPU_SIMD_X86)
enum class Level : int { kScalar = 0, kAvx2 = 1, kAvx512 = 2 };
constexpr int kLevelCount = 3;
#elif defined(CPU_SIMD_ARM)
enum class Level : int { kScalar = 0, kNeon = 1, kSve = 2 };
constexpr int kLevelCount = 3;
#else
enum class Level : int { kScalar = 0 };
constexpr int kLevelCount = 1;
#endif

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
#if defined(CPU_SIMD_X86)
    case Level::kAvx512:
      return "avx512";
    case Level::kAvx2:
      return "avx2";
#elif defined(CPU_SIMD_ARM)
    case Level::kSve:
      return "sve";
    case Level::kNeon:
      return "neon";
#endif
    default:
      return "scalar";
  }
}

// Every level name of every architecture, so a name of another one is told apart from a typo.
constexpr const char* kAllLevelNames[] = {"scalar", "avx2", "avx512", "neon", "sve"};

// What the running CPU can execute.
inline Level detect_level() {
#if defined(CPU_SIMD_X86)
  // The AVX2 path also uses FMA and F16C (fp16 stores); every CPU with AVX2 so far has both,
  // but they are separate CPUID bits, so check them.
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx512f")) return Level::kAvx512;
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && __builtin_cpu_supports("f16c")) {
    return Level::kAvx2;
  }
  return Level::kScalar;
#elif defined(CPU_SIMD_ARM)
  // NEON (with its fp16 <-> fp32 conversions) is part of every aarch64 CPU; SVE is optional,
  // and the kernel says whether user space may use it.
#if defined(CPU_SIMD_SVE)
  if (getauxval(AT_HWCAP) & HWCAP_SVE) return Level::kSve;
#endif
  return Level::kNeon;
#else
  return Level::kScalar;
#endif
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

// An empty asm that claims to change a float in its register: the compiler must compute the
// value as written before it and may not fuse a product that passes through it into an FMA.
#if defined(CPU_SIMD_X86)
#define CPU_SIMD_FLOAT_BARRIER(a) __asm__("" : "+x"(a))
#elif defined(CPU_SIMD_ARM)
#define CPU_SIMD_FLOAT_BARRIER(a) __asm__("" : "+w"(a))  // an FP/SIMD register
#else
#define CPU_SIMD_FLOAT_BARRIER(a) __asm__("" : "+m"(a))  // through memory: slower, any target
#endif

// Names every namespace defines, beyond the arithmetic:
//   V          a vector of fp32 lanes; C: how a kernel's consts struct holds a loop-invariant
//              scalar as an operand (V itself, except where V cannot be a struct member: SVE)
//   width()    lanes in a V; kMaxWidth, the most it can be (the size of a tail buffer)
//   H          width() half-precision values, as vbf16 / vfp16 return them
namespace scalar {
using V = float;
using C = V;
constexpr int64_t kWidth = 1;
constexpr int64_t kMaxWidth = kWidth;
constexpr int64_t width() { return kWidth; }
inline V vload(const float* p) { return *p; }
inline void vstore(float* p, V x) { *p = x; }
inline V vset1(float x) { return x; }
inline C vconst(float x) { return vset1(x); }
inline V vadd(V a, V b) { return a + b; }
inline V vsub(V a, V b) { return a - b; }
inline V vmul(V a, V b) { return a * b; }
inline V vdiv(V a, V b) { return a / b; }
inline V vfmadd(V a, V b, V c) { return a * b + c; }  // a*b + c
inline V vsqrt(V a) { return std::sqrt(a); }
// +1, -1, or 0 (for +-0): torch.sign.
inline V vsign(V a) { return static_cast<float>((a > 0.0f) - (a < 0.0f)); }
// An optimization barrier: the compiler may not fuse a product that passes through here into
// an FMA, so code that must round each step like a chain of torch ops can say so. (aarch64 has
// scalar FMA in its baseline, and GCC contracts a*b+c by default.)
inline V vround(V a) {
  CPU_SIMD_FLOAT_BARRIER(a);
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

}  // namespace cpu_simd

#if defined(CPU_SIMD_X86)
#include "cpu_simd_x86.h"
#elif defined(CPU_SIMD_ARM)
#include "cpu_simd_arm.h"
#endif

namespace cpu_simd {

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

// parallel_for over the elements of `count` tensors at once, the size of tensor i being
// size_of(i): the threads split the tensors' elements as if they were one tensor, each taking one
// contiguous stretch, cut within a tensor at a multiple of kThreadAlign from its start (as
// parallel_for cuts one tensor), and call fn(i, begin, end) for each tensor's piece of it. A
// list of small tensors, each too small to wake a thread for, then runs on every thread in one
// parallel region instead of one tensor after another on one.
template <class SizeOf, class F>
inline void parallel_for_list(size_t count, const SizeOf& size_of, int num_threads, const F& fn) {
  std::vector<int64_t> starts(count + 1, 0);  // where each tensor starts in the whole
  for (size_t i = 0; i < count; ++i) starts[i + 1] = starts[i] + size_of(i);
  const int64_t total = starts[count];
  const int64_t threads = std::max<int64_t>(1, std::min<int64_t>(num_threads, total / kMinPerThread));
  if (threads <= 1) {
    for (size_t i = 0; i < count; ++i) {
      if (starts[i + 1] > starts[i]) fn(i, int64_t{0}, starts[i + 1] - starts[i]);
    }
    return;
  }
  // The tensor and the offset in it where a stretch starting at element `at` of the whole
  // begins: the offset rounded up to kThreadAlign, or the next tensor's start.
  const auto locate = [&](int64_t at) -> std::pair<size_t, int64_t> {
    if (at >= total) return {count, 0};
    const size_t i = static_cast<size_t>(std::upper_bound(starts.begin(), starts.end(), at) - starts.begin()) - 1;
    const int64_t offset = (at - starts[i] + kThreadAlign - 1) / kThreadAlign * kThreadAlign;
    if (offset >= starts[i + 1] - starts[i]) return {i + 1, 0};
    return {i, offset};
  };
  const int64_t chunk = (total + threads - 1) / threads;
#pragma omp parallel for schedule(static) num_threads(static_cast<int>(threads))
  for (int64_t t = 0; t < threads; ++t) {
    const auto [first, first_offset] = locate(t * chunk);
    const auto [last, last_offset] = locate((t + 1) * chunk);
    for (size_t i = first; i <= last && i < count; ++i) {
      const int64_t begin = i == first ? first_offset : 0;
      const int64_t end = i == last ? last_offset : starts[i + 1] - starts[i];
      if (begin < end) fn(i, begin, end);
    }
  }
}

}  // namespace cpu_simd
