// Multi-tensor Lamb in two launches per pack sequence:
//   1. Adam moments and the raw update u = m_hat / (sqrt(v_hat) + eps) + wd * p,
//      stored in fp32 scratch, while accumulating per-tensor ||p||^2 and ||u||^2;
//   2. p -= lr * trust * u with trust = ||p|| / ||u|| (1 when either is zero).
// The second phase needs every block of the first finished, hence two passes.
#include "gpu_fused_optim.h"
#include "gpu_multi_tensor.h"
#include "gpu_reduce.h"

namespace {

template <typename T>
__global__ void __launch_bounds__(kMtBlockThreads)
    lamb_stage1(TensorListMeta<5> meta, gpu_ops::LambConfig cfg, float* norms) {
  __shared__ float2 scratch[kGpuMaxWarps];
  const MtChunk<5> chunk = mt_chunk(meta);
  const T* g = static_cast<const T*>(meta.addresses[0][chunk.slot]) + chunk.start;
  const T* p = static_cast<const T*>(meta.addresses[1][chunk.slot]) + chunk.start;
  float* m = static_cast<float*>(meta.addresses[2][chunk.slot]) + chunk.start;
  float* v = static_cast<float*>(meta.addresses[3][chunk.slot]) + chunk.start;
  float* u = static_cast<float*>(meta.addresses[4][chunk.slot]) + chunk.start;
  const bool vectorized = meta.sizes[chunk.slot] % kMtILP == 0 && gpu_is_aligned(g, kMtILP) &&
                          gpu_is_aligned(p, kMtILP) && gpu_is_aligned(m, kMtILP) &&
                          gpu_is_aligned(v, kMtILP) && gpu_is_aligned(u, kMtILP);
  float2 sums = make_float2(0.0f, 0.0f);  // (sum p^2, sum u^2) over this thread's elements
  mt_for_each(chunk.length, vectorized, [&](int64_t i, auto width) {
    constexpr int N = decltype(width)::value;
    float gr[N], pr[N], mr[N], vr[N], ur[N];
    load_as_float<N>(gr, g + i);
    load_as_float<N>(pr, p + i);
    load_as_float<N>(mr, m + i);
    load_as_float<N>(vr, v + i);
#pragma unroll
    for (int k = 0; k < N; ++k) {
      mr[k] = cfg.beta1 * mr[k] + (1.0f - cfg.beta1) * gr[k];
      vr[k] = cfg.beta2 * vr[k] + (1.0f - cfg.beta2) * gr[k] * gr[k];
      const float m_hat = mr[k] / cfg.bias_correction1;
      const float v_hat = vr[k] / cfg.bias_correction2;
      ur[k] = m_hat / (sqrtf(v_hat) + cfg.eps) + cfg.weight_decay * pr[k];
      sums.x += pr[k] * pr[k];
      sums.y += ur[k] * ur[k];
    }
    store_from_float<N>(m + i, mr);
    store_from_float<N>(v + i, vr);
    store_from_float<N>(u + i, ur);
  });
  sums = block_sum(sums, scratch);
  if (threadIdx.x == 0) {
    const int t = meta.tensor_index[chunk.slot];
    atomicAdd(norms + 2 * t, sums.x);
    atomicAdd(norms + 2 * t + 1, sums.y);
  }
}

template <typename T>
__global__ void __launch_bounds__(kMtBlockThreads)
    lamb_stage2(TensorListMeta<2> meta, float lr, const float* norms) {
  const MtChunk<2> chunk = mt_chunk(meta);
  T* p = static_cast<T*>(meta.addresses[0][chunk.slot]) + chunk.start;
  const float* u = static_cast<const float*>(meta.addresses[1][chunk.slot]) + chunk.start;
  const int t = meta.tensor_index[chunk.slot];
  const float param_norm = sqrtf(norms[2 * t]);
  const float update_norm = sqrtf(norms[2 * t + 1]);
  const float trust = (param_norm > 0.0f && update_norm > 0.0f) ? param_norm / update_norm : 1.0f;
  const float step = lr * trust;
  const bool vectorized =
      meta.sizes[chunk.slot] % kMtILP == 0 && gpu_is_aligned(p, kMtILP) && gpu_is_aligned(u, kMtILP);
  mt_for_each(chunk.length, vectorized, [&](int64_t i, auto width) {
    constexpr int N = decltype(width)::value;
    float pr[N], ur[N];
    load_as_float<N>(pr, p + i);
    load_as_float<N>(ur, u + i);
#pragma unroll
    for (int k = 0; k < N; ++k) pr[k] -= step * ur[k];
    store_from_float<N>(p + i, pr);
  });
}

}  // namespace

namespace gpu_ops {

gpuError_t fused_lamb(int n, void* const* grads, void* const* params, float* const* exp_avgs,
                      float* const* exp_avg_sqs, float* const* updates, float* norms, const int64_t* sizes,
                      DType dtype, const LambConfig& config, gpuStream_t stream) {
  gpuError_t err = gpuMemsetAsync(norms, 0, sizeof(float) * 2 * static_cast<size_t>(n), stream);
  if (err != gpuSuccess) return err;
  void* const* updates_raw = reinterpret_cast<void* const*>(updates);
  MtTable<5> stage1{n,
                    {grads, params, reinterpret_cast<void* const*>(exp_avgs),
                     reinterpret_cast<void* const*>(exp_avg_sqs), updates_raw},
                    sizes};
  MtTable<2> stage2{n, {params, updates_raw}, sizes};
  return gpu_dispatch_float(dtype, [&](auto tag) {
    using T = decltype(tag);
    gpuError_t e = multi_tensor_apply<5>(stage1, [&](const TensorListMeta<5>& meta, int blocks) {
      lamb_stage1<T><<<blocks, kMtBlockThreads, 0, stream>>>(meta, config, norms);
    });
    if (e != gpuSuccess) return e;
    return multi_tensor_apply<2>(stage2, [&](const TensorListMeta<2>& meta, int blocks) {
      lamb_stage2<T><<<blocks, kMtBlockThreads, 0, stream>>>(meta, config.lr, norms);
    });
  });
}

}  // namespace gpu_ops
