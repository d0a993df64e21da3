// Multi-tensor Adam / AdamW: one pass over grad, param and fp32 state per element.
// Matches torch.optim.Adam / AdamW (non-amsgrad) with fp32 math.
#include "gpu_fused_optim.h"
#include "gpu_multi_tensor.h"

namespace {

static_assert(sizeof(TensorListMeta<4>) + sizeof(gpu_ops::AdamConfig) <= kMtArgBytes, "kernel arguments too large");

template <typename T>
__global__ void __launch_bounds__(kMtBlockThreads, kMtMinBlocks)
    adam_kernel(TensorListMeta<4> meta, gpu_ops::AdamConfig cfg) {
  const MtChunk<4> chunk = mt_chunk(meta);
  const T* g = static_cast<const T*>(meta.addresses[0][chunk.slot]) + chunk.start;
  T* p = static_cast<T*>(meta.addresses[1][chunk.slot]) + chunk.start;
  float* m = static_cast<float*>(meta.addresses[2][chunk.slot]) + chunk.start;
  float* v = static_cast<float*>(meta.addresses[3][chunk.slot]) + chunk.start;
  // The size need not be a multiple of kMtILP: mt_for_each takes the tail one by one.
  const bool vectorized = gpu_is_aligned(g, kMtILP) && gpu_is_aligned(p, kMtILP) && gpu_is_aligned(m, kMtILP) &&
                          gpu_is_aligned(v, kMtILP);
  mt_for_each(chunk.length, vectorized, [&](const auto& span) {
    using Span = std::decay_t<decltype(span)>;
    constexpr int U = Span::kGroups;
    constexpr int N = Span::kWidth;
    // Every load of the span is issued before any math: U * 4 accesses in flight.
    float gr[U][N], pr[U][N], mr[U][N], vr[U][N];
    mt_load(gr, g, span);
    mt_load(pr, p, span);
    mt_load(mr, m, span);
    mt_load(vr, v, span);
#pragma unroll
    for (int u = 0; u < U; ++u) {
#pragma unroll
      for (int k = 0; k < N; ++k) {
        float grad = gr[u][k];
        if (cfg.adamw_mode) {
          pr[u][k] *= cfg.decay;
        } else {
          grad += cfg.weight_decay * pr[u][k];
        }
        mr[u][k] = cfg.beta1 * mr[u][k] + cfg.one_minus_beta1 * grad;
        vr[u][k] = cfg.beta2 * vr[u][k] + cfg.one_minus_beta2 * grad * grad;
        const float denom = sqrtf(vr[u][k]) / cfg.bias_correction2_sqrt + cfg.eps;
        pr[u][k] -= cfg.step_size * (mr[u][k] / denom);  // addcdiv's order: value * (m / denom)
      }
    }
    mt_store(p, pr, span);
    mt_store(m, mr, span);
    mt_store(v, vr, span);
  });
}

}  // namespace

namespace gpu_ops {

gpuError_t fused_adam(int n, void* const* grads, void* const* params, float* const* exp_avgs,
                      float* const* exp_avg_sqs, const int64_t* sizes, DType dtype, const AdamConfig& config,
                      gpuStream_t stream) {
  MtTable<4> table{n,
                   {grads, params, reinterpret_cast<void* const*>(exp_avgs),
                    reinterpret_cast<void* const*>(exp_avg_sqs)},
                   sizes};
  return gpu_dispatch_float(dtype, [&](auto tag) {
    using T = decltype(tag);
    return multi_tensor_apply<4>(table, [&](const TensorListMeta<4>& meta, int blocks) {
      adam_kernel<T><<<blocks, kMtBlockThreads, 0, stream>>>(meta, config);
    });
  });
}

}  // namespace gpu_ops
