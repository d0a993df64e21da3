// Multi-tensor apply: one kernel launch updates many tensors, chunk by chunk.
//
// The host walks a table of tensors (DEPTH pointer lists plus sizes), cuts each
// tensor into chunks of kMtChunk elements, and packs (pointers, sizes, and a
// block -> (tensor, chunk) map) into a struct passed by value as the kernel
// argument, launching whenever the struct is full. The struct stays under the
// 4 KiB kernel-argument limit that holds on every CUDA and ROCm target.
// The scheme follows apex's multi_tensor_apply.
#pragma once

#include "gpu_compat.h"

constexpr int kMtChunk = 65536;      // elements per block
constexpr int kMtBlockThreads = 512;  // a multiple of both wave sizes
constexpr int kMtILP = 4;             // elements per thread per step when aligned

template <int DEPTH>
struct MtCapacity;
template <>
struct MtCapacity<2> {
  static constexpr int tensors = 64, blocks = 320;
};
template <>
struct MtCapacity<3> {
  static constexpr int tensors = 48, blocks = 320;
};
template <>
struct MtCapacity<4> {
  static constexpr int tensors = 36, blocks = 320;
};
template <>
struct MtCapacity<5> {
  static constexpr int tensors = 30, blocks = 320;
};

template <int DEPTH>
struct TensorListMeta {
  static constexpr int kTensors = MtCapacity<DEPTH>::tensors;
  static constexpr int kBlocks = MtCapacity<DEPTH>::blocks;
  void* addresses[DEPTH][kTensors];
  int64_t sizes[kTensors];
  int32_t tensor_index[kTensors];  // position in the caller's table (per-tensor side data)
  unsigned char block_to_tensor[kBlocks];
  int32_t block_to_chunk[kBlocks];
};
static_assert(sizeof(TensorListMeta<4>) <= 4096, "kernel argument too large");
static_assert(sizeof(TensorListMeta<5>) <= 4096, "kernel argument too large");

// The caller's table: lists[d][t] is tensor t's pointer for slot d.
template <int DEPTH>
struct MtTable {
  int n;
  void* const* lists[DEPTH];
  const int64_t* sizes;
};

// Calls launch(meta, blocks) for each full (or final) pack; stops at the first error.
template <int DEPTH, typename Launch>
gpuError_t multi_tensor_apply(const MtTable<DEPTH>& table, Launch&& launch) {
  using Meta = TensorListMeta<DEPTH>;
  Meta meta;
  int tensors = 0;
  int blocks = 0;
  for (int t = 0; t < table.n; ++t) {
    const int64_t size = table.sizes[t];
    if (size == 0) continue;
    for (int d = 0; d < DEPTH; ++d) meta.addresses[d][tensors] = table.lists[d][t];
    meta.sizes[tensors] = size;
    meta.tensor_index[tensors] = t;
    ++tensors;
    const int64_t chunks = gpu_ceil_div(size, kMtChunk);
    for (int64_t c = 0; c < chunks; ++c) {
      meta.block_to_tensor[blocks] = static_cast<unsigned char>(tensors - 1);
      meta.block_to_chunk[blocks] = static_cast<int32_t>(c);
      ++blocks;
      const bool last_chunk = c == chunks - 1;
      if (blocks < Meta::kBlocks && !(tensors == Meta::kTensors && last_chunk)) continue;
      launch(meta, blocks);
      const gpuError_t err = gpuGetLastError();
      if (err != gpuSuccess) return err;
      blocks = 0;
      if (last_chunk) {
        tensors = 0;
      } else {  // the current tensor continues in the next pack
        for (int d = 0; d < DEPTH; ++d) meta.addresses[d][0] = meta.addresses[d][tensors - 1];
        meta.sizes[0] = meta.sizes[tensors - 1];
        meta.tensor_index[0] = meta.tensor_index[tensors - 1];
        tensors = 1;
      }
    }
  }
  if (blocks > 0) {
    launch(meta, blocks);
    return gpuGetLastError();
  }
  return gpuSuccess;
}

// Where block blockIdx.x works: its tensor's slot in `meta` and its chunk's range.
template <int DEPTH>
struct MtChunk {
  int slot;
  int64_t start;
  int64_t length;
};

template <int DEPTH>
__device__ __forceinline__ MtChunk<DEPTH> mt_chunk(const TensorListMeta<DEPTH>& meta) {
  MtChunk<DEPTH> chunk;
  chunk.slot = meta.block_to_tensor[blockIdx.x];
  chunk.start = static_cast<int64_t>(meta.block_to_chunk[blockIdx.x]) * kMtChunk;
  const int64_t remaining = meta.sizes[chunk.slot] - chunk.start;
  chunk.length = remaining < kMtChunk ? remaining : kMtChunk;
  return chunk;
}

// Runs f(i, std::integral_constant<int, N>) over [0, length): N = kMtILP elements
// per call when `vectorized`, else one. Chunk starts are multiples of kMtChunk,
// so a tensor aligned at its base is aligned at every chunk.
template <typename F>
__device__ __forceinline__ void mt_for_each(int64_t length, bool vectorized, F&& f) {
  if (vectorized) {
    for (int64_t i = static_cast<int64_t>(threadIdx.x) * kMtILP; i < length;
         i += static_cast<int64_t>(blockDim.x) * kMtILP) {
      f(i, std::integral_constant<int, kMtILP>{});
    }
  } else {
    for (int64_t i = threadIdx.x; i < length; i += blockDim.x) f(i, std::integral_constant<int, 1>{});
  }
}
