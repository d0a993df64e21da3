// Launchers of the multi-tensor optimizers (fused_adam, fused_lamb, fused_lion).
//
// Every list holds `n` tensors of `sizes[i]` elements. Params and grads share one
// storage dtype per call; optimizer state (exp_avg, exp_avg_sq) is fp32 and all
// math is fp32. Launches go on `stream`; the return value is the launch error.
#pragma once

#include "gpu_runtime.h"

namespace gpu_ops {

// The host derives every constant (1 - beta, lr / correction, 1 - lr * wd) in double and
// rounds it once to fp32, as the PyTorch rule's Python-float scalars are: computed in fp32
// on the device, 1 - 0.999f is 1.3e-5 off in relative terms, which shows in exp_avg_sq.
struct AdamConfig {
  float beta1;
  float beta2;
  float one_minus_beta1;
  float one_minus_beta2;
  float eps;
  float weight_decay;
  float decay;                  // 1 - lr * weight_decay (AdamW)
  float step_size;              // lr / (1 - beta1^step), or lr without bias correction
  float bias_correction2_sqrt;  // sqrt(1 - beta2^step), or 1
  bool adamw_mode;              // decoupled weight decay (AdamW) instead of L2 on the grad
};

gpuError_t fused_adam(int n, void* const* grads, void* const* params, float* const* exp_avgs,
                      float* const* exp_avg_sqs, const int64_t* sizes, DType dtype, const AdamConfig& config,
                      gpuStream_t stream);

// The options are written so that their "off" values do the arithmetic of the rule without
// them: eps_inside 0 adds +0 under the root, min_coeff 0 and max_coeff +inf clamp no ratio,
// and a null grad_scale selects kernels that do not touch the grads.
struct LambConfig {
  float lr;
  float beta1;
  float beta2;
  float one_minus_beta1;
  float one_minus_beta2;
  float eps_inside;   // added to v_hat under the square root (eps_inside_sqrt), else 0
  float eps_outside;  // added to sqrt(v_hat), else 0
  float weight_decay;
  float bias_correction1;
  float bias_correction2;
  float min_coeff;  // trust ratio bounds, max_coeff applied first: 0 and +inf when unbounded
  float max_coeff;
  // Device fp32 scalar that multiplies every grad before the moments (the clip factor of
  // global grad-norm clipping, computed on the device so that the host never waits for
  // it), or null.
  const float* grad_scale;
};

// Chunks (blocks of the update pass) the n tensors make; sizes the workspace below.
int64_t fused_lamb_chunks(int n, const int64_t* sizes);

// `updates` are fp32 scratch tensors with the params' sizes. `workspace` is fp32 scratch
// of 2 * fused_lamb_chunks(n, sizes) floats, 8-byte aligned: per chunk the partial sums of
// p^2 and u^2, added in a fixed order so that results are the same bits run to run.
// `trust_ratios` (n floats) receives the ratio each tensor was updated with.
gpuError_t fused_lamb(int n, void* const* grads, void* const* params, float* const* exp_avgs,
                      float* const* exp_avg_sqs, float* const* updates, float* workspace, float* trust_ratios,
                      const int64_t* sizes, DType dtype, const LambConfig& config, gpuStream_t stream);

struct LionConfig {
  float lr;
  float beta1;
  float beta2;
  float one_minus_beta1;
  float one_minus_beta2;
  float decay;  // 1 - lr * weight_decay
};

gpuError_t fused_lion(int n, void* const* grads, void* const* params, float* const* exp_avgs,
                      const int64_t* sizes, DType dtype, const LionConfig& config, gpuStream_t stream);

}  // namespace gpu_ops
