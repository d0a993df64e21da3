// Multi-tensor Lion: p -= lr * (sign(beta1 * m + (1 - beta1) * g) + wd * p);
// m = beta2 * m + (1 - beta2) * g. fp32 state and math, one pass per element.
#include "gpu_fused_optim.h"
#include "gpu_multi_tensor.h"

namespace {

__device__ __forceinline__ float sign_of(float x) { return static_cast<float>((x > 0.0f) - (x < 0.0f)); }

template <typename T>
__global__ void __launch_bounds__(kMtBlockThreads)
    lion_kernel(TensorListMeta<3> meta, gpu_ops::LionConfig cfg) {
  const MtChunk<3> chunk = mt_chunk(meta);
  const T* g = static_cast<const T*>(meta.addresses[0][chunk.slot]) + chunk.start;
  T* p = static_cast<T*>(meta.addresses[1][chunk.slot]) + chunk.start;
  float* m = static_cast<float*>(meta.addresses[2][chunk.slot]) + chunk.start;
  const bool vectorized = meta.sizes[chunk.slot] % kMtILP == 0 && gpu_is_aligned(g, kMtILP) &&
                          gpu_is_aligned(p, kMtILP) && gpu_is_aligned(m, kMtILP);
  mt_for_each(chunk.length, vectorized, [&](int64_t i, auto width) {
    constexpr int N = decltype(width)::value;
    float gr[N], pr[N], mr[N];
    load_as_float<N>(gr, g + i);
    load_as_float<N>(pr, p + i);
    load_as_float<N>(mr, m + i);
#pragma unroll
    for (int k = 0; k < N; ++k) {
      const float direction = sign_of(cfg.beta1 * mr[k] + cfg.one_minus_beta1 * gr[k]);
      pr[k] = pr[k] * cfg.decay - cfg.lr * direction;
      mr[k] = cfg.beta2 * mr[k] + cfg.one_minus_beta2 * gr[k];
    }
    store_from_float<N>(p + i, pr);
    store_from_float<N>(m + i, mr);
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
