// y = gelu(x + bias) and its backward, exact ("none", erf) or tanh-approximated,
// matching torch.nn.functional.gelu(x + b, approximate=...).
//
// Forward is a vectorized elementwise pass. Backward is one fused pass over row slabs:
// each thread owns VEC adjacent columns (one 16-byte access of dy, x and dx per row when
// the layout allows), walks its slab's rows writing dx and summing it for dbias in
// registers, so dy and x are read exactly once; a second small kernel adds the slabs'
// fp32 partial sums in a fixed order (deterministic: no float atomics).
#include "gpu_compat.h"
#include "gpu_transformer.h"

namespace {

constexpr float kSqrtHalf = 0.70710678118654752f;      // 1 / sqrt(2)
constexpr float kInvSqrt2Pi = 0.39894228040143268f;    // 1 / sqrt(2 pi)
constexpr float kSqrt2OverPi = 0.79788456080286536f;   // sqrt(2 / pi)
constexpr float kTanhCoeff = 0.044715f;

// tanh to a few fp32 ulps. The ops build with --use_fast_math, which turns tanhf into
// tanh.approx.f32 (relative error ~2^-11): enough for bf16, but ~3e-5 off in fp32 GeLU's
// backward. expm1f keeps its accuracy under fast math, also near 0 where 1 - 2/(e^2a + 1)
// would cancel; past |u| = 10, tanh rounds to +-1 in fp32. A NaN passes through.
__device__ __forceinline__ float accurate_tanh(float u) {
  const float a = fabsf(u) > 10.0f ? 10.0f : fabsf(u);
  const float e = expm1f(2.0f * a);
  return copysignf(e / (e + 2.0f), u);
}

template <bool TANH>
__device__ __forceinline__ float gelu(float z) {
  if constexpr (TANH) {
    return 0.5f * z * (1.0f + accurate_tanh(kSqrt2OverPi * (z + kTanhCoeff * z * z * z)));
  } else {
    return 0.5f * z * (1.0f + erff(z * kSqrtHalf));
  }
}

template <bool TANH>
__device__ __forceinline__ float gelu_grad(float z) {
  if constexpr (TANH) {
    const float t = accurate_tanh(kSqrt2OverPi * (z + kTanhCoeff * z * z * z));
    return 0.5f * (1.0f + t) + 0.5f * z * (1.0f - t * t) * kSqrt2OverPi * (1.0f + 3.0f * kTanhCoeff * z * z);
  } else {
    return 0.5f * (1.0f + erff(z * kSqrtHalf)) + z * kInvSqrt2Pi * __expf(-0.5f * z * z);
  }
}

// VEC > 1 only when cols % VEC == 0, so a vector never straddles two rows.
template <typename T, int VEC, bool TANH>
__global__ void bias_gelu_forward_kernel(const T* __restrict__ x, const T* __restrict__ bias, T* __restrict__ y,
                                         int64_t n, int64_t cols) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x * VEC;
  for (int64_t i = (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) * VEC; i < n; i += stride) {
    float v[VEC], b[VEC];
    load_as_float<VEC>(v, x + i);
    load_as_float<VEC>(b, bias + i % cols);
#pragma unroll
    for (int k = 0; k < VEC; ++k) v[k] = gelu<TANH>(v[k] + b[k]);
    store_from_float<VEC>(y + i, v);
  }
}

// ---- backward: dx = dy * gelu'(x + b), dbias = column sums of dx

// Raw storage of VEC elements, loaded in one access, converted when used: a thread holds
// kBwdRowUnroll rows of dy and x in flight in half the registers of their fp32 values.
template <typename T, int VEC>
struct alignas(sizeof(T) * VEC) RawVec {
  T v[VEC];
};

template <typename T, int VEC>
__device__ __forceinline__ RawVec<T, VEC> load_raw(const T* p) {
  return *reinterpret_cast<const RawVec<T, VEC>*>(p);
}

// Element k of `in` rounded to T, as the bits of a 32-bit word: one fp32 value, or two
// 16-bit values (element k in the low half, as in memory).
template <typename T, int VEC>
__device__ __forceinline__ uint32_t word_of(const float (&in)[VEC], int k) {
  if constexpr (sizeof(T) == 4) {
    uint32_t u;
    __builtin_memcpy(&u, &in[k], 4);
    return u;
  } else {
    static_assert(sizeof(T) == 2, "16- or 32-bit storage");
    const T lo = from_float<T>(in[k]);
    const T hi = from_float<T>(in[k + 1]);
    uint16_t ulo, uhi;
    __builtin_memcpy(&ulo, &lo, 2);
    __builtin_memcpy(&uhi, &hi, 2);
    return static_cast<uint32_t>(ulo) | (static_cast<uint32_t>(uhi) << 16);
  }
}

// store_from_float for the backward's dx, each element rounded by from_float<T>. A 16-byte
// vector goes out as one 16-byte store: written as a struct (store_from_float), nvcc split
// it into 2- or 4-byte stores in this kernel, four to eight store instructions a row where
// one does. Hence inline PTX: a plain (weak, write-back) st.global.v4. On ROCm a uint4 store.
template <int VEC, typename T>
__device__ __forceinline__ void store_dx(T* p, const float (&in)[VEC]) {
  if constexpr (VEC * sizeof(T) == 16) {
    constexpr int kStep = 4 / sizeof(T);  // elements per word
    const uint4 w = make_uint4(word_of<T>(in, 0), word_of<T>(in, kStep), word_of<T>(in, 2 * kStep),
                               word_of<T>(in, 3 * kStep));
#ifdef GPU_ROCM
    *reinterpret_cast<uint4*>(p) = w;
#else
    asm volatile("st.global.v4.b32 [%0], {%1, %2, %3, %4};" ::"l"(p), "r"(w.x), "r"(w.y), "r"(w.z), "r"(w.w)
                 : "memory");
#endif
  } else {
    store_from_float<VEC>(p, in);
  }
}

// A backward block is kBwdLanesX column threads (one warp: each load instruction of a
// warp reads kBwdLanesX * VEC contiguous elements of a row) times kBwdLanesY row lanes.
// Lane y of a slab takes the slab's rows y, y + kBwdLanesY, ..., kBwdRowUnroll of them a
// trip. At least kBwdMinBlocks blocks fit an SM (80 registers a thread on CUDA, no spills
// for erf or tanh): 24 warps, each with the next trip's 2 * kBwdRowUnroll 16-byte loads in
// flight while it computes the current one, ~48 KiB a SM, and enough warps to hide the
// GeLU math (~40 instructions an element, about half the time the memory traffic takes).
constexpr int kBwdLanesX = 32;
constexpr int kBwdLanesY = 8;
constexpr int kBwdThreads = kBwdLanesX * kBwdLanesY;
constexpr int kBwdRowUnroll = 2;
constexpr int kBwdMinBlocks = 3;

// Grid (column blocks, slabs): block (bx, s) owns columns [bx * kBwdLanesX * VEC, + kBwdLanesX
// * VEC) of rows [s * rows_per_slab, + rows_per_slab), and writes their sums (in fp32, dx
// before its rounding to T) to partial[s * cols + col]. VEC > 1 only when cols % VEC == 0
// and dy, x and dx are VEC-aligned, so a thread's VEC columns are all in range or all out.
// The bias is read element by element, once per thread: its alignment does not matter.
template <typename T, int VEC, bool TANH>
__global__ void __launch_bounds__(kBwdThreads, kBwdMinBlocks)
    bias_gelu_backward_kernel(const T* __restrict__ dy, const T* __restrict__ x, const T* __restrict__ bias,
                              T* __restrict__ dx, float* __restrict__ partial, int64_t rows, int64_t cols,
                              int64_t rows_per_slab) {
  constexpr int kCols = kBwdLanesX * VEC;  // columns of a block
  __shared__ float tile[kBwdLanesY][kCols];
  const int64_t block_col = static_cast<int64_t>(blockIdx.x) * kCols;
  const int64_t col = block_col + static_cast<int64_t>(threadIdx.x) * VEC;
  const int64_t row_begin = static_cast<int64_t>(blockIdx.y) * rows_per_slab;
  const int64_t row_end = rows - row_begin < rows_per_slab ? rows : row_begin + rows_per_slab;
  float sum[VEC];
#pragma unroll
  for (int k = 0; k < VEC; ++k) sum[k] = 0.0f;
  if (col < cols) {
    float b[VEC];
#pragma unroll
    for (int k = 0; k < VEC; ++k) b[k] = to_float(bias[col + k]);
    // Software-pipelined over trips of kBwdRowUnroll rows: the loads of trip j + 1 are
    // issued before trip j is computed, so a thread keeps 2 * kBwdRowUnroll 16-byte
    // loads in flight while it computes. Written as loads then math within one trip,
    // ptxas placed each load just before its first use (x, then the GeLU, then dy), one
    // load in flight at a time, and the memory latency showed.
    constexpr int64_t kTripRows = static_cast<int64_t>(kBwdRowUnroll) * kBwdLanesY;
    RawVec<T, VEC> dy_raw[kBwdRowUnroll], x_raw[kBwdRowUnroll];
    const auto load_trip = [&](int64_t first, RawVec<T, VEC>(&dy_to)[kBwdRowUnroll],
                               RawVec<T, VEC>(&x_to)[kBwdRowUnroll]) {
#pragma unroll
      for (int u = 0; u < kBwdRowUnroll; ++u) {
        const int64_t row = first + u * kBwdLanesY;
        if (row < row_end) {
          dy_to[u] = load_raw<T, VEC>(dy + row * cols + col);
          x_to[u] = load_raw<T, VEC>(x + row * cols + col);
        }
      }
    };
    int64_t r = row_begin + threadIdx.y;
    load_trip(r, dy_raw, x_raw);
    for (; r < row_end; r += kTripRows) {
      RawVec<T, VEC> dy_next[kBwdRowUnroll], x_next[kBwdRowUnroll];
      load_trip(r + kTripRows, dy_next, x_next);
#pragma unroll
      for (int u = 0; u < kBwdRowUnroll; ++u) {
        const int64_t row = r + u * kBwdLanesY;
        if (row < row_end) {
          float d[VEC];
#pragma unroll
          for (int k = 0; k < VEC; ++k) {
            d[k] = to_float(dy_raw[u].v[k]) * gelu_grad<TANH>(to_float(x_raw[u].v[k]) + b[k]);
            sum[k] += d[k];
          }
          store_dx<VEC>(dx + row * cols + col, d);
        }
      }
#pragma unroll
      for (int u = 0; u < kBwdRowUnroll; ++u) {
        dy_raw[u] = dy_next[u];
        x_raw[u] = x_next[u];
      }
    }
  }
  // The row lanes' sums, added in lane order by one thread per column.
#pragma unroll
  for (int k = 0; k < VEC; ++k) tile[threadIdx.y][threadIdx.x * VEC + k] = sum[k];
  __syncthreads();
  const int t = static_cast<int>(threadIdx.y) * kBwdLanesX + static_cast<int>(threadIdx.x);
  for (int c = t; c < kCols; c += kBwdThreads) {
    if (block_col + c >= cols) break;
    float total = 0.0f;
#pragma unroll
    for (int y = 0; y < kBwdLanesY; ++y) total += tile[y][c];
    partial[static_cast<int64_t>(blockIdx.y) * cols + block_col + c] = total;
  }
}

// dbias[col] = the sum over slabs of partial[s * cols + col], in a fixed order: row lane y
// of a (kBwdLanesX, kBwdLanesY) block adds slabs y, y + kBwdLanesY, ..., then one thread adds
// the lanes in order. With one thread a column, as before, a 4096-column input made 16
// blocks, each thread a serial chain of 128+ loads and adds; lanes make it 8 times shorter.
template <typename T>
__global__ void __launch_bounds__(kBwdThreads)
    bias_gelu_dbias_kernel(const float* __restrict__ partial, int64_t slabs, int64_t cols, T* __restrict__ dbias) {
  __shared__ float tile[kBwdLanesY][kBwdLanesX + 1];
  const int64_t col = static_cast<int64_t>(blockIdx.x) * kBwdLanesX + threadIdx.x;
  float total = 0.0f;
  if (col < cols) {
    for (int64_t s = threadIdx.y; s < slabs; s += kBwdLanesY) total += partial[s * cols + col];
  }
  tile[threadIdx.y][threadIdx.x] = total;
  __syncthreads();
  if (threadIdx.y == 0 && col < cols) {
    total = tile[0][threadIdx.x];
#pragma unroll
    for (int y = 1; y < kBwdLanesY; ++y) total += tile[y][threadIdx.x];
    dbias[col] = from_float<T>(total);
  }
}

template <typename F>
gpuError_t with_approx(gpu_ops::GeluApprox approx, F&& f) {
  if (approx == gpu_ops::GeluApprox::kTanh) return f(std::true_type{});
  return f(std::false_type{});
}

}  // namespace

namespace gpu_ops {

gpuError_t bias_gelu_forward(const void* x, const void* bias, void* y, int64_t rows, int64_t cols,
                             GeluApprox approx, DType dtype, gpuStream_t stream) {
  const int64_t n = rows * cols;
  if (n == 0) return gpuSuccess;
  return gpu_dispatch_float(dtype, [&](auto tag) {
    using T = decltype(tag);
    const T* xt = static_cast<const T*>(x);
    const T* bt = static_cast<const T*>(bias);
    T* yt = static_cast<T*>(y);
    const bool vec = cols % 4 == 0 && gpu_is_aligned(xt, 4) && gpu_is_aligned(bt, 4) && gpu_is_aligned(yt, 4);
    const int threads = 256;
    const int64_t per_block = static_cast<int64_t>(threads) * (vec ? 4 : 1);
    // Grid-stride beyond a million blocks: more blocks only add scheduling cost.
    const int64_t blocks = gpu_ceil_div(n, per_block) < (1 << 20) ? gpu_ceil_div(n, per_block) : (1 << 20);
    return with_approx(approx, [&](auto tanh_tag) {
      constexpr bool kTanh = decltype(tanh_tag)::value;
      if (vec) {
        bias_gelu_forward_kernel<T, 4, kTanh><<<static_cast<unsigned>(blocks), threads, 0, stream>>>(xt, bt, yt, n, cols);
      } else {
        bias_gelu_forward_kernel<T, 1, kTanh><<<static_cast<unsigned>(blocks), threads, 0, stream>>>(xt, bt, yt, n, cols);
      }
      return gpuGetLastError();
    });
  });
}

gpuError_t bias_gelu_backward(const void* dy, const void* x, const void* bias, void* dx, void* dbias,
                              float* workspace, int64_t rows, int64_t cols, GeluApprox approx, DType dtype,
                              gpuStream_t stream) {
  if (rows == 0 || cols == 0) return gpuSuccess;
  return gpu_dispatch_float(dtype, [&](auto tag) {
    using T = decltype(tag);
    constexpr int kVec = 16 / sizeof(T);  // one 16-byte access
    const T* dyt = static_cast<const T*>(dy);
    const T* xt = static_cast<const T*>(x);
    T* dxt = static_cast<T*>(dx);
    const bool vec =
        cols % kVec == 0 && gpu_is_aligned(dyt, kVec) && gpu_is_aligned(xt, kVec) && gpu_is_aligned(dxt, kVec);
    // The workspace holds col_reduce_parts(rows) slabs of partial sums: slabs of about 64
    // rows (8 a row lane) up to 16384 rows, then 256 slabs. For a large input that is
    // thousands of blocks, so the last wave is a small share of the time; writing and
    // reading the fp32 partial sums adds about 2% to the traffic of bf16 rows, less past
    // 16384 rows.
    const int64_t rows_per_slab = gpu_ceil_div(rows, col_reduce_parts(rows));
    const int64_t slabs = gpu_ceil_div(rows, rows_per_slab);
    const int64_t block_cols = static_cast<int64_t>(kBwdLanesX) * (vec ? kVec : 1);
    const dim3 grid(static_cast<unsigned>(gpu_ceil_div(cols, block_cols)), static_cast<unsigned>(slabs));
    const dim3 block(kBwdLanesX, kBwdLanesY);
    gpuError_t err = with_approx(approx, [&](auto tanh_tag) {
      constexpr bool kTanh = decltype(tanh_tag)::value;
      const T* bt = static_cast<const T*>(bias);
      if (vec) {
        bias_gelu_backward_kernel<T, kVec, kTanh>
            <<<grid, block, 0, stream>>>(dyt, xt, bt, dxt, workspace, rows, cols, rows_per_slab);
      } else {
        bias_gelu_backward_kernel<T, 1, kTanh>
            <<<grid, block, 0, stream>>>(dyt, xt, bt, dxt, workspace, rows, cols, rows_per_slab);
      }
      return gpuGetLastError();
    });
    if (err != gpuSuccess) return err;
    bias_gelu_dbias_kernel<T><<<static_cast<unsigned>(gpu_ceil_div(cols, kBwdLanesX)), block, 0, stream>>>(
        workspace, slabs, cols, static_cast<T*>(dbias));
    return gpuGetLastError();
  });
}

}  // namespace gpu_ops
