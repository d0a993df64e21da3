// Multi-tensor Lion: p -= lr * (sign(beta1 * m + (1 - beta1) * g) + wd * p);
// m = beta2 * m + (1 - beta2) * g. fp32 state and math, one pass per element.
//
// sign() turns a one-ulp difference near zero into a step of 2 * lr, so every product and sum is
// rounded on its own, denormals kept, as the fallback's chain of torch ops does (the CPU Lion does
// the same): a fused multiply-add, or the fast-math flush of a tiny product to zero, gave some
// elements near zero the other direction.
#include "gpu_fused_optim.h"
#include "gpu_multi_tensor.h"

namespace {

static_assert(sizeof(TensorListMeta<3>) + sizeof(gpu_ops::LionConfig) <= kMtArgBytes, "kernel arguments too large");

template <typename T>
__global__ void __launch_bounds__(kMtBlockThreads, kMtMinBlocks)
    lion_kernel(TensorListMeta<3> meta, gpu_ops::LionConfig cfg) {
  const MtChunk<3> chunk = mt_chunk(meta);
  const T* g = static_cast<const T*>(meta.addresses[0][chunk.slot]) + chunk.start;
  T* p = static_cast<T*>(meta.addresses[1][chunk.slot]) + chunk.start;
  float* m = static_cast<float*>(meta.addresses[2][chunk.slot]) + chunk.start;
  // The size need not be a multiple of kMtILP: mt_for_each takes the tail one by one.
  const bool vectorized = gpu_is_aligned(g, kMtILP) && gpu_is_aligned(p, kMtILP) && gpu_is_aligned(m, kMtILP);
  mt_for_each(chunk.length, vectorized, [&](const auto& span) {
    using Span = std::decay_t<decltype(span)>;
    constexpr int U = Span::kGroups;
    constexpr int N = Span::kWidth;
    // Every load of the span is issued before any math: U * 3 accesses in flight.
    float gr[U][N], pr[U][N], mr[U][N];
    mt_load(gr, g, span);
    mt_load(pr, p, span);
    mt_load(mr, m, span);
#pragma unroll
    for (int u = 0; u < U; ++u) {
#pragma unroll
      for (int k = 0; k < N; ++k) {
        const float direction = gpu_sign(
            gpu_add_rn_denorm(gpu_mul_rn_denorm(mr[u][k], cfg.beta1), gpu_mul_rn_denorm(gr[u][k], cfg.one_minus_beta1)));
        // lr * direction is exact (+-lr or 0); p * decay is rounded before the subtraction.
        pr[u][k] = gpu_add_rn_denorm(gpu_mul_rn_denorm(pr[u][k], cfg.decay), -(cfg.lr * direction));
        mr[u][k] = gpu_add_rn_denorm(gpu_mul_rn_denorm(mr[u][k], cfg.beta2), gpu_mul_rn_denorm(gr[u][k], cfg.one_minus_beta2));
      }
    }
    mt_store(p, pr, span);
    mt_store(m, mr, span);
  });
}

}  // namespace

namespace gpu_ops {

gpuError_t fused_lion(int n, void* const* grads, void* const* params, float* const* exp_avgs,
                      const int64_t* sizes, DType dtype, const LionConfig& config, gpuStream_t stream) {
  MtTable<3> table{n, {grads, params, reinterpret_cast<void* const*>(exp_avgs)}, sizes};
  return gpu_dispatch_float(dtype, [&](auto tag) {
    using T = decltype(tag);
    return multi_tensor_apply<3>(table, [&](const TensorListMeta<3>& meta, int blocks) {
      lion_kernel<T><<<blocks, kMtBlockThreads, 0, stream>>>(meta, config);
    });
  });
}

}  // namespace gpu_ops
