// The kernels and launchers of the grouped quantizers, written once for both formats:
// quantizer/quantizer.cu (int8 / int4) and fp_quantizer/fp_quantizer.cu (FP8) each define
// their numerics as a Codec and call quantize_groups / dequantize_groups below. Work layout
// and helpers in gpu_quant_common.h; each .cu file explains why its codes come out as the
// reference's.
//
// A Codec:
//   using Stat;    a group's statistic per lane: add(v) per element, seal() before the merge,
//                  merge(offset, lanes) per shuffle step (merge_stat)
//   using Group;   a group's parameters as encode takes them
//   kOffset        whether a group has an offset (written by quantize, read by dequantize)
//   kMinVec        the smallest slot: elements whose codes one thread must write together
//   kCodeBytes<VEC>                  code bytes of a slot of VEC elements
//   code_byte(element)               the byte offset of an element's code (its slot's first)
//   group(stat, lane, index, scale_out, offset_out)   the group's parameters; lane 0 writes
//                                    its scale (and offset) to index
//   encode<VEC>(v, group)            the VEC codes of a slot, packed, the first lowest
//   decode<VEC>(codes, scale, offset, out)   the values of a slot's packed codes
//
// Included only by .cu files, after gpu_quant_common.h; like it, its definitions are in an
// unnamed namespace (a copy per file, each with its own kernels).
#pragma once

#include <cstdint>

#include "gpu_quant_common.h"

namespace {

// Loads in flight per thread in the streaming kernel's two passes.
constexpr int kStatBatch = 4;
constexpr int kCodeBatch = 2;

// The VEC elements of a slot at p (aligned to LOAD elements), LOAD at a time.
template <int VEC, int LOAD, typename T>
__device__ __forceinline__ GpuVec<T, VEC> load_slot(const T* p) {
  static_assert(VEC % LOAD == 0, "the load width must divide the slot");
  GpuVec<T, VEC> slot;
#pragma unroll
  for (int j = 0; j < VEC; j += LOAD) {
    const GpuVec<T, LOAD> part = *reinterpret_cast<const GpuVec<T, LOAD>*>(p + j);
#pragma unroll
    for (int k = 0; k < LOAD; ++k) slot.v[j + k] = part.v[k];
  }
  return slot;
}

// ---- quantize

// Cached kernel, fast path only (16-byte slots): each sub-warp owns U groups per loop
// step, each group at most R slots per lane (slots <= lanes * R). The slots stay in
// registers (as loaded, 16 bytes each) from the load to the encoding: x is read once.
template <typename Codec, typename T, int VEC, int U, int R>
__global__ void __launch_bounds__(kBlock)
    quantize_cached_kernel(const T* __restrict__ x, uint8_t* __restrict__ q, float* __restrict__ scale_out,
                           float* __restrict__ offset_out, int64_t groups, int64_t group_size, int lanes) {
  using Slot = GpuVec<T, VEC>;
  constexpr int kBytes = Codec::template kCodeBytes<VEC>;
  const auto [lane, per_block, sub] = sub_warp(lanes);
  const int slots = static_cast<int>(group_size / VEC);
  const int64_t step = static_cast<int64_t>(gridDim.x) * per_block * U;
  // `first` is the same in the whole block, so the loop (and with it every shuffle) is
  // taken by all threads together; groups past the end only skip their loads and stores.
  for (int64_t first = static_cast<int64_t>(blockIdx.x) * per_block * U; first < groups; first += step) {
    // Every load of the step is issued before any of them is used: U * R 16-byte loads in
    // flight per thread (a use between them would wait for the first before issuing the next).
    Slot raw[U][R];
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const int64_t group = first + static_cast<int64_t>(u) * per_block + sub;
#pragma unroll
      for (int r = 0; r < R; ++r) {
        const int slot = lane + r * lanes;
        if (group < groups && slot < slots) {
          raw[u][r] = *reinterpret_cast<const Slot*>(x + group * group_size + static_cast<int64_t>(slot) * VEC);
        }
      }
    }
    typename Codec::Stat stat[U];
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const int64_t group = first + static_cast<int64_t>(u) * per_block + sub;
#pragma unroll
      for (int r = 0; r < R; ++r) {
        if (group < groups && lane + r * lanes < slots) {
#pragma unroll
          for (int k = 0; k < VEC; ++k) stat[u].add(to_float(raw[u][r].v[k]));
        }
      }
      stat[u].seal();
    }
    // merge_stat for the U groups, their merges interleaved: independent shuffles back to
    // back. (Written out here: as a helper it compiled differently with hipcc.)
    int offset = lanes >> 1;
    do {
#pragma unroll
      for (int u = 0; u < U; ++u) stat[u].merge(offset, lanes);
      offset >>= 1;
    } while (offset > 0);
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const int64_t group = first + static_cast<int64_t>(u) * per_block + sub;
      if (group >= groups) continue;
      const typename Codec::Group g = Codec::group(stat[u], lane, group, scale_out, offset_out);
#pragma unroll
      for (int r = 0; r < R; ++r) {
        const int slot = lane + r * lanes;
        if (slot >= slots) continue;
        float v[VEC];
#pragma unroll
        for (int k = 0; k < VEC; ++k) v[k] = to_float(raw[u][r].v[k]);
        const uint64_t packed = Codec::template encode<VEC>(v, g);
        const int64_t element = group * group_size + static_cast<int64_t>(slot) * VEC;
        store_bytes<kBytes>(q + Codec::code_byte(element), packed);
      }
    }
  }
}

// Streaming kernel, any group_size (a multiple of kMinVec) and alignment: one group per
// sub-warp per loop step, a pass for the statistic, then a pass that reads the group again
// (from L1 / L2) and writes codes. Each pass takes its slots in batches whose loads are all
// issued before any is used (kStatBatch, kCodeBatch loads in flight per thread). The two
// passes' batch loads are written out: a helper shared by them compiled differently with
// hipcc.
template <typename Codec, typename T, int VEC, int LOAD>
__global__ void __launch_bounds__(kBlock)
    quantize_streaming_kernel(const T* __restrict__ x, uint8_t* __restrict__ q, float* __restrict__ scale_out,
                              float* __restrict__ offset_out, int64_t groups, int64_t group_size, int lanes) {
  using Slot = GpuVec<T, VEC>;
  constexpr int kBytes = Codec::template kCodeBytes<VEC>;
  const auto [lane, per_block, sub] = sub_warp(lanes);
  const int64_t slots = group_size / VEC;
  const int64_t step = static_cast<int64_t>(gridDim.x) * per_block;
  for (int64_t first = static_cast<int64_t>(blockIdx.x) * per_block; first < groups; first += step) {
    const int64_t group = first + sub;
    const bool active = group < groups;
    const T* xg = x + (active ? group : 0) * group_size;
    typename Codec::Stat stat;
    if (active) {
#pragma unroll 1
      for (int64_t base = lane; base < slots; base += static_cast<int64_t>(kStatBatch) * lanes) {
        Slot raw[kStatBatch];
#pragma unroll
        for (int b = 0; b < kStatBatch; ++b) {
          const int64_t slot = base + static_cast<int64_t>(b) * lanes;
          if (slot < slots) raw[b] = load_slot<VEC, LOAD>(xg + slot * VEC);
        }
#pragma unroll
        for (int b = 0; b < kStatBatch; ++b) {
          if (base + static_cast<int64_t>(b) * lanes < slots) {
#pragma unroll
            for (int k = 0; k < VEC; ++k) stat.add(to_float(raw[b].v[k]));
          }
        }
      }
    }
    stat.seal();
    merge_stat(stat, lanes);
    // Only the last loop step has inactive groups (the next `first` is past the end for
    // every thread): leaving early skips no shuffle of anyone.
    if (!active) continue;
    const typename Codec::Group g = Codec::group(stat, lane, group, scale_out, offset_out);
    const bool live = g.live;  // else every code of the group is 0: no need to read it again
#pragma unroll 1
    for (int64_t base = lane; base < slots; base += static_cast<int64_t>(kCodeBatch) * lanes) {
      Slot raw[kCodeBatch];
      if (live) {
#pragma unroll
        for (int b = 0; b < kCodeBatch; ++b) {
          const int64_t slot = base + static_cast<int64_t>(b) * lanes;
          if (slot < slots) raw[b] = load_slot<VEC, LOAD>(xg + slot * VEC);
        }
      }
#pragma unroll
      for (int b = 0; b < kCodeBatch; ++b) {
        const int64_t slot = base + static_cast<int64_t>(b) * lanes;
        if (slot >= slots) continue;
        uint64_t packed = 0;
        if (live) {
          float v[VEC];
#pragma unroll
          for (int k = 0; k < VEC; ++k) v[k] = to_float(raw[b].v[k]);
          packed = Codec::template encode<VEC>(v, g);
        }
        const int64_t element = group * group_size + slot * VEC;
        store_bytes<kBytes>(q + Codec::code_byte(element), packed);
      }
    }
  }
}

// ---- dequantize

// U groups per sub-warp per loop step; each lane walks its slots of each group (one slot
// when slots <= lanes, the case the fast path is shaped for). All loads of a step are
// issued before its stores. STORE: elements per store of y (VEC, or 1 for an element-
// aligned y).
template <typename Codec, typename T, int VEC, int STORE, int U>
__global__ void __launch_bounds__(kBlock)
    dequantize_kernel(const uint8_t* __restrict__ q, const float* __restrict__ scale,
                      const float* __restrict__ offset, T* __restrict__ y, int64_t groups, int64_t group_size,
                      int lanes) {
  constexpr int kBytes = Codec::template kCodeBytes<VEC>;
  const auto [lane, per_block, sub] = sub_warp(lanes);
  const int64_t slots = group_size / VEC;
  const int64_t step = static_cast<int64_t>(gridDim.x) * per_block * U;
  for (int64_t first = static_cast<int64_t>(blockIdx.x) * per_block * U; first < groups; first += step) {
    for (int64_t slot0 = 0; slot0 < slots; slot0 += lanes) {
      const int64_t slot = slot0 + lane;
      uint64_t codes[U];
      float s[U];
      float o[U];
#pragma unroll
      for (int u = 0; u < U; ++u) {
        const int64_t group = first + static_cast<int64_t>(u) * per_block + sub;
        if (group < groups && slot < slots) {
          const int64_t element = group * group_size + slot * VEC;
          codes[u] = load_bytes<kBytes>(q + Codec::code_byte(element));
          s[u] = scale[group];
          o[u] = Codec::kOffset ? offset[group] : 0.0f;
        }
      }
#pragma unroll
      for (int u = 0; u < U; ++u) {
        const int64_t group = first + static_cast<int64_t>(u) * per_block + sub;
        if (group < groups && slot < slots) {
          float out[VEC];
          Codec::template decode<VEC>(codes[u], s[u], o[u], out);
          store_as<VEC, STORE>(y + group * group_size + slot * VEC, out);
        }
      }
    }
  }
}

// ---- launch helpers (host)

// The launchers: one instantiation per kernel, so the occupancy query (static) runs once
// per kernel and process. Only the grid depends on it, never a result.
template <typename Codec, typename T, int VEC, int U, int R>
void launch_quantize_cached(const T* x, uint8_t* q, float* scale, float* offset, int64_t groups,
                            int64_t group_size, int lanes, gpuStream_t stream) {
  static const int per_sm = resident_blocks_per_sm(quantize_cached_kernel<Codec, T, VEC, U, R>);
  const int64_t groups_per_block = static_cast<int64_t>(kBlock / lanes) * U;
  const unsigned grid = persistent_grid(gpu_ceil_div(groups, groups_per_block), per_sm);
  quantize_cached_kernel<Codec, T, VEC, U, R>
      <<<grid, kBlock, 0, stream>>>(x, q, scale, offset, groups, group_size, lanes);
}

template <typename Codec, typename T, int VEC, int LOAD>
void launch_quantize_streaming(const T* x, uint8_t* q, float* scale, float* offset, int64_t groups,
                               int64_t group_size, gpuStream_t stream) {
  static const int per_sm = resident_blocks_per_sm(quantize_streaming_kernel<Codec, T, VEC, LOAD>);
  const int lanes = lanes_for(group_size / VEC);
  const unsigned grid = persistent_grid(gpu_ceil_div(groups, kBlock / lanes), per_sm);
  quantize_streaming_kernel<Codec, T, VEC, LOAD>
      <<<grid, kBlock, 0, stream>>>(x, q, scale, offset, groups, group_size, lanes);
}

template <typename Codec, typename T, int VEC, int STORE, int U>
void launch_dequantize(const uint8_t* q, const float* scale, const float* offset, T* y, int64_t groups,
                       int64_t group_size, gpuStream_t stream) {
  static const int per_sm = resident_blocks_per_sm(dequantize_kernel<Codec, T, VEC, STORE, U>);
  const int lanes = lanes_for(group_size / VEC);
  const int64_t groups_per_block = static_cast<int64_t>(kBlock / lanes) * U;
  const unsigned grid = persistent_grid(gpu_ceil_div(groups, groups_per_block), per_sm);
  dequantize_kernel<Codec, T, VEC, STORE, U><<<grid, kBlock, 0, stream>>>(q, scale, offset, y, groups, group_size, lanes);
}

// Loop steps of the fast paths: groups per sub-warp per step (U), i.e. 16-byte loads in
// flight per thread while the step's reductions wait on them.
constexpr int kQuantizeGroupsPerStep = 2;
constexpr int kDequantizeGroupsPerStep = 4;
// The cached quantize kernel's register budget: up to 4 slots per lane (VEC * 4 floats).
constexpr int kCachedSlotsPerLane = 4;

// Quantizes x ([groups, group_size] of T) into q, scale (and offset, when Codec::kOffset),
// picking the kernel: the fast path takes 16-byte slots, which needs group_size a multiple of
// the slot and x and q aligned to a slot's bytes (then every group starts aligned too); a
// view such as x[1:] of a fresh tensor is only element-aligned: the element-wise streaming
// kernel (slots of kMinVec, loaded one element at a time).
template <typename Codec, typename T>
void quantize_groups(const T* x, uint8_t* q, float* scale, float* offset, int64_t groups, int64_t group_size,
                     gpuStream_t stream) {
  constexpr int kVec = kVecOf<T>;
  const bool fast = group_size % kVec == 0 && gpu_is_aligned(x, kVec) &&
                    gpu_is_aligned(q, Codec::template kCodeBytes<kVec>);
  if (fast) {
    const int64_t slots = group_size / kVec;
    const int lanes = lanes_for(slots);
    if (slots <= lanes) {
      launch_quantize_cached<Codec, T, kVec, kQuantizeGroupsPerStep, 1>(x, q, scale, offset, groups, group_size,
                                                                         lanes, stream);
    } else if (slots <= static_cast<int64_t>(lanes) * kCachedSlotsPerLane) {
      launch_quantize_cached<Codec, T, kVec, 1, kCachedSlotsPerLane>(x, q, scale, offset, groups, group_size,
                                                                     lanes, stream);
    } else {
      launch_quantize_streaming<Codec, T, kVec, kVec>(x, q, scale, offset, groups, group_size, stream);
    }
  } else {
    launch_quantize_streaming<Codec, T, Codec::kMinVec, 1>(x, q, scale, offset, groups, group_size, stream);
  }
}

// Dequantizes q, scale (and offset) into y; the fast path as for quantize_groups.
template <typename Codec, typename T>
void dequantize_groups(const uint8_t* q, const float* scale, const float* offset, T* y, int64_t groups,
                       int64_t group_size, gpuStream_t stream) {
  constexpr int kVec = kVecOf<T>;
  const bool fast = group_size % kVec == 0 && gpu_is_aligned(y, kVec) &&
                    gpu_is_aligned(q, Codec::template kCodeBytes<kVec>);
  if (fast) {
    launch_dequantize<Codec, T, kVec, kVec, kDequantizeGroupsPerStep>(q, scale, offset, y, groups, group_size,
                                                                      stream);
  } else {
    launch_dequantize<Codec, T, Codec::kMinVec, 1, 1>(q, scale, offset, y, groups, group_size, stream);
  }
}

}  // namespace
