// Multi-tensor Adam / AdamW: one pass over grad, param and fp32 state per element.
// Matches torch.optim.Adam / AdamW (non-amsgrad) with fp32 math.
#include "gpu_fused_optim.h"
#include "gpu_multi_tensor.h"

namespace {

template <typename T>
__global__ void __launch_bounds__(kMtBlockThreads)
    adam_kernel(TensorListMeta<4> meta, gpu_ops::AdamConfig cfg) {
  const MtChunk<4> chunk = mt_chunk(meta);
  const T* g = static_cast<const T*>(meta.addresses[0][chunk.slot]) + chunk.start;
  T* p = static_cast<T*>(meta.addresses[1][chunk.slot]) + chunk.start;
  float* m = static_cast<float*>(meta.addresses[2][chunk.slot]) + chunk.start;
  float* v = static_cast<float*>(meta.addresses[3][chunk.slot]) + chunk.start;
  const bool vectorized = meta.sizes[chunk.slot] % kMtILP == 0 && gpu_is_aligned(g, kMtILP) &&
                          gpu_is_aligned(p, kMtILP) && gpu_is_aligned(m, kMtILP) && gpu_is_aligned(v, kMtILP);
  mt_for_each(chunk.length, vectorized, [&](int64_t i, auto width) {
    constexpr int N = decltype(width)::value;
    float gr[N], pr[N], mr[N], vr[N];
    load_as_float<N>(gr, g + i);
    load_as_float<N>(pr, p + i);
    load_as_float<N>(mr, m + i);
    load_as_float<N>(vr, v + i);
#pragma unroll
    for (int k = 0; k < N; ++k) {
      float grad = gr[k];
      if (cfg.adamw_mode) {
        pr[k] *= cfg.decay;
      } else {
        grad += cfg.weight_decay * pr[k];
      }
      mr[k] = cfg.beta1 * mr[k] + cfg.one_minus_beta1 * grad;
      vr[k] = cfg.beta2 * vr[k] + cfg.one_minus_beta2 * grad * grad;
      const float denom = sqrtf(vr[k]) / cfg.bias_correction2_sqrt + cfg.eps;
      pr[k] -= cfg.step_size * (mr[k] / denom);  // addcdiv's order: value * (m / denom)
    }
    store_from_float<N>(p + i, pr);
    store_from_float<N>(m + i, mr);
    store_from_float<N>(v + i, vr);
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
