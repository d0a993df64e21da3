// Multi-tensor apply: one kernel launch updates many tensors, chunk by chunk.
//
// The host walks a table of tensors (DEPTH pointer lists plus sizes), cuts each
// tensor into chunks of kMtChunk elements, one block per chunk, and packs the
// tensors' pointers and sizes, with each tensor's first block, into a struct passed
// by value as the kernel argument, launching whenever the struct is full. A block
// finds its tensor by a binary search over the first blocks.
//
// Why per-tensor first blocks and not apex's per-block (tensor, chunk) map: the map
// costs 5 bytes of the argument per block, which capped a launch at 320 blocks: a
// 1.2B-parameter model took ~60 launches of 2.4 blocks per SM each, every one ending
// in a drain where the GPU's memory bandwidth goes unused. Per tensor the table
// costs 8 * DEPTH + 20 bytes and a launch takes any number of blocks: the same model
// takes ~5 launches, each many waves deep.
//
// The struct stays under the 4 KiB kernel-argument limit that holds on every CUDA and
// ROCm target, with kMtOtherArgBytes left for the kernels' other arguments.
#pragma once

#include "gpu_compat.h"

constexpr int kMtChunk = 65536;       // elements per block
constexpr int kMtBlockThreads = 512;  // a multiple of both wave sizes
// Elements per thread per group when aligned: 16 bytes of fp32 (one 128-bit access; 8
// bytes for 2-byte params and grads, still a fully coalesced 256 bytes per warp).
constexpr int kMtILP = 4;
// Groups per loop trip: a thread issues the loads of kMtUnroll groups of every stream
// before it computes, so twice the bytes are in flight while it waits on memory.
constexpr int kMtUnroll = 2;
// Blocks per SM that the kernels' register use must allow (__launch_bounds__' second
// argument): 2 * 512 threads, at most 64 registers a thread on CUDA. The unrolled
// bodies spill at 3 blocks' 40 registers; 2 blocks with kMtUnroll groups in flight
// keep as many bytes in flight per SM as 4 blocks with one group (~128 KiB for fp32
// Adam), several times what the memory system needs to stay busy.
constexpr int kMtMinBlocks = 2;
constexpr int kMtArgBytes = 4096;
constexpr int kMtOtherArgBytes = 128;
// Blocks in one launch. HIP limits a grid to 2^32 threads; a tensor with more chunks
// than this continues in the next launch (2^22 * kMtChunk elements is 2^38).
constexpr int64_t kMtMaxBlocks = int64_t{1} << 22;

template <int DEPTH>
struct MtCapacity {
  // Per tensor: DEPTH pointers, its size, table index, first chunk and first block;
  // plus the count and the end of the last tensor's blocks.
  static constexpr int tensors = (kMtArgBytes - kMtOtherArgBytes - 8) / (8 * DEPTH + 8 + 4 + 4 + 4);
};

template <int DEPTH>
struct TensorListMeta {
  static constexpr int kTensors = MtCapacity<DEPTH>::tensors;
  void* addresses[DEPTH][kTensors];
  int64_t sizes[kTensors];
  int32_t tensor_index[kTensors];   // position in the caller's table (per-tensor side data)
  int32_t first_chunk[kTensors];    // chunk of the tensor that its first block in this launch takes
  int32_t first_block[kTensors + 1];  // the slot's blocks: [first_block[s], first_block[s + 1])
  int32_t count;                    // slots used
};
static_assert(sizeof(TensorListMeta<2>) <= kMtArgBytes - kMtOtherArgBytes, "kernel argument too large");
static_assert(sizeof(TensorListMeta<3>) <= kMtArgBytes - kMtOtherArgBytes, "kernel argument too large");
static_assert(sizeof(TensorListMeta<4>) <= kMtArgBytes - kMtOtherArgBytes, "kernel argument too large");
static_assert(sizeof(TensorListMeta<5>) <= kMtArgBytes - kMtOtherArgBytes, "kernel argument too large");
static_assert(kMtMaxBlocks * kMtBlockThreads <= (int64_t{1} << 32), "grid larger than HIP allows");

// The caller's table: lists[d][t] is tensor t's pointer for slot d.
template <int DEPTH>
struct MtTable {
  int n;
  void* const* lists[DEPTH];
  const int64_t* sizes;
};

// Slot of block `block` of a launch: the last slot whose first block is <= block
// (first_block is non-decreasing in slot order; empty tensors never get a slot).
template <int DEPTH>
__host__ __device__ __forceinline__ int mt_block_slot(const TensorListMeta<DEPTH>& meta, int block) {
  int lo = 0;
  int hi = meta.count - 1;
  while (lo < hi) {
    const int mid = (lo + hi + 1) / 2;
    if (meta.first_block[mid] <= block) {
      lo = mid;
    } else {
      hi = mid - 1;
    }
  }
  return lo;
}

// Chunk of its tensor that block `block` of a launch takes.
template <int DEPTH>
__host__ __device__ __forceinline__ int64_t mt_block_chunk(const TensorListMeta<DEPTH>& meta, int block) {
  const int slot = mt_block_slot(meta, block);
  return static_cast<int64_t>(meta.first_chunk[slot]) + (block - meta.first_block[slot]);
}

// Calls launch(meta, blocks) for each full (or final) pack; stops at the first error.
// Blocks come in (tensor, chunk) order within a launch and across launches: fused_lamb
// numbers its per-chunk partial sums by that order.
template <int DEPTH, typename Launch>
gpuError_t multi_tensor_apply(const MtTable<DEPTH>& table, Launch&& launch) {
  using Meta = TensorListMeta<DEPTH>;
  Meta meta;
  int tensors = 0;
  int64_t blocks = 0;
  const auto flush = [&]() {
    meta.first_block[tensors] = static_cast<int32_t>(blocks);
    meta.count = tensors;
    launch(meta, static_cast<int>(blocks));
    tensors = 0;
    blocks = 0;
    return gpuGetLastError();
  };
  for (int t = 0; t < table.n; ++t) {
    const int64_t size = table.sizes[t];
    if (size == 0) continue;
    const int64_t chunks = gpu_ceil_div(size, kMtChunk);
    for (int64_t done = 0; done < chunks;) {
      const int64_t room = kMtMaxBlocks - blocks;
      const int64_t take = chunks - done < room ? chunks - done : room;
      for (int d = 0; d < DEPTH; ++d) meta.addresses[d][tensors] = table.lists[d][t];
      meta.sizes[tensors] = size;
      meta.tensor_index[tensors] = t;
      meta.first_chunk[tensors] = static_cast<int32_t>(done);
      meta.first_block[tensors] = static_cast<int32_t>(blocks);
      ++tensors;
      blocks += take;
      done += take;
      if (tensors == Meta::kTensors || blocks == kMtMaxBlocks) {
        const gpuError_t err = flush();
        if (err != gpuSuccess) return err;
      }
    }
  }
  return tensors > 0 ? flush() : gpuSuccess;
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
  const int block = static_cast<int>(blockIdx.x);
  MtChunk<DEPTH> chunk;
  chunk.slot = mt_block_slot(meta, block);
  chunk.start =
      (static_cast<int64_t>(meta.first_chunk[chunk.slot]) + (block - meta.first_block[chunk.slot])) * kMtChunk;
  const int64_t remaining = meta.sizes[chunk.slot] - chunk.start;
  chunk.length = remaining < kMtChunk ? remaining : kMtChunk;
  return chunk;
}

// U groups of W consecutive elements each, group u at first + u * kStride: what one call
// of a kernel's body loads, updates and stores. Any group's W elements are all in range.
// Offsets are within a chunk (int), and the stride between groups is a compile-time
// constant, so the compiler addresses every group from one pointer plus an immediate.
template <int W, int U>
struct MtSpan {
  static constexpr int kWidth = W;
  static constexpr int kGroups = U;
  static constexpr int kStride = kMtBlockThreads * W;
  int first;
  __device__ __forceinline__ int at(int u) const { return first + u * kStride; }
};

// The span's elements of `base` as fp32, out[u][k] = base[at(u) + k].
template <int W, int U, typename T>
__device__ __forceinline__ void mt_load(float (&out)[U][W], const T* base, const MtSpan<W, U>& span) {
#pragma unroll
  for (int u = 0; u < U; ++u) load_as_float<W>(out[u], base + span.at(u));
}

template <int W, int U, typename T>
__device__ __forceinline__ void mt_store(T* base, const float (&in)[U][W], const MtSpan<W, U>& span) {
#pragma unroll
  for (int u = 0; u < U; ++u) store_from_float<W>(base + span.at(u), in[u]);
}

// Runs body(span) over the block's [0, length) (length <= kMtChunk) so that every element
// is in exactly one span. Blocks must have kMtBlockThreads threads. When `vectorized`
// (each stream's chunk start aligned to kMtILP elements): spans of kMtUnroll groups of
// kMtILP elements, the groups of a trip one block-width apart so that each load
// instruction of a warp reads contiguous memory; then single groups for the rest of the
// aligned part, then single elements for the last length % kMtILP. Otherwise single
// elements throughout (a tensor at an odd offset). Chunk starts are multiples of
// kMtChunk, so a tensor aligned at its base is aligned at every chunk. The body must
// treat every element alike: which span an element falls in depends on the chunk's length.
template <typename F>
__device__ __forceinline__ void mt_for_each(int64_t chunk_length, bool vectorized, F&& body) {
  static_assert(kMtChunk % (kMtBlockThreads * kMtILP * kMtUnroll) == 0, "full chunks are whole trips");
  const int length = static_cast<int>(chunk_length);
  const int tid = static_cast<int>(threadIdx.x);
  int scalar_from = 0;
  if (vectorized) {
    using Trip = MtSpan<kMtILP, kMtUnroll>;
    using Group = MtSpan<kMtILP, 1>;
    constexpr int kTrip = Trip::kStride * kMtUnroll;
    const int aligned = length - length % kMtILP;
    const int full_trips = aligned / kTrip * kTrip;
    for (int base = 0; base < full_trips; base += kTrip) body(Trip{base + tid * kMtILP});
    for (int i = full_trips + tid * kMtILP; i < aligned; i += Group::kStride) body(Group{i});
    scalar_from = aligned;
  }
  for (int i = scalar_from + tid; i < length; i += kMtBlockThreads) body(MtSpan<1, 1>{i});
}
