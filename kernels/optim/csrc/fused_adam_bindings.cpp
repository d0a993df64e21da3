// torch bindings of fused_adam: check the tensor lists, then launch on the current stream.
// Written once for both ABIs (op_abi.h, gpu_bindings.h).
#include "gpu_bindings.h"
#include "gpu_fused_optim.h"

#include <cmath>

namespace {

using op_abi::Tensor;

void adam(const std::vector<Tensor>& grads, const std::vector<Tensor>& params, const std::vector<Tensor>& exp_avgs,
          const std::vector<Tensor>& exp_avg_sqs, double lr, double beta1, double beta2, double eps,
          double weight_decay, int64_t step, bool adamw_mode, bool bias_correction) {
  const size_t n = params.size();
  OP_CHECK(grads.size() == n && exp_avgs.size() == n && exp_avg_sqs.size() == n,
           "fused_adam: grads, params, exp_avgs and exp_avg_sqs must have the same length");
  if (n == 0) return;
  OP_CHECK(step >= 1, "fused_adam: step must be >= 1, got ", step);
  const gpu_bind::OptimizerLists lists = gpu_bind::optimizer_lists("fused_adam", params, grads);
  const std::vector<float*> m = gpu_bind::fp32_state(exp_avgs, "exp_avgs", lists);
  const std::vector<float*> v = gpu_bind::fp32_state(exp_avg_sqs, "exp_avg_sqs", lists);

  gpu_ops::AdamConfig config{};
  config.beta1 = static_cast<float>(beta1);
  config.beta2 = static_cast<float>(beta2);
  config.one_minus_beta1 = static_cast<float>(1.0 - beta1);
  config.one_minus_beta2 = static_cast<float>(1.0 - beta2);
  config.eps = static_cast<float>(eps);
  config.weight_decay = static_cast<float>(weight_decay);
  config.decay = static_cast<float>(1.0 - lr * weight_decay);
  const double s = static_cast<double>(step);
  config.step_size = static_cast<float>(bias_correction ? lr / (1.0 - std::pow(beta1, s)) : lr);
  config.bias_correction2_sqrt = bias_correction ? static_cast<float>(std::sqrt(1.0 - std::pow(beta2, s))) : 1.0f;
  config.adamw_mode = adamw_mode;

  const gpu_bind::DeviceGuard guard(lists.device.index());
  gpu_bind::check_launch(
      gpu_ops::fused_adam(static_cast<int>(n), lists.grads.data(), lists.params.data(), m.data(), v.data(),
                          lists.sizes.data(), lists.dtype, config, gpu_bind::current_stream(lists.device)),
      "fused_adam");
}

}  // namespace

#ifdef IMAGEGEN_STABLE_ABI
// The argument names are the pybind11 build's, so keyword calls work on either build.
OP_LIBRARY(m) {
  m.def(
      "adam(Tensor[] grads, Tensor(a!)[] params, Tensor(b!)[] exp_avgs, Tensor(c!)[] exp_avg_sqs, float lr, "
      "float beta1, float beta2, float eps, float weight_decay, int step, bool adamw_mode, bool bias_correction) "
      "-> ()");
  m.def("has_bf16() -> bool");
}
OP_LIBRARY_IMPL(CUDA, m) { m.impl("adam", OP_BOX(&adam)); }
// No tensor argument to dispatch on: one kernel for every backend.
OP_LIBRARY_IMPL(CompositeExplicitAutograd, m) { m.impl("has_bf16", OP_BOX(&gpu_ops::has_bf16)); }
OP_PYTHON_MODULE("Multi-tensor Adam / AdamW (fp32 state and math; fp32, fp16 or bf16 params): torch.ops")
#else
PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.doc() = "Multi-tensor Adam / AdamW (fp32 state and math; fp32, fp16 or bf16 params)";
  m.def("adam", &adam, "One Adam/AdamW step over lists of tensors, in place", py::arg("grads"),
        py::arg("params"), py::arg("exp_avgs"), py::arg("exp_avg_sqs"), py::arg("lr"), py::arg("beta1"),
        py::arg("beta2"), py::arg("eps"), py::arg("weight_decay"), py::arg("step"), py::arg("adamw_mode"),
        py::arg("bias_correction"));
  m.def("has_bf16", &gpu_ops::has_bf16, "Whether this build has bf16 kernels");
}
#endif
