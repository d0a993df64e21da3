// torch bindings of the transformer op: check tensors, allocate outputs and
// scratch through torch's caching allocator, launch on the current stream.
// Every function works on the last dimension; leading dimensions are rows.
//
// Written once for both ABIs (op_abi.h, gpu_bindings.h, op_tensors.h). Every function is a plain
// kernel: the front's torch.autograd.Function pairs each forward with its backward, so nothing
// here takes part in autograd and the stable build registers the kernels under CUDA alone.
#include "gpu_bindings.h"
#include "gpu_transformer.h"
#include "op_tensors.h"
#include "shape_text.h"

#include <optional>
#include <string>
#include <tuple>

namespace {

using op_abi::ScalarType;
using op_abi::Tensor;
using OptTensor = std::optional<Tensor>;

struct Rows {
  int64_t rows;
  int64_t cols;
};

Rows rows_of(const Tensor& t, const char* what) {
  OP_CHECK(t.dim() >= 1, what, " must have at least one dimension");
  const int64_t cols = t.size(t.dim() - 1);
  return {cols == 0 ? 0 : t.numel() / cols, cols};
}

void check_like(const Tensor& t, const Tensor& ref, const char* what) {
  gpu_bind::check_gpu_tensor(t, what);
  gpu_bind::check_same_device(t, ref, what);
  OP_CHECK(t.scalar_type() == ref.scalar_type(), what, " must be ", op_abi::dtype_name(ref.scalar_type()),
           ", got ", op_abi::dtype_name(t.scalar_type()));
}

void check_vector(const Tensor& t, const Tensor& ref, int64_t cols, const char* what) {
  check_like(t, ref, what);
  OP_CHECK(t.dim() == 1 && t.size(0) == cols, what, " must have shape [", cols, "], got ", shape_text(t.sizes()));
}

// The fp32 buffers (statistics, workspaces): neither ABI's typed data_ptr is in both.
float* f32(const Tensor& t) { return static_cast<float*>(t.data_ptr()); }

const void* optional_ptr(const OptTensor& t) { return t.has_value() ? t->data_ptr() : nullptr; }

gpu_ops::GeluApprox gelu_approx(const std::string& approximate) {
  if (approximate == "none") return gpu_ops::GeluApprox::kNone;
  OP_CHECK(approximate == "tanh", "approximate must be 'none' or 'tanh', got '", approximate, "'");
  return gpu_ops::GeluApprox::kTanh;
}

std::tuple<Tensor, Tensor, Tensor> layer_norm_forward(const Tensor& x, const OptTensor& weight,
                                                      const OptTensor& bias, double eps) {
  gpu_bind::check_gpu_tensor(x, "x");
  const gpu_ops::DType dtype = gpu_bind::float_dtype(x, "x");
  const Rows shape = rows_of(x, "x");
  if (weight.has_value()) check_vector(*weight, x, shape.cols, "weight");
  if (bias.has_value()) check_vector(*bias, x, shape.cols, "bias");
  const gpu_bind::DeviceGuard guard(x.device().index());
  Tensor y = op_abi::empty_like(x);
  Tensor mean = op_abi::new_empty(x, {shape.rows}, ScalarType::Float);
  Tensor rstd = op_abi::new_empty(x, {shape.rows}, ScalarType::Float);
  gpu_bind::check_launch(
      gpu_ops::layer_norm_forward(x.data_ptr(), optional_ptr(weight), optional_ptr(bias), y.data_ptr(),
                                  f32(mean), f32(rstd), shape.rows, shape.cols,
                                  static_cast<float>(eps), dtype, gpu_bind::current_stream(x.device())),
      "layer_norm_forward");
  return {y, mean, rstd};
}

// A LayerNorm backward's launch: x's dtype and shape, and its outputs.
struct LnBackward {
  gpu_ops::DType dtype;
  Rows shape;
  Tensor dx;
  OptTensor dweight, dbias;
  OptTensor workspace;
  gpu_ops::LayerNormBackwardPlan plan;
};

// Checks dy (shaped as x), weight and the per-row statistics; the outputs are not allocated yet.
LnBackward check_ln_backward(const Tensor& dy, const Tensor& x, const OptTensor& weight,
                             const Tensor& mean, const Tensor& rstd, const char* x_name) {
  gpu_bind::check_gpu_tensor(x, x_name);
  const gpu_ops::DType dtype = gpu_bind::float_dtype(x, x_name);
  check_like(dy, x, "grad_output");
  OP_CHECK(op_abi::same_shape(dy, x), "grad_output has shape ", shape_text(dy.sizes()), " but ", x_name, " has ",
           shape_text(x.sizes()));
  const Rows shape = rows_of(x, x_name);
  if (weight.has_value()) check_vector(*weight, x, shape.cols, "weight");
  for (const Tensor* stat : {&mean, &rstd}) {
    gpu_bind::check_gpu_tensor(*stat, "mean/rstd");
    gpu_bind::check_same_device(*stat, x, "mean/rstd");
    OP_CHECK(stat->scalar_type() == ScalarType::Float && stat->numel() == shape.rows,
             "mean and rstd must be float32 with one value per row");
  }
  return {dtype, shape, Tensor(), std::nullopt, std::nullopt, std::nullopt, gpu_ops::LayerNormBackwardPlan()};
}

// dx, the launch's plan over every buffer of the call (dy, x, weight, dx and the residual
// variant's dx_add / dx2: null for the plain one), and with affine_grads dweight, dbias and the
// workspace the plan sizes. Under x's device guard: the plan is for the current device.
void allocate_ln_backward(LnBackward& b, const Tensor& dy, const Tensor& x,
                          const OptTensor& weight, bool affine_grads, const void* dx_add = nullptr,
                          const void* dx2 = nullptr) {
  b.dx = op_abi::empty_like(x);
  b.plan = gpu_ops::layer_norm_backward_plan(b.shape.rows, b.shape.cols, b.dtype,
                                             {dy.data_ptr(), x.data_ptr(), optional_ptr(weight), b.dx.data_ptr(),
                                              dx_add, dx2});
  if (affine_grads) {
    b.dweight = op_abi::new_empty(x, {b.shape.cols});
    b.dbias = op_abi::new_empty(x, {b.shape.cols});
    b.workspace = op_abi::new_empty(x, {b.plan.workspace}, ScalarType::Float);
  }
}

void* optional_out(const OptTensor& t) { return t.has_value() ? t->data_ptr() : nullptr; }

float* workspace_ptr(const LnBackward& b) { return b.workspace.has_value() ? f32(*b.workspace) : nullptr; }

std::tuple<Tensor, OptTensor, OptTensor> layer_norm_backward(
    const Tensor& dy, const Tensor& x, const OptTensor& weight, const Tensor& mean,
    const Tensor& rstd, bool affine_grads) {
  LnBackward b = check_ln_backward(dy, x, weight, mean, rstd, "x");
  const gpu_bind::DeviceGuard guard(x.device().index());
  allocate_ln_backward(b, dy, x, weight, affine_grads);
  gpu_bind::check_launch(
      gpu_ops::layer_norm_backward(dy.data_ptr(), x.data_ptr(), optional_ptr(weight), f32(mean),
                                   f32(rstd), b.dx.data_ptr(), optional_out(b.dweight),
                                   optional_out(b.dbias), workspace_ptr(b), b.plan, b.shape.rows, b.shape.cols,
                                   b.dtype, gpu_bind::current_stream(x.device())),
      "layer_norm_backward");
  return {b.dx, b.dweight, b.dbias};
}

// The residual variant: (y, sum, mean, rstd) with sum = x + hidden_bias + residual
// rounded to x's dtype and y its LayerNorm.
std::tuple<Tensor, Tensor, Tensor, Tensor> residual_layer_norm_forward(
    const Tensor& x, const Tensor& residual, const OptTensor& hidden_bias,
    const OptTensor& weight, const OptTensor& bias, double eps) {
  gpu_bind::check_gpu_tensor(x, "x");
  const gpu_ops::DType dtype = gpu_bind::float_dtype(x, "x");
  check_like(residual, x, "residual");
  OP_CHECK(op_abi::same_shape(residual, x), "residual has shape ", shape_text(residual.sizes()), " but x has ",
           shape_text(x.sizes()));
  const Rows shape = rows_of(x, "x");
  if (hidden_bias.has_value()) check_vector(*hidden_bias, x, shape.cols, "hidden_bias");
  if (weight.has_value()) check_vector(*weight, x, shape.cols, "weight");
  if (bias.has_value()) check_vector(*bias, x, shape.cols, "bias");
  const gpu_bind::DeviceGuard guard(x.device().index());
  Tensor y = op_abi::empty_like(x);
  Tensor sum = op_abi::empty_like(x);
  Tensor mean = op_abi::new_empty(x, {shape.rows}, ScalarType::Float);
  Tensor rstd = op_abi::new_empty(x, {shape.rows}, ScalarType::Float);
  gpu_bind::check_launch(
      gpu_ops::residual_layer_norm_forward(x.data_ptr(), residual.data_ptr(), optional_ptr(hidden_bias),
                                           optional_ptr(weight), optional_ptr(bias), sum.data_ptr(), y.data_ptr(),
                                           f32(mean), f32(rstd), shape.rows, shape.cols,
                                           static_cast<float>(eps), dtype, gpu_bind::current_stream(x.device())),
      "residual_layer_norm_forward");
  return {y, sum, mean, rstd};
}

// Its backward: (dx, dresidual, dweight, dbias). dx is the sum's whole gradient (grad_sum,
// the gradient the returned sum received, added when given); dresidual, with
// `residual_grad`, holds the same values in a tensor of its own. The hidden bias's
// gradient is dx's column sum, which the caller takes.
std::tuple<Tensor, OptTensor, OptTensor, OptTensor>
residual_layer_norm_backward(const Tensor& dy, const Tensor& sum, const OptTensor& weight,
                             const Tensor& mean, const Tensor& rstd, const OptTensor& grad_sum,
                             bool affine_grads, bool residual_grad) {
  LnBackward b = check_ln_backward(dy, sum, weight, mean, rstd, "sum");
  if (grad_sum.has_value()) {
    check_like(*grad_sum, sum, "grad_sum");
    OP_CHECK(op_abi::same_shape(*grad_sum, sum), "grad_sum has shape ", shape_text(grad_sum->sizes()), " but sum has ",
             shape_text(sum.sizes()));
  }
  const gpu_bind::DeviceGuard guard(sum.device().index());
  OptTensor dresidual;
  if (residual_grad) dresidual = op_abi::empty_like(sum);
  allocate_ln_backward(b, dy, sum, weight, affine_grads, optional_ptr(grad_sum), optional_out(dresidual));
  gpu_bind::check_launch(
      gpu_ops::residual_layer_norm_backward(dy.data_ptr(), sum.data_ptr(), optional_ptr(weight),
                                            f32(mean), f32(rstd), optional_ptr(grad_sum),
                                            b.dx.data_ptr(), optional_out(dresidual), optional_out(b.dweight),
                                            optional_out(b.dbias), workspace_ptr(b), b.plan, b.shape.rows,
                                            b.shape.cols, b.dtype, gpu_bind::current_stream(sum.device())),
      "residual_layer_norm_backward");
  return {b.dx, dresidual, b.dweight, b.dbias};
}

Tensor bias_gelu_forward(const Tensor& x, const Tensor& bias, const std::string& approximate) {
  gpu_bind::check_gpu_tensor(x, "x");
  const gpu_ops::DType dtype = gpu_bind::float_dtype(x, "x");
  const Rows shape = rows_of(x, "x");
  check_vector(bias, x, shape.cols, "bias");
  const gpu_ops::GeluApprox approx = gelu_approx(approximate);
  const gpu_bind::DeviceGuard guard(x.device().index());
  Tensor y = op_abi::empty_like(x);
  gpu_bind::check_launch(gpu_ops::bias_gelu_forward(x.data_ptr(), bias.data_ptr(), y.data_ptr(), shape.rows,
                                                    shape.cols, approx, dtype, gpu_bind::current_stream(x.device())),
                         "bias_gelu_forward");
  return y;
}

std::tuple<Tensor, Tensor> bias_gelu_backward(const Tensor& dy, const Tensor& x, const Tensor& bias,
                                              const std::string& approximate) {
  gpu_bind::check_gpu_tensor(x, "x");
  const gpu_ops::DType dtype = gpu_bind::float_dtype(x, "x");
  check_like(dy, x, "grad_output");
  OP_CHECK(op_abi::same_shape(dy, x), "grad_output has shape ", shape_text(dy.sizes()), " but x has ",
           shape_text(x.sizes()));
  const Rows shape = rows_of(x, "x");
  check_vector(bias, x, shape.cols, "bias");
  const gpu_ops::GeluApprox approx = gelu_approx(approximate);
  const gpu_bind::DeviceGuard guard(x.device().index());
  Tensor dx = op_abi::empty_like(x);
  Tensor dbias = op_abi::new_empty(x, {shape.cols});
  if (shape.rows == 0) return {dx, op_abi::zero_(dbias)};
  Tensor workspace =
      op_abi::new_empty(x, {gpu_ops::col_reduce_parts(shape.rows) * shape.cols}, ScalarType::Float);
  gpu_bind::check_launch(
      gpu_ops::bias_gelu_backward(dy.data_ptr(), x.data_ptr(), bias.data_ptr(), dx.data_ptr(), dbias.data_ptr(),
                                  f32(workspace), shape.rows, shape.cols, approx, dtype,
                                  gpu_bind::current_stream(x.device())),
      "bias_gelu_backward");
  return {dx, dbias};
}

Tensor softmax_forward(const Tensor& x, const OptTensor& mask, double scale, bool causal) {
  gpu_bind::check_gpu_tensor(x, "x");
  const gpu_ops::DType dtype = gpu_bind::float_dtype(x, "x");
  OP_CHECK(x.dim() == 4, "x must be [batch, heads, q_len, k_len], got ", shape_text(x.sizes()));
  gpu_ops::SoftmaxShape shape{x.size(0), x.size(1), x.size(2), x.size(3), 1, 1};
  const uint8_t* mask_ptr = nullptr;
  if (mask.has_value()) {
    const Tensor& m = *mask;
    gpu_bind::check_gpu_tensor(m, "mask");
    gpu_bind::check_same_device(m, x, "mask");
    OP_CHECK(m.scalar_type() == ScalarType::Bool || m.scalar_type() == ScalarType::Byte,
             "mask must be bool or uint8, got ", op_abi::dtype_name(m.scalar_type()));
    OP_CHECK(m.dim() == 4 && (m.size(0) == 1 || m.size(0) == shape.batch) &&
                 (m.size(1) == 1 || m.size(1) == shape.heads) && m.size(2) == shape.q_len &&
                 m.size(3) == shape.k_len,
             "mask must be [1 or batch, 1 or heads, q_len, k_len] for x of shape ", shape_text(x.sizes()), ", got ",
             shape_text(m.sizes()));
    shape.mask_batch = m.size(0);
    shape.mask_heads = m.size(1);
    mask_ptr = static_cast<const uint8_t*>(m.data_ptr());
  }
  const gpu_bind::DeviceGuard guard(x.device().index());
  Tensor y = op_abi::empty_like(x);
  gpu_bind::check_launch(gpu_ops::scaled_masked_softmax_forward(x.data_ptr(), mask_ptr, y.data_ptr(), shape,
                                                                static_cast<float>(scale), causal, dtype,
                                                                gpu_bind::current_stream(x.device())),
                         "scaled_masked_softmax_forward");
  return y;
}

Tensor softmax_backward(const Tensor& dy, const Tensor& y, double scale) {
  gpu_bind::check_gpu_tensor(y, "y");
  const gpu_ops::DType dtype = gpu_bind::float_dtype(y, "y");
  check_like(dy, y, "grad_output");
  OP_CHECK(op_abi::same_shape(dy, y), "grad_output has shape ", shape_text(dy.sizes()), " but y has ",
           shape_text(y.sizes()));
  const Rows shape = rows_of(y, "y");
  const gpu_bind::DeviceGuard guard(y.device().index());
  Tensor dx = op_abi::empty_like(y);
  gpu_bind::check_launch(
      gpu_ops::scaled_masked_softmax_backward(dy.data_ptr(), y.data_ptr(), dx.data_ptr(), shape.rows, shape.cols,
                                              static_cast<float>(scale), dtype, gpu_bind::current_stream(y.device())),
      "scaled_masked_softmax_backward");
  return dx;
}

}  // namespace

#ifdef IMAGEGEN_STABLE_ABI
// The argument names are the pybind11 build's, so keyword calls work on either build. Every op
// returns new tensors and mutates none of its arguments.
OP_LIBRARY(m) {
  m.def("layer_norm_forward(Tensor x, Tensor? weight, Tensor? bias, float eps) -> (Tensor, Tensor, Tensor)");
  m.def(
      "layer_norm_backward(Tensor grad_output, Tensor x, Tensor? weight, Tensor mean, Tensor rstd, "
      "bool affine_grads) -> (Tensor, Tensor?, Tensor?)");
  m.def(
      "residual_layer_norm_forward(Tensor x, Tensor residual, Tensor? hidden_bias, Tensor? weight, Tensor? bias, "
      "float eps) -> (Tensor, Tensor, Tensor, Tensor)");
  m.def(
      "residual_layer_norm_backward(Tensor grad_output, Tensor sum, Tensor? weight, Tensor mean, Tensor rstd, "
      "Tensor? grad_sum, bool affine_grads, bool residual_grad) -> (Tensor, Tensor?, Tensor?, Tensor?)");
  m.def("bias_gelu_forward(Tensor x, Tensor bias, str approximate) -> Tensor");
  m.def("bias_gelu_backward(Tensor grad_output, Tensor x, Tensor bias, str approximate) -> (Tensor, Tensor)");
  m.def("softmax_forward(Tensor x, Tensor? mask, float scale, bool causal) -> Tensor");
  m.def("softmax_backward(Tensor grad_output, Tensor y, float scale) -> Tensor");
  m.def("has_bf16() -> bool");
}
OP_LIBRARY_IMPL(CUDA, m) {
  m.impl("layer_norm_forward", OP_BOX(&layer_norm_forward));
  m.impl("layer_norm_backward", OP_BOX(&layer_norm_backward));
  m.impl("residual_layer_norm_forward", OP_BOX(&residual_layer_norm_forward));
  m.impl("residual_layer_norm_backward", OP_BOX(&residual_layer_norm_backward));
  m.impl("bias_gelu_forward", OP_BOX(&bias_gelu_forward));
  m.impl("bias_gelu_backward", OP_BOX(&bias_gelu_backward));
  m.impl("softmax_forward", OP_BOX(&softmax_forward));
  m.impl("softmax_backward", OP_BOX(&softmax_backward));
}
// No tensor argument to dispatch on: one kernel for every backend.
OP_LIBRARY_IMPL(CompositeExplicitAutograd, m) { m.impl("has_bf16", OP_BOX(&gpu_ops::has_bf16)); }
OP_PYTHON_MODULE(
    "Fused LayerNorm (plain and of a residual sum), bias + GeLU and scaled masked softmax (fp32 math): torch.ops")
#else
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
#endif
