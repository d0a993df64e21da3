// torch bindings of fused_lamb: check the tensor lists, allocate the fp32 scratch
// (updates, and the workspace of per-chunk partial sums and per-tensor trust ratios) from
// torch's caching allocator, launch, and return the trust ratios.
// Written once for both ABIs (op_abi.h, gpu_bindings.h).
#include "gpu_bindings.h"
#include "gpu_fused_optim.h"

#include <cmath>
#include <optional>

namespace {

using op_abi::ScalarType;
using op_abi::Tensor;

// Returns the trust ratio each tensor was updated with: an fp32 tensor of n elements on the
// params' device, written by the launch (reading it waits for the step; returning it does not).
Tensor lamb(const std::vector<Tensor>& grads, const std::vector<Tensor>& params, const std::vector<Tensor>& exp_avgs,
            const std::vector<Tensor>& exp_avg_sqs, double lr, double beta1, double beta2, double eps,
            double weight_decay, int64_t step, bool bias_correction, bool eps_inside_sqrt, double min_coeff,
            double max_coeff, const std::optional<Tensor>& grad_scale) {
  const size_t n = params.size();
  OP_CHECK(grads.size() == n && exp_avgs.size() == n && exp_avg_sqs.size() == n,
           "fused_lamb: grads, params, exp_avgs and exp_avg_sqs must have the same length");
  if (n == 0) return op_abi::cpu_empty({0}, ScalarType::Float);
  OP_CHECK(step >= 1, "fused_lamb: step must be >= 1, got ", step);
  // The kernel clamps max first, then min; NaN bounds would clamp nothing, or everything.
  OP_CHECK(min_coeff >= 0.0 && max_coeff >= 0.0, "fused_lamb: min_coeff and max_coeff must be >= 0, got ",
           min_coeff, " and ", max_coeff);
  const gpu_bind::OptimizerLists lists = gpu_bind::optimizer_lists("fused_lamb", params, grads);
  const std::vector<float*> m = gpu_bind::fp32_state(exp_avgs, "exp_avgs", lists);
  const std::vector<float*> v = gpu_bind::fp32_state(exp_avg_sqs, "exp_avg_sqs", lists);
  const std::vector<int64_t>& sizes = lists.sizes;
  const float* scale = nullptr;
  if (grad_scale.has_value()) {
    const Tensor& s = *grad_scale;
    gpu_bind::check_gpu_tensor(s, "grad_scale");
    OP_CHECK(s.device() == lists.device, "grad_scale is on ", gpu_bind::device_text(s.device()), " but expected ",
             gpu_bind::device_text(lists.device));
    OP_CHECK(s.scalar_type() == ScalarType::Float && s.numel() == 1,
             "fused_lamb: grad_scale must be one float32 element, got ", s.numel(), " of ",
             op_abi::dtype_name(s.scalar_type()));
    scale = s.const_data_ptr<float>();
  }

  // One scratch allocation; each tensor's slice starts on a 16-byte boundary so the
  // kernels can use vector loads on it.
  std::vector<int64_t> offsets(n);
  int64_t total = 0;
  for (size_t i = 0; i < n; ++i) {
    offsets[i] = total;
    total += (sizes[i] + 3) / 4 * 4;
  }
  const gpu_bind::DeviceGuard guard(lists.device.index());
  const Tensor& first = params[0];
  Tensor scratch = op_abi::new_empty(first, {total}, ScalarType::Float);
  // Workspace: the per-chunk (float2) partials first, at the allocation's aligned start, then
  // the n ratios, which the returned tensor views.
  const int64_t chunks = gpu_ops::fused_lamb_chunks(static_cast<int>(n), sizes.data());
  Tensor workspace = op_abi::new_empty(first, {2 * chunks + static_cast<int64_t>(n)}, ScalarType::Float);
  Tensor ratios = op_abi::narrow(workspace, 0, 2 * chunks, static_cast<int64_t>(n));
  float* const scratch_start = scratch.mutable_data_ptr<float>();
  std::vector<float*> updates(n);
  for (size_t i = 0; i < n; ++i) updates[i] = scratch_start + offsets[i];

  gpu_ops::LambConfig config{};
  config.lr = static_cast<float>(lr);
  config.beta1 = static_cast<float>(beta1);
  config.beta2 = static_cast<float>(beta2);
  config.one_minus_beta1 = static_cast<float>(1.0 - beta1);
  config.one_minus_beta2 = static_cast<float>(1.0 - beta2);
  config.eps_inside = eps_inside_sqrt ? static_cast<float>(eps) : 0.0f;
  config.eps_outside = eps_inside_sqrt ? 0.0f : static_cast<float>(eps);
  config.weight_decay = static_cast<float>(weight_decay);
  const double s = static_cast<double>(step);
  config.bias_correction1 = bias_correction ? static_cast<float>(1.0 - std::pow(beta1, s)) : 1.0f;
  config.bias_correction2 = bias_correction ? static_cast<float>(1.0 - std::pow(beta2, s)) : 1.0f;
  config.min_coeff = static_cast<float>(min_coeff);
  config.max_coeff = static_cast<float>(max_coeff);
  config.grad_scale = scale;

  gpu_bind::check_launch(
      gpu_ops::fused_lamb(static_cast<int>(n), lists.grads.data(), lists.params.data(), m.data(), v.data(),
                          updates.data(), workspace.mutable_data_ptr<float>(), ratios.mutable_data_ptr<float>(),
                          sizes.data(), lists.dtype, config, gpu_bind::current_stream(lists.device)),
      "fused_lamb");
  return ratios;
}

}  // namespace

// Every argument is required, on either build: the default of max_coeff (+inf) has no spelling in
// a torch.ops schema, and one build taking fewer arguments than the other would fail a caller
// only on the other. The front passes them all.
#ifdef IMAGEGEN_STABLE_ABI
// The argument names are the pybind11 build's, so keyword calls work on either build.
OP_LIBRARY(m) {
  m.def(
      "lamb(Tensor[] grads, Tensor(a!)[] params, Tensor(b!)[] exp_avgs, Tensor(c!)[] exp_avg_sqs, float lr, "
      "float beta1, float beta2, float eps, float weight_decay, int step, bool bias_correction, "
      "bool eps_inside_sqrt, float min_coeff, float max_coeff, Tensor? grad_scale) -> Tensor");
  m.def("has_bf16() -> bool");
}
OP_LIBRARY_IMPL(CUDA, m) { m.impl("lamb", OP_BOX(&lamb)); }
// No tensor argument to dispatch on: one kernel for every backend.
OP_LIBRARY_IMPL(CompositeExplicitAutograd, m) { m.impl("has_bf16", OP_BOX(&gpu_ops::has_bf16)); }
OP_PYTHON_MODULE("Multi-tensor Lamb (per-tensor trust ratio; fp32 state and math): torch.ops")
#else
PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.doc() = "Multi-tensor Lamb (per-tensor trust ratio; fp32 state and math)";
  m.def("lamb", &lamb,
        "One Lamb step over lists of tensors, in place; returns the trust ratio of each tensor (fp32, on "
        "the device). min_coeff / max_coeff bound the ratio (max first; 0 and +inf leave it as it is); "
        "grad_scale, a one-element fp32 tensor on the device or None, multiplies every grad (the clip factor "
        "of grad-norm clipping)",
        py::arg("grads"), py::arg("params"), py::arg("exp_avgs"), py::arg("exp_avg_sqs"), py::arg("lr"),
        py::arg("beta1"), py::arg("beta2"), py::arg("eps"), py::arg("weight_decay"), py::arg("step"),
        py::arg("bias_correction"), py::arg("eps_inside_sqrt"), py::arg("min_coeff"), py::arg("max_coeff"),
        py::arg("grad_scale"));
  m.def("has_bf16", &gpu_ops::has_bf16, "Whether this build has bf16 kernels");
}
#endif
