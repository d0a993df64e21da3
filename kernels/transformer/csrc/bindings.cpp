// torch bindings of the transformer op: check tensors, allocate outputs and
// scratch through torch's caching allocator, launch on the current stream.
// Every function works on the last dimension; leading dimensions are rows.
#include "gpu_bindings.h"
#include "gpu_transformer.h"
#include "shape_text.h"

#include <string>
#include <tuple>

namespace {

struct Rows {
  int64_t rows;
  int64_t cols;
};

Rows rows_of(const at::Tensor& t, const char* what) {
  TORCH_CHECK(t.dim() >= 1, what, " must have at least one dimension");
  const int64_t cols = t.size(-1);
  return {cols == 0 ? 0 : t.numel() / cols, cols};
}

void check_like(const at::Tensor& t, const at::Tensor& ref, const char* what) {
  gpu_bind::check_gpu_tensor(t, what);
  gpu_bind::check_same_device(t, ref, what);
  TORCH_CHECK(t.scalar_type() == ref.scalar_type(), what, " must be ", ref.scalar_type(), ", got ",
              t.scalar_type());
}

void check_vector(const at::Tensor& t, const at::Tensor& ref, int64_t cols, const char* what) {
  check_like(t, ref, what);
  TORCH_CHECK(t.dim() == 1 && t.size(0) == cols, what, " must have shape [", cols, "], got ", shape_text(t.sizes()));
}

const void* optional_ptr(const c10::optional<at::Tensor>& t) { return t.has_value() ? t->data_ptr() : nullptr; }

gpu_ops::GeluApprox gelu_approx(const std::string& approximate) {
  if (approximate == "none") return gpu_ops::GeluApprox::kNone;
  TORCH_CHECK(approximate == "tanh", "approximate must be 'none' or 'tanh', got '", approximate, "'");
  return gpu_ops::GeluApprox::kTanh;
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> layer_norm_forward(const at::Tensor& x,
                                                                  const c10::optional<at::Tensor>& weight,
                                                                  const c10::optional<at::Tensor>& bias,
                                                                  double eps) {
  gpu_bind::check_gpu_tensor(x, "x");
  const gpu_ops::DType dtype = gpu_bind::float_dtype(x, "x");
  const Rows shape = rows_of(x, "x");
  if (weight.has_value()) check_vector(*weight, x, shape.cols, "weight");
  if (bias.has_value()) check_vector(*bias, x, shape.cols, "bias");
  const c10::cuda::CUDAGuard guard(x.device());
  at::Tensor y = at::empty_like(x);
  const auto stats = x.options().dtype(at::kFloat);
  at::Tensor mean = at::empty({shape.rows}, stats);
  at::Tensor rstd = at::empty({shape.rows}, stats);
  gpu_bind::check_launch(
      gpu_ops::layer_norm_forward(x.data_ptr(), optional_ptr(weight), optional_ptr(bias), y.data_ptr(),
                                  mean.data_ptr<float>(), rstd.data_ptr<float>(), shape.rows, shape.cols,
                                  static_cast<float>(eps), dtype, gpu_bind::current_stream()),
      "layer_norm_forward");
  return {y, mean, rstd};
}

// A LayerNorm backward's launch: x's dtype and shape, and its outputs.
struct LnBackward {
  gpu_ops::DType dtype;
  Rows shape;
  at::Tensor dx;
  c10::optional<at::Tensor> dweight, dbias;
  at::Tensor workspace;
  gpu_ops::LayerNormBackwardPlan plan;
};

// Checks dy (shaped as x), weight and the per-row statistics; the outputs are not allocated yet.
LnBackward check_ln_backward(const at::Tensor& dy, const at::Tensor& x, const c10::optional<at::Tensor>& weight,
                             const at::Tensor& mean, const at::Tensor& rstd, const char* x_name) {
  gpu_bind::check_gpu_tensor(x, x_name);
  const gpu_ops::DType dtype = gpu_bind::float_dtype(x, x_name);
  check_like(dy, x, "grad_output");
  TORCH_CHECK(dy.sizes() == x.sizes(), "grad_output has shape ", shape_text(dy.sizes()), " but ", x_name, " has ",
              shape_text(x.sizes()));
  const Rows shape = rows_of(x, x_name);
  if (weight.has_value()) check_vector(*weight, x, shape.cols, "weight");
  for (const at::Tensor* stat : {&mean, &rstd}) {
    gpu_bind::check_gpu_tensor(*stat, "mean/rstd");
    gpu_bind::check_same_device(*stat, x, "mean/rstd");
    TORCH_CHECK(stat->scalar_type() == at::kFloat && stat->numel() == shape.rows,
                "mean and rstd must be float32 with one value per row");
  }
  return {dtype, shape, at::Tensor(), c10::nullopt, c10::nullopt, at::Tensor(), gpu_ops::LayerNormBackwardPlan()};
}

// dx, the launch's plan over every buffer of the call (dy, x, weight, dx and the residual
// variant's dx_add / dx2: null for the plain one), and with affine_grads dweight, dbias and the
// workspace the plan sizes. Under x's device guard: the plan is for the current device.
void allocate_ln_backward(LnBackward& b, const at::Tensor& dy, const at::Tensor& x,
                          const c10::optional<at::Tensor>& weight, bool affine_grads, const void* dx_add = nullptr,
                          const void* dx2 = nullptr) {
  b.dx = at::empty_like(x);
  b.plan = gpu_ops::layer_norm_backward_plan(b.shape.rows, b.shape.cols, b.dtype,
                                             {dy.data_ptr(), x.data_ptr(), optional_ptr(weight), b.dx.data_ptr(),
                                              dx_add, dx2});
  if (affine_grads) {
    b.dweight = at::empty({b.shape.cols}, x.options());
    b.dbias = at::empty({b.shape.cols}, x.options());
    b.workspace = at::empty({b.plan.workspace}, x.options().dtype(at::kFloat));
  }
}

void* optional_out(const c10::optional<at::Tensor>& t) { return t.has_value() ? t->data_ptr() : nullptr; }

float* workspace_ptr(const LnBackward& b) { return b.workspace.defined() ? b.workspace.data_ptr<float>() : nullptr; }

std::tuple<at::Tensor, c10::optional<at::Tensor>, c10::optional<at::Tensor>> layer_norm_backward(
    const at::Tensor& dy, const at::Tensor& x, const c10::optional<at::Tensor>& weight, const at::Tensor& mean,
    const at::Tensor& rstd, bool affine_grads) {
  LnBackward b = check_ln_backward(dy, x, weight, mean, rstd, "x");
  const c10::cuda::CUDAGuard guard(x.device());
  allocate_ln_backward(b, dy, x, weight, affine_grads);
  gpu_bind::check_launch(
      gpu_ops::layer_norm_backward(dy.data_ptr(), x.data_ptr(), optional_ptr(weight), mean.data_ptr<float>(),
                                   rstd.data_ptr<float>(), b.dx.data_ptr(), optional_out(b.dweight),
                                   optional_out(b.dbias), workspace_ptr(b), b.plan, b.shape.rows, b.shape.cols,
                                   b.dtype, gpu_bind::current_stream()),
      "layer_norm_backward");
  return {b.dx, b.dweight, b.dbias};
}

// The residual variant: (y, sum, mean, rstd) with sum = x + hidden_bias + residual
// rounded to x's dtype and y its LayerNorm.
std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor> residual_layer_norm_forward(
    const at::Tensor& x, const at::Tensor& residual, const c10::optional<at::Tensor>& hidden_bias,
    const c10::optional<at::Tensor>& weight, const c10::optional<at::Tensor>& bias, double eps) {
  gpu_bind::check_gpu_tensor(x, "x");
  const gpu_ops::DType dtype = gpu_bind::float_dtype(x, "x");
  check_like(residual, x, "residual");
  TORCH_CHECK(residual.sizes() == x.sizes(), "residual has shape ", shape_text(residual.sizes()), " but x has ",
              shape_text(x.sizes()));
  const Rows shape = rows_of(x, "x");
  if (hidden_bias.has_value()) check_vector(*hidden_bias, x, shape.cols, "hidden_bias");
  if (weight.has_value()) check_vector(*weight, x, shape.cols, "weight");
  if (bias.has_value()) check_vector(*bias, x, shape.cols, "bias");
  const c10::cuda::CUDAGuard guard(x.device());
  at::Tensor y = at::empty_like(x);
  at::Tensor sum = at::empty_like(x);
  const auto stats = x.options().dtype(at::kFloat);
  at::Tensor mean = at::empty({shape.rows}, stats);
  at::Tensor rstd = at::empty({shape.rows}, stats);
  gpu_bind::check_launch(
      gpu_ops::residual_layer_norm_forward(x.data_ptr(), residual.data_ptr(), optional_ptr(hidden_bias),
                                           optional_ptr(weight), optional_ptr(bias), sum.data_ptr(), y.data_ptr(),
                                           mean.data_ptr<float>(), rstd.data_ptr<float>(), shape.rows, shape.cols,
                                           static_cast<float>(eps), dtype, gpu_bind::current_stream()),
      "residual_layer_norm_forward");
  return {y, sum, mean, rstd};
}

// Its backward: (dx, dresidual, dweight, dbias). dx is the sum's whole gradient (grad_sum,
// the gradient the returned sum received, added when given); dresidual, with
// `residual_grad`, holds the same values in a tensor of its own. The hidden bias's
// gradient is dx's column sum, which the caller takes.
std::tuple<at::Tensor, c10::optional<at::Tensor>, c10::optional<at::Tensor>, c10::optional<at::Tensor>>
residual_layer_norm_backward(const at::Tensor& dy, const at::Tensor& sum, const c10::optional<at::Tensor>& weight,
                             const at::Tensor& mean, const at::Tensor& rstd, const c10::optional<at::Tensor>& grad_sum,
                             bool affine_grads, bool residual_grad) {
  LnBackward b = check_ln_backward(dy, sum, weight, mean, rstd, "sum");
  if (grad_sum.has_value()) {
    check_like(*grad_sum, sum, "grad_sum");
    TORCH_CHECK(grad_sum->sizes() == sum.sizes(), "grad_sum has shape ", shape_text(grad_sum->sizes()), " but sum has ",
                shape_text(sum.sizes()));
  }
  const c10::cuda::CUDAGuard guard(sum.device());
  c10::optional<at::Tensor> dresidual;
  if (residual_grad) dresidual = at::empty_like(sum);
  allocate_ln_backward(b, dy, sum, weight, affine_grads, optional_ptr(grad_sum), optional_out(dresidual));
  gpu_bind::check_launch(
      gpu_ops::residual_layer_norm_backward(dy.data_ptr(), sum.data_ptr(), optional_ptr(weight),
                                            mean.data_ptr<float>(), rstd.data_ptr<float>(), optional_ptr(grad_sum),
                                            b.dx.data_ptr(), optional_out(dresidual), optional_out(b.dweight),
                                            optional_out(b.dbias), workspace_ptr(b), b.plan, b.shape.rows,
                                            b.shape.cols, b.dtype, gpu_bind::current_stream()),
      "residual_layer_norm_backward");
  return {b.dx, dresidual, b.dweight, b.dbias};
}

at::Tensor bias_gelu_forward(const at::Tensor& x, const at::Tensor& bias, const std::string& approximate) {
  gpu_bind::check_gpu_tensor(x, "x");
  const gpu_ops::DType dtype = gpu_bind::float_dtype(x, "x");
  const Rows shape = rows_of(x, "x");
  check_vector(bias, x, shape.cols, "bias");
  const gpu_ops::GeluApprox approx = gelu_approx(approximate);
  const c10::cuda::CUDAGuard guard(x.device());
  at::Tensor y = at::empty_like(x);
  gpu_bind::check_launch(gpu_ops::bias_gelu_forward(x.data_ptr(), bias.data_ptr(), y.data_ptr(), shape.rows,
                                                    shape.cols, approx, dtype, gpu_bind::current_stream()),
                         "bias_gelu_forward");
  return y;
}

std::tuple<at::Tensor, at::Tensor> bias_gelu_backward(const at::Tensor& dy, const at::Tensor& x,
                                                      const at::Tensor& bias, const std::string& approximate) {
  gpu_bind::check_gpu_tensor(x, "x");
  const gpu_ops::DType dtype = gpu_bind::float_dtype(x, "x");
  check_like(dy, x, "grad_output");
  TORCH_CHECK(dy.sizes() == x.sizes(), "grad_output has shape ", shape_text(dy.sizes()), " but x has ",
              shape_text(x.sizes()));
  const Rows shape = rows_of(x, "x");
  check_vector(bias, x, shape.cols, "bias");
  const gpu_ops::GeluApprox approx = gelu_approx(approximate);
  const c10::cuda::CUDAGuard guard(x.device());
  at::Tensor dx = at::empty_like(x);
  at::Tensor dbias = at::empty({shape.cols}, x.options());
  if (shape.rows == 0) return {dx, dbias.zero_()};
  at::Tensor workspace =
      at::empty({gpu_ops::col_reduce_parts(shape.rows) * shape.cols}, x.options().dtype(at::kFloat));
  gpu_bind::check_launch(
      gpu_ops::bias_gelu_backward(dy.data_ptr(), x.data_ptr(), bias.data_ptr(), dx.data_ptr(), dbias.data_ptr(),
                                  workspace.data_ptr<float>(), shape.rows, shape.cols, approx, dtype,
                                  gpu_bind::current_stream()),
      "bias_gelu_backward");
  return {dx, dbias};
}

at::Tensor softmax_forward(const at::Tensor& x, const c10::optional<at::Tensor>& mask, double scale, bool causal) {
  gpu_bind::check_gpu_tensor(x, "x");
  const gpu_ops::DType dtype = gpu_bind::float_dtype(x, "x");
  TORCH_CHECK(x.dim() == 4, "x must be [batch, heads, q_len, k_len], got ", shape_text(x.sizes()));
  gpu_ops::SoftmaxShape shape{x.size(0), x.size(1), x.size(2), x.size(3), 1, 1};
  const uint8_t* mask_ptr = nullptr;
  if (mask.has_value()) {
    const at::Tensor& m = *mask;
    gpu_bind::check_gpu_tensor(m, "mask");
    gpu_bind::check_same_device(m, x, "mask");
    TORCH_CHECK(m.scalar_type() == at::kBool || m.scalar_type() == at::kByte, "mask must be bool or uint8, got ",
                m.scalar_type());
    TORCH_CHECK(m.dim() == 4 && (m.size(0) == 1 || m.size(0) == shape.batch) &&
                    (m.size(1) == 1 || m.size(1) == shape.heads) && m.size(2) == shape.q_len &&
                    m.size(3) == shape.k_len,
                "mask must be [1 or batch, 1 or heads, q_len, k_len] for x of shape ", shape_text(x.sizes()), ", got ",
                shape_text(m.sizes()));
    shape.mask_batch = m.size(0);
    shape.mask_heads = m.size(1);
    mask_ptr = static_cast<const uint8_t*>(m.data_ptr());
  }
  const c10::cuda::CUDAGuard guard(x.device());
  at::Tensor y = at::empty_like(x);
  gpu_bind::check_launch(gpu_ops::scaled_masked_softmax_forward(x.data_ptr(), mask_ptr, y.data_ptr(), shape,
                                                                static_cast<float>(scale), causal, dtype,
                                                                gpu_bind::current_stream()),
                         "scaled_masked_softmax_forward");
  return y;
}

at::Tensor softmax_backward(const at::Tensor& dy, const at::Tensor& y, double scale) {
  gpu_bind::check_gpu_tensor(y, "y");
  const gpu_ops::DType dtype = gpu_bind::float_dtype(y, "y");
  check_like(dy, y, "grad_output");
  TORCH_CHECK(dy.sizes() == y.sizes(), "grad_output has shape ", shape_text(dy.sizes()), " but y has ",
              shape_text(y.sizes()));
  const Rows shape = rows_of(y, "y");
  const c10::cuda::CUDAGuard guard(y.device());
  at::Tensor dx = at::empty_like(y);
  gpu_bind::check_launch(
      gpu_ops::scaled_masked_softmax_backward(dy.data_ptr(), y.data_ptr(), dx.data_ptr(), shape.rows, shape.cols,
                                              static_cast<float>(scale), dtype, gpu_bind::current_stream()),
      "scaled_masked_softmax_backward");
  return dx;
}

}  // namespace

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.doc() = "Fused LayerNorm (plain and of a residual sum), bias + GeLU and scaled masked softmax (fp32 math)";
  m.def("layer_norm_forward", &layer_norm_forward, "LayerNorm over the last dim: (y, mean, rstd)", py::arg("x"),
        py::arg("weight"), py::arg("bias"), py::arg("eps"));
  m.def("layer_norm_backward", &layer_norm_backward, "(dx, dweight, dbias)", py::arg("grad_output"), py::arg("x"),
        py::arg("weight"), py::arg("mean"), py::arg("rstd"), py::arg("affine_grads"));
  m.def("residual_layer_norm_forward", &residual_layer_norm_forward,
        "LayerNorm of x + hidden_bias + residual over the last dim: (y, sum, mean, rstd)", py::arg("x"),
        py::arg("residual"), py::arg("hidden_bias"), py::arg("weight"), py::arg("bias"), py::arg("eps"));
  m.def("residual_layer_norm_backward", &residual_layer_norm_backward, "(dx, dresidual, dweight, dbias)",
        py::arg("grad_output"), py::arg("sum"), py::arg("weight"), py::arg("mean"), py::arg("rstd"),
        py::arg("grad_sum"), py::arg("affine_grads"), py::arg("residual_grad"));
  m.def("bias_gelu_forward", &bias_gelu_forward, "gelu(x + bias)", py::arg("x"), py::arg("bias"),
        py::arg("approximate"));
  m.def("bias_gelu_backward", &bias_gelu_backward, "(dx, dbias)", py::arg("grad_output"), py::arg("x"),
        py::arg("bias"), py::arg("approximate"));
  m.def("softmax_forward", &softmax_forward, "softmax(scale * x) with masking", py::arg("x"), py::arg("mask"),
        py::arg("scale"), py::arg("causal"));
  m.def("softmax_backward", &softmax_backward, "dx from grad_output and the forward output",
        py::arg("grad_output"), py::arg("y"), py::arg("scale"));
  m.def("has_bf16", &gpu_ops::has_bf16, "Whether this build has bf16 kernels");
}
