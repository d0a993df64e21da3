// Warp-shuffle reductions over the threads of one "row group" of a block.
//
// Row kernels launch blocks of (tx, ty) threads: the tx threads sharing a
// threadIdx.y cooperate on one row. tx is a power of two; when it is at most the
// warp size the reduction is shuffles only (sub-warp groups never mix rows, with
// wave32 or wave64), otherwise warps combine through shared memory.
#pragma once

#include "gpu_compat.h"

struct GpuSumOp {
  __device__ __forceinline__ float operator()(float a, float b) const { return a + b; }
  __device__ __forceinline__ double operator()(double a, double b) const { return a + b; }
  __device__ __forceinline__ float2 operator()(float2 a, float2 b) const {
    return make_float2(a.x + b.x, a.y + b.y);
  }
};

// Max that keeps NaN, as torch.amax: the quantizers' group ranges must see a NaN.
struct GpuMaxNanOp {
  __device__ __forceinline__ float operator()(float a, float b) const { return gpu_fmax_nan(a, b); }
};

// (min, max) carried as (x, y), NaN kept as torch.amin / amax do.
struct GpuMinMaxNanOp {
  __device__ __forceinline__ float2 operator()(float2 a, float2 b) const {
    return make_float2(gpu_fmin_nan(a.x, b.x), gpu_fmax_nan(a.y, b.y));
  }
};

// Shared memory a row_reduce needs: one slot per warp per row of the block.
template <typename T>
struct GpuRowReduceScratch {
  T slots[kGpuMaxWarps];
};

// Reduce v across the blockDim.x threads with the same threadIdx.y. Every thread
// of the block must call it (it may synchronise the block). `scratch` holds at
// least blockDim.x * blockDim.y / 32 elements of T.
template <typename T, typename Op>
__device__ __forceinline__ T row_reduce(T v, Op op, T* scratch) {
  const int tx = static_cast<int>(blockDim.x);
  if (tx <= GPU_WARP_SIZE) {
    for (int offset = tx / 2; offset > 0; offset >>= 1) v = op(v, gpu_shfl_xor(v, offset, tx));
    return v;
  }
#pragma unroll
  for (int offset = GPU_WARP_SIZE / 2; offset > 0; offset >>= 1) {
    v = op(v, gpu_shfl_xor(v, offset, GPU_WARP_SIZE));
  }
  const int warps = tx / GPU_WARP_SIZE;
  T* row = scratch + threadIdx.y * warps;
  __syncthreads();  // the previous call's readers are done with scratch
  if (threadIdx.x % GPU_WARP_SIZE == 0) row[threadIdx.x / GPU_WARP_SIZE] = v;
  __syncthreads();
  T total = row[0];
  for (int w = 1; w < warps; ++w) total = op(total, row[w]);
  return total;
}

// Sum over all threads of a 1-D block; the result is valid in every thread.
template <typename T>
__device__ __forceinline__ T block_sum(T v, T* scratch) {
#pragma unroll
  for (int offset = GPU_WARP_SIZE / 2; offset > 0; offset >>= 1) {
    v = GpuSumOp()(v, gpu_shfl_xor(v, offset, GPU_WARP_SIZE));
  }
  const int warps = (static_cast<int>(blockDim.x) + GPU_WARP_SIZE - 1) / GPU_WARP_SIZE;
  __syncthreads();
  if (threadIdx.x % GPU_WARP_SIZE == 0) scratch[threadIdx.x / GPU_WARP_SIZE] = v;
  __syncthreads();
  T total = scratch[0];
  for (int w = 1; w < warps; ++w) total = GpuSumOp()(total, scratch[w]);
  return total;
}

// ---- row-kernel launch shapes (host side)

struct GpuRowLaunch {
  dim3 grid;
  dim3 block;
};

// tx threads per row (a power of two, 32..1024) so each handles about `per_thread`
// elements, and enough rows per block to make at least 256 threads.
inline GpuRowLaunch gpu_row_launch(int64_t rows, int64_t cols, int per_thread) {
  int64_t want = gpu_ceil_div(cols, per_thread);
  int tx = 32;
  while (tx < want && tx < 1024) tx *= 2;
  const int ty = tx >= 256 ? 1 : 256 / tx;
  GpuRowLaunch launch;
  launch.block = dim3(static_cast<unsigned>(tx), static_cast<unsigned>(ty));
  launch.grid = dim3(static_cast<unsigned>(gpu_ceil_div(rows, ty)));
  return launch;
}

// ---- column reductions: per-column sums over rows, in two steps

// Tile of a column-reduction block: kColTileX adjacent columns (coalesced reads
// along a row) times kColTileY row lanes.
constexpr int kColTileX = 32;
constexpr int kColTileY = 8;

// Sum `value` over threadIdx.y of a (kColTileX, kColTileY) block into thread y == 0.
__device__ __forceinline__ float col_tile_sum(float value, float (&tile)[kColTileY][kColTileX + 1]) {
  tile[threadIdx.y][threadIdx.x] = value;
  __syncthreads();
  float total = 0.0f;
  if (threadIdx.y == 0) {
#pragma unroll
    for (int y = 0; y < kColTileY; ++y) total += tile[y][threadIdx.x];
  }
  __syncthreads();
  return total;
}

// out[col] = sum over p of partial[p * cols + col], cast to T.
template <typename T>
__global__ void col_finalize_kernel(const float* __restrict__ partial, int64_t parts, int64_t cols,
                                    T* __restrict__ out) {
  const int64_t col = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (col >= cols) return;
  float total = 0.0f;
  for (int64_t p = 0; p < parts; ++p) total += partial[p * cols + col];
  out[col] = from_float<T>(total);
}
