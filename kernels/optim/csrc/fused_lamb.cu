// Multi-tensor Lamb in three phases, each a kernel per pack of tensors:
//   1. the grads times the clip factor (when clipping), Adam moments and the raw update
//      u = m_hat / (sqrt(v_hat) + eps) + wd * p (sqrt(v_hat + eps) with eps inside),
//      stored in fp32 scratch; each block writes its chunk's partial sums of p^2 and
//      u^2 to its own slot (chunk slots are numbered in tensor, then chunk order);
//   2. per tensor, its chunks' partials added in chunk order: ||p|| and ||u||, and the
//      trust ratio ||p|| / ||u|| clamped to [min_coeff, max_coeff] (1 when either norm
//      is zero), written out for the caller;
//   3. p -= lr * trust * u.
// Each phase needs every block of the one before finished, hence separate launches.
// The norms are summed in a fixed order (a float atomicAdd per block would add the
// partials in whatever order the blocks finish), so a step is bitwise reproducible.
#include "gpu_fused_optim.h"
#include "gpu_multi_tensor.h"
#include "gpu_reduce.h"

namespace {

// Slot of the first chunk of each tensor of one norms launch, and its chunk count.
struct LambNormTable {
  static constexpr int kTensors = 128;
  int32_t tensor_index[kTensors];
  int32_t chunks[kTensors];
  int64_t first_slot[kTensors];
};
static_assert(sizeof(LambNormTable) <= 4096, "kernel argument too large");
static_assert(sizeof(TensorListMeta<5>) + sizeof(gpu_ops::LambConfig) + sizeof(float2*) <= kMtArgBytes,
              "kernel arguments too large");
static_assert(sizeof(TensorListMeta<2>) + sizeof(float) + sizeof(float*) <= kMtArgBytes, "kernel arguments too large");
static_assert(sizeof(LambNormTable) + sizeof(float2*) + 2 * sizeof(float) + sizeof(float*) <= kMtArgBytes,
              "kernel arguments too large");

constexpr int kNormThreads = 256;

// `partials` points at this launch's first block's slot: (sum p^2, sum u^2) per block.
// kScaled: the grads are multiplied by *cfg.grad_scale. A separate instantiation, so that a
// step without clipping runs the same instructions on the grads as before the option.
template <typename T, bool kScaled>
__global__ void __launch_bounds__(kMtBlockThreads, kMtMinBlocks)
    lamb_stage1(TensorListMeta<5> meta, gpu_ops::LambConfig cfg, float2* partials) {
  __shared__ float2 scratch[kGpuMaxWarps];
  const MtChunk<5> chunk = mt_chunk(meta);
  const T* g = static_cast<const T*>(meta.addresses[0][chunk.slot]) + chunk.start;
  const T* p = static_cast<const T*>(meta.addresses[1][chunk.slot]) + chunk.start;
  float* m = static_cast<float*>(meta.addresses[2][chunk.slot]) + chunk.start;
  float* v = static_cast<float*>(meta.addresses[3][chunk.slot]) + chunk.start;
  float* u = static_cast<float*>(meta.addresses[4][chunk.slot]) + chunk.start;
  // The size need not be a multiple of kMtILP: mt_for_each takes the tail one by one.
  const bool vectorized = gpu_is_aligned(g, kMtILP) && gpu_is_aligned(p, kMtILP) && gpu_is_aligned(m, kMtILP) &&
                          gpu_is_aligned(v, kMtILP) && gpu_is_aligned(u, kMtILP);
  float scale = 1.0f;
  if constexpr (kScaled) scale = *cfg.grad_scale;  // one value for the whole step
  // (sum p^2, sum u^2) over this thread's elements, in the fixed order mt_for_each visits
  // them for this chunk length.
  float2 sums = make_float2(0.0f, 0.0f);
  mt_for_each(chunk.length, vectorized, [&](const auto& span) {
    using Span = std::decay_t<decltype(span)>;
    constexpr int U = Span::kGroups;
    constexpr int N = Span::kWidth;
    // Every load of the span is issued before any math: U * 4 accesses in flight.
    float gr[U][N], pr[U][N], mr[U][N], vr[U][N], ur[U][N];
    mt_load(gr, g, span);
    mt_load(pr, p, span);
    mt_load(mr, m, span);
    mt_load(vr, v, span);
    if constexpr (kScaled) {
#pragma unroll
      for (int j = 0; j < U; ++j) {
#pragma unroll
        for (int k = 0; k < N; ++k) gr[j][k] *= scale;
      }
    }
#pragma unroll
    for (int j = 0; j < U; ++j) {
#pragma unroll
      for (int k = 0; k < N; ++k) {
        mr[j][k] = cfg.beta1 * mr[j][k] + cfg.one_minus_beta1 * gr[j][k];
        vr[j][k] = cfg.beta2 * vr[j][k] + cfg.one_minus_beta2 * gr[j][k] * gr[j][k];
        const float m_hat = mr[j][k] / cfg.bias_correction1;
        const float v_hat = vr[j][k] / cfg.bias_correction2;
        // One of eps_inside / eps_outside is 0: adding +0 to v_hat >= 0 or to a square root
        // leaves it as it is, so either placement runs without a branch.
        ur[j][k] = m_hat / (sqrtf(v_hat + cfg.eps_inside) + cfg.eps_outside) + cfg.weight_decay * pr[j][k];
        sums.x += pr[j][k] * pr[j][k];
        sums.y += ur[j][k] * ur[j][k];
      }
    }
    mt_store(m, mr, span);
    mt_store(v, vr, span);
    mt_store(u, ur, span);
  });
  sums = block_sum(sums, scratch);
  if (threadIdx.x == 0) partials[blockIdx.x] = sums;
}

// One block per tensor: the sum of its chunks' partials, each thread taking a fixed
// stride of them, then block_sum's fixed tree, gives ||p||^2 and ||u||^2; ratios[t] is
// tensor t's trust ratio.
__global__ void __launch_bounds__(kNormThreads)
    lamb_norms(LambNormTable table, const float2* __restrict__ partials, float min_coeff, float max_coeff,
               float* __restrict__ ratios) {
  __shared__ float2 scratch[kGpuMaxWarps];
  const float2* first = partials + table.first_slot[blockIdx.x];
  float2 sums = make_float2(0.0f, 0.0f);
  for (int c = threadIdx.x; c < table.chunks[blockIdx.x]; c += blockDim.x) {
    sums.x += first[c].x;
    sums.y += first[c].y;
  }
  sums = block_sum(sums, scratch);
  if (threadIdx.x == 0) {
    const float param_norm = sqrtf(sums.x);
    const float update_norm = sqrtf(sums.y);
    float trust = 1.0f;
    if (param_norm > 0.0f && update_norm > 0.0f) {
      trust = param_norm / update_norm;
      // max_coeff first, then min_coeff, as DeepSpeed clamps. Comparisons rather than
      // fminf / fmaxf: a NaN ratio stays NaN, as torch.clamp keeps it in the fallback.
      if (trust > max_coeff) trust = max_coeff;
      if (trust < min_coeff) trust = min_coeff;
    }
    ratios[table.tensor_index[blockIdx.x]] = trust;
  }
}

template <typename T>
__global__ void __launch_bounds__(kMtBlockThreads, kMtMinBlocks)
    lamb_stage2(TensorListMeta<2> meta, float lr, const float* ratios) {
  const MtChunk<2> chunk = mt_chunk(meta);
  T* p = static_cast<T*>(meta.addresses[0][chunk.slot]) + chunk.start;
  const float* u = static_cast<const float*>(meta.addresses[1][chunk.slot]) + chunk.start;
  const float step = lr * ratios[meta.tensor_index[chunk.slot]];
  const bool vectorized = gpu_is_aligned(p, kMtILP) && gpu_is_aligned(u, kMtILP);
  mt_for_each(chunk.length, vectorized, [&](const auto& span) {
    using Span = std::decay_t<decltype(span)>;
    constexpr int U = Span::kGroups;
    constexpr int N = Span::kWidth;
    float pr[U][N], ur[U][N];
    mt_load(pr, p, span);
    mt_load(ur, u, span);
#pragma unroll
    for (int j = 0; j < U; ++j) {
#pragma unroll
      for (int k = 0; k < N; ++k) pr[j][k] -= step * ur[j][k];
    }
    mt_store(p, pr, span);
  });
}

}  // namespace

namespace gpu_ops {

int64_t fused_lamb_chunks(int n, const int64_t* sizes) {
  int64_t chunks = 0;
  for (int t = 0; t < n; ++t) chunks += gpu_ceil_div(sizes[t], kMtChunk);
  return chunks;
}

gpuError_t fused_lamb(int n, void* const* grads, void* const* params, float* const* exp_avgs,
                      float* const* exp_avg_sqs, float* const* updates, float* workspace, float* trust_ratios,
                      const int64_t* sizes, DType dtype, const LambConfig& config, gpuStream_t stream) {
  if (n <= 0) return gpuSuccess;
  // multi_tensor_apply hands out blocks in (tensor, chunk) order over all its launches and
  // skips empty tensors, so block k of the whole stage is chunk slot k, and tensor t's
  // chunks are the slots from the sum of the chunk counts before it.
  float2* partials = reinterpret_cast<float2*>(workspace);
  const bool scaled = config.grad_scale != nullptr;
  void* const* updates_raw = reinterpret_cast<void* const*>(updates);
  MtTable<5> stage1{n,
                    {grads, params, reinterpret_cast<void* const*>(exp_avgs),
                     reinterpret_cast<void* const*>(exp_avg_sqs), updates_raw},
                    sizes};
  MtTable<2> stage2{n, {params, updates_raw}, sizes};
  return gpu_dispatch_float(dtype, [&](auto tag) {
    using T = decltype(tag);
    int64_t slot = 0;
    gpuError_t e = multi_tensor_apply<5>(stage1, [&](const TensorListMeta<5>& meta, int blocks) {
      if (scaled) {
        lamb_stage1<T, true><<<blocks, kMtBlockThreads, 0, stream>>>(meta, config, partials + slot);
      } else {
        lamb_stage1<T, false><<<blocks, kMtBlockThreads, 0, stream>>>(meta, config, partials + slot);
      }
      slot += blocks;
    });
    if (e != gpuSuccess) return e;
    // Every tensor's ratio, empty ones (no chunks: zero norms, ratio 1) included.
    LambNormTable table;
    int listed = 0;
    int64_t first_slot = 0;
    for (int t = 0; t < n; ++t) {
      const int64_t chunks = gpu_ceil_div(sizes[t], kMtChunk);
      table.tensor_index[listed] = t;
      table.chunks[listed] = static_cast<int32_t>(chunks);
      table.first_slot[listed] = first_slot;
      first_slot += chunks;
      if (++listed == LambNormTable::kTensors || t == n - 1) {
        lamb_norms<<<listed, kNormThreads, 0, stream>>>(table, partials, config.min_coeff, config.max_coeff,
                                                        trust_ratios);
        e = gpuGetLastError();
        if (e != gpuSuccess) return e;
        listed = 0;
      }
    }
    return multi_tensor_apply<2>(stage2, [&](const TensorListMeta<2>& meta, int blocks) {
      lamb_stage2<T><<<blocks, kMtBlockThreads, 0, stream>>>(meta, config.lr, trust_ratios);
    });
  });
}

}  // namespace gpu_ops
