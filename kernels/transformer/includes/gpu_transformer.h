// Launchers of the transformer op: LayerNorm, bias + GeLU, scaled masked softmax,
// forward and backward. Tensors are contiguous row-major; math is fp32; `dtype`
// is the storage type of every non-fp32 buffer of a call.
#pragma once

#include <initializer_list>

#include "gpu_runtime.h"

namespace gpu_ops {

// Column reductions (dbias; dgamma, dbeta) first sum slices of rows into fp32
// partials, then add the partials; the bindings size bias + GeLU's scratch with this
// (LayerNorm's: layer_norm_backward_plan).
inline int64_t col_reduce_parts(int64_t rows) {
  const int64_t parts = (rows + 63) / 64;
  return parts < 1 ? 1 : (parts > 256 ? 256 : parts);
}

// x, y: [rows, cols]; gamma, beta: [cols] or null (1 and 0); mean, rstd: fp32 [rows].
gpuError_t layer_norm_forward(const void* x, const void* gamma, const void* beta, void* y, float* mean,
                              float* rstd, int64_t rows, int64_t cols, float eps, DType dtype,
                              gpuStream_t stream);

// How a LayerNorm backward (plain or residual) runs one call, decided before its workspace is
// allocated: the vector width its buffers allow and the current device's multiprocessor count,
// read once, from which the launch takes its kernels and grid, and `workspace`, the floats of
// fp32 partial column sums that grid writes (dgamma's and dbeta's: 2 * parts * cols, parts one
// per block of the persistent register grid or per slice of rows of the loop path). A launch
// refuses a plan made for another shape, element size or less aligned buffers.
struct LayerNormBackwardPlan {
  int64_t rows = 0;
  int64_t cols = 0;
  int elem_bytes = 0;
  int vec = 1;
  int multiprocessors = 1;
  int64_t workspace = 0;
};

// The plan for a backward of [rows, cols] `dtype` over `buffers`: every buffer of the call (dy,
// x, gamma, dx, and the residual variant's dsum and dresidual; null ones are skipped). Made
// with the buffers' device current.
LayerNormBackwardPlan layer_norm_backward_plan(int64_t rows, int64_t cols, DType dtype,
                                               std::initializer_list<const void*> buffers);

// dgamma and dbeta may be null (no affine parameters); `workspace` then may be too,
// else it holds plan.workspace floats (`plan` made for this call). With no rows, dgamma and
// dbeta are set to zeros.
gpuError_t layer_norm_backward(const void* dy, const void* x, const void* gamma, const float* mean,
                               const float* rstd, void* dx, void* dgamma, void* dbeta, float* workspace,
                               const LayerNormBackwardPlan& plan, int64_t rows, int64_t cols, DType dtype,
                               gpuStream_t stream);

// LayerNorm of a residual sum (DeepSpeed's layer_norm_residual_store_pre_ln_res), in one
// pass: sum = (x + hidden_bias) + residual in fp32, rounded to `dtype` and written to
// `sum`; y = LayerNorm(sum) of that rounded sum, with its mean and rstd. x, residual,
// sum, y: [rows, cols]; hidden_bias, gamma, beta: [cols] or null (0, 1 and 0).
gpuError_t residual_layer_norm_forward(const void* x, const void* residual, const void* hidden_bias,
                                       const void* gamma, const void* beta, void* sum, void* y, float* mean,
                                       float* rstd, int64_t rows, int64_t cols, float eps, DType dtype,
                                       gpuStream_t stream);

// Its backward: layer_norm_backward with the stored sum as x, except that dx is the sum's
// whole gradient, LayerNorm's plus `dsum` (the gradient the returned sum received, added
// in fp32 before dx is rounded; null: none), and that `dresidual` (null: none) receives
// it too, for a residual gradient that shares no storage with x's. dx, dsum, dresidual:
// [rows, cols]; the hidden bias's gradient is the column sum of dx, left to the caller.
gpuError_t residual_layer_norm_backward(const void* dy, const void* sum, const void* gamma, const float* mean,
                                        const float* rstd, const void* dsum, void* dx, void* dresidual,
                                        void* dgamma, void* dbeta, float* workspace,
                                        const LayerNormBackwardPlan& plan, int64_t rows, int64_t cols, DType dtype,
                                        gpuStream_t stream);

enum class GeluApprox : int { kNone = 0, kTanh = 1 };

// y = gelu(x + bias); x, y: [rows, cols]; bias: [cols].
gpuError_t bias_gelu_forward(const void* x, const void* bias, void* y, int64_t rows, int64_t cols,
                             GeluApprox approx, DType dtype, gpuStream_t stream);

// dx = dy * gelu'(x + bias); dbias = sum over rows of dx. `workspace` holds
// col_reduce_parts(rows) * cols floats.
gpuError_t bias_gelu_backward(const void* dy, const void* x, const void* bias, void* dx, void* dbias,
                              float* workspace, int64_t rows, int64_t cols, GeluApprox approx, DType dtype,
                              gpuStream_t stream);

// Input [batch, heads, q_len, k_len]; the mask (1 = masked out) is
// [mask_batch, mask_heads, q_len, k_len] with mask_batch in {1, batch} and
// mask_heads in {1, heads}. Causal masking hides key j from query i when
// j > i + (k_len - q_len). Rows with every key hidden come out as zeros; rows with a
// visible +inf or NaN score come out as NaN (torch.softmax's result).
struct SoftmaxShape {
  int64_t batch;
  int64_t heads;
  int64_t q_len;
  int64_t k_len;
  int64_t mask_batch;
  int64_t mask_heads;
};

gpuError_t scaled_masked_softmax_forward(const void* x, const uint8_t* mask, void* y, const SoftmaxShape& shape,
                                         float scale, bool causal, DType dtype, gpuStream_t stream);

// dx = scale * y * (dy - sum(dy * y)) per row of `cols` elements.
gpuError_t scaled_masked_softmax_backward(const void* dy, const void* y, void* dx, int64_t rows, int64_t cols,
                                          float scale, DType dtype, gpuStream_t stream);

}  // namespace gpu_ops
