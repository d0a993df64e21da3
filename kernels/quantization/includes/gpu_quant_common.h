// What the grouped quantizers have in common: quantizer/quantizer.cu (int8 / int4) and
// fp_quantizer/fp_quantizer.cu (FP8) share their work layout (and the sub-warp merge of a
// group's statistic), the range of scales their quick encoding takes, the max |x|
// statistic, their memory access helpers and the host side of their persistent grids,
// defined once here.
//
// Work layout: a "sub-warp" of `lanes` threads (a power of two, at most kMaxLanes, so it
// never straddles a warp with wave32 or wave64) owns one group at a time, each lane owning
// "slots" of VEC consecutive elements; on the fast path a slot is 16 bytes of x / y
// (kVecOf<T> elements) read or written with one 128-bit access. Blocks of kBlock threads,
// one resident wave of them (persistent_grid) walking the groups in a grid-stride loop.
//
// Included only by .cu files (it pulls in the CUDA/HIP device headers, gpu_compat.h), one
// per op. Its definitions are in an unnamed namespace, like the rest of those files'
// helpers: internal linkage, a copy per file, which the compilers inline as they would
// the file's own.
#pragma once

#include <algorithm>
#include <cstdint>
#include <type_traits>

#include "gpu_compat.h"

namespace {

constexpr int kBlock = 256;    // threads per block: a multiple of both wave sizes
constexpr int kMaxLanes = 32;  // sub-warp width limit: within one warp on wave32 and wave64

// Elements in 16 bytes of T: the fast path's slot width.
template <typename T>
constexpr int kVecOf = static_cast<int>(16 / sizeof(T));

// The scales for which both encoders replace the per-element IEEE division by a multiply
// with RN(1 / scale) (each .cu file explains why its codes come out the same).
constexpr float kMinQuickScale = 0x1p-126f;  // FLT_MIN: 1 / scale stays normal...
constexpr float kMaxQuickScale = 0x1p126f;   // ...and so does scale

// A group's parameters as both encoders (each file's encode_slot) use them.
struct GroupScale {
  float scale;
  float offset;  // the asymmetric int codes' (the group's min); else 0
  float recip;   // RN(1 / scale), when quick
  bool live;     // scale > 0: else every code of the group is 0
  bool quick;    // scale (and 1 / scale) normal: the quick path applies
};

__device__ __forceinline__ GroupScale group_scale(float scale, float offset) {
  GroupScale g;
  g.scale = scale;
  g.offset = offset;
  g.live = scale > 0.0f;
  g.quick = scale >= kMinQuickScale && scale < kMaxQuickScale;
  g.recip = g.quick ? gpu_div_rn(1.0f, scale) : 0.0f;
  return g;
}

// max |x| over a group, accumulated per lane and merged across the sub-warp with shuffles,
// kept as the bits of |x|: for non-negative floats the unsigned order of the bits is the
// numeric order, and every NaN's |bits| exceed +inf's, so the unsigned max is max |x|, or a
// NaN when the group has one (as torch.amax gives it). Two integer ops per element, no NaN
// test per element, one shuffle per merge step.
struct GroupAbsMax {
  uint32_t bits = 0;
  __device__ __forceinline__ void add(float v) {
    const uint32_t a = __float_as_uint(v) & 0x7FFFFFFFu;
    bits = a > bits ? a : bits;
  }
  __device__ __forceinline__ void seal() {}  // nothing to settle before the merge
  __device__ __forceinline__ void merge(int offset, int lanes) {
    const uint32_t other = __float_as_uint(gpu_shfl_xor(__uint_as_float(bits), offset, lanes));
    bits = other > bits ? other : bits;
  }
  __device__ __forceinline__ float value() const { return __uint_as_float(bits); }
};

// ---- memory access helpers

// BYTES (1, 2, 4 or 8) bytes at p, which is aligned to BYTES; little-endian in the result.
template <int BYTES>
__device__ __forceinline__ uint64_t load_bytes(const uint8_t* p) {
  if constexpr (BYTES == 8) {
    const uint2 v = *reinterpret_cast<const uint2*>(p);
    return static_cast<uint64_t>(v.x) | (static_cast<uint64_t>(v.y) << 32);
  } else if constexpr (BYTES == 4) {
    return *reinterpret_cast<const uint32_t*>(p);
  } else if constexpr (BYTES == 2) {
    return *reinterpret_cast<const uint16_t*>(p);
  } else {
    static_assert(BYTES == 1, "1, 2, 4 or 8 bytes");
    return *p;
  }
}

template <int BYTES>
__device__ __forceinline__ void store_bytes(uint8_t* p, uint64_t v) {
  if constexpr (BYTES == 8) {
    *reinterpret_cast<uint2*>(p) = make_uint2(static_cast<uint32_t>(v), static_cast<uint32_t>(v >> 32));
  } else if constexpr (BYTES == 4) {
    *reinterpret_cast<uint32_t*>(p) = static_cast<uint32_t>(v);
  } else if constexpr (BYTES == 2) {
    *reinterpret_cast<uint16_t*>(p) = static_cast<uint16_t>(v);
  } else {
    static_assert(BYTES == 1, "1, 2, 4 or 8 bytes");
    *p = static_cast<uint8_t>(v);
  }
}

// Two floats as two 16-bit values in one word (first in the low half), each rounded to
// nearest even as from_float<T> rounds it: one paired conversion instead of two.
template <typename T>
__device__ __forceinline__ uint32_t pack2(float a, float b) {
#ifndef GPU_ROCM
  if constexpr (std::is_same_v<T, __half>) {
    const __half2 h = __floats2half2_rn(a, b);
    return *reinterpret_cast<const uint32_t*>(&h);
  }
#ifdef GPU_HAS_BF16
  if constexpr (std::is_same_v<T, gpu_bf16>) {
    const __nv_bfloat162 h = __floats2bfloat162_rn(a, b);
    return *reinterpret_cast<const uint32_t*>(&h);
  }
#endif
#endif
  GpuVec<T, 2> pair;
  pair.v[0] = from_float<T>(a);
  pair.v[1] = from_float<T>(b);
  return *reinterpret_cast<const uint32_t*>(&pair);
}

// VEC floats stored as T at p: one access when STORE == VEC (p aligned to it), else
// element by element.
template <int VEC, int STORE, typename T>
__device__ __forceinline__ void store_as(T* p, const float (&v)[VEC]) {
  static_assert(STORE == VEC || STORE == 1, "whole slots or single elements");
  if constexpr (STORE == 1) {
#pragma unroll
    for (int k = 0; k < VEC; ++k) p[k] = from_float<T>(v[k]);
  } else if constexpr (sizeof(T) == 2 && VEC % 2 == 0) {
    GpuVec<uint32_t, VEC / 2> words;
#pragma unroll
    for (int k = 0; k < VEC / 2; ++k) words.v[k] = pack2<T>(v[2 * k], v[2 * k + 1]);
    *reinterpret_cast<GpuVec<uint32_t, VEC / 2>*>(p) = words;
  } else {
    store_from_float<VEC>(p, v);
  }
}

// ---- work layout (device)

// A thread's place in the layout, for sub-warps of `lanes` threads (sub_warp's argument):
// lane `lane` of sub-warp `sub`, one of the block's `per_block` sub-warps.
struct SubWarp {
  int lane;
  int per_block;
  int sub;
};

__device__ __forceinline__ SubWarp sub_warp(int lanes) {
  SubWarp w;
  w.lane = static_cast<int>(threadIdx.x) & (lanes - 1);
  const int lane_bits = __ffs(lanes) - 1;  // lanes is a power of two: shifts, no division
  w.per_block = kBlock >> lane_bits;
  w.sub = static_cast<int>(threadIdx.x) >> lane_bits;
  return w;
}

// Merges a group statistic (add(v) per element, merge(offset, lanes) per shuffle step)
// across the sub-warp. At least one step: with lanes == 1 it is offset 0, a lane merged
// with itself (a no-op), which keeps the compiler from compiling the caller's whole loop
// twice, with and without shuffles. Every lane of the sub-warp calls it.
template <typename Stat>
__device__ __forceinline__ void merge_stat(Stat& stat, int lanes) {
  int offset = lanes >> 1;
  do {
    stat.merge(offset, lanes);
    offset >>= 1;
  } while (offset > 0);
}

// ---- launch helpers (host)

// Sub-warp width for a group of `slots` slots: the smallest power of two holding them all,
// at most kMaxLanes.
int lanes_for(int64_t slots) {
  int lanes = 1;
  while (lanes < slots && lanes < kMaxLanes) lanes *= 2;
  return lanes;
}

// Blocks of `kernel` that fit on one SM at once; 0 when the runtime cannot tell.
template <typename Kernel>
int resident_blocks_per_sm(Kernel kernel) {
  int blocks = 0;
#ifdef GPU_ROCM
  const gpuError_t err = hipOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, kernel, kBlock, 0);
#else
  const gpuError_t err = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, kernel, kBlock, 0);
#endif
  if (err != gpuSuccess) {
    (void)gpuGetLastError();  // a failed query must not surface as a launch error
    return 0;
  }
  return blocks;
}

// Grid of a grid-stride kernel: one resident wave (every block runs from the start, each
// with the same share of loop steps, give or take one), fewer when there is less work.
// `per_sm` is the kernel's occupancy; if the runtime could not say, a plain cap.
unsigned persistent_grid(int64_t blocks_wanted, int per_sm) {
  const int sms = gpu_multiprocessor_count();
  const int64_t wave = sms > 0 && per_sm > 0 ? static_cast<int64_t>(sms) * per_sm : int64_t{1} << 16;
  return static_cast<unsigned>(std::max<int64_t>(1, std::min(blocks_wanted, wave)));
}

}  // namespace
