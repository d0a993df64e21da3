// torch bindings of fused_lion: check the tensor lists, then launch on the current stream.
// Written once for both ABIs (op_abi.h, gpu_bindings.h).
#include "gpu_bindings.h"
#include "gpu_fused_optim.h"

namespace {

using op_abi::Tensor;

void lion(const std::vector<Tensor>& grads, const std::vector<Tensor>& params, const std::vector<Tensor>& exp_avgs,
          double lr, double beta1, double beta2, double weight_decay) {
  const size_t n = params.size();
  OP_CHECK(grads.size() == n && exp_avgs.size() == n,
           "fused_lion: grads, params and exp_avgs must have the same length");
  if (n == 0) return;
  const gpu_bind::OptimizerLists lists = gpu_bind::optimizer_lists("fused_lion", params, grads);
  const std::vector<float*> m = gpu_bind::fp32_state(exp_avgs, "exp_avgs", lists);

  gpu_ops::LionConfig config{};
  config.lr = static_cast<float>(lr);
  config.beta1 = static_cast<float>(beta1);
  config.beta2 = static_cast<float>(beta2);
  config.one_minus_beta1 = static_cast<float>(1.0 - beta1);
  config.one_minus_beta2 = static_cast<float>(1.0 - beta2);
  config.decay = static_cast<float>(1.0 - lr * weight_decay);

  const gpu_bind::DeviceGuard guard(lists.device.index());
  gpu_bind::check_launch(
      gpu_ops::fused_lion(static_cast<int>(n), lists.grads.data(), lists.params.data(), m.data(),
                          lists.sizes.data(), lists.dtype, config, gpu_bind::current_stream(lists.device)),
      "fused_lion");
}

}  // namespace

#ifdef IMAGEGEN_STABLE_ABI
// The argument names are the pybind11 build's, so keyword calls work on either build.
OP_LIBRARY(m) {
  m.def(
      "lion(Tensor[] grads, Tensor(a!)[] params, Tensor(b!)[] exp_avgs, float lr, float beta1, float beta2, "
      "float weight_decay) -> ()");
  m.def("has_bf16() -> bool");
}
OP_LIBRARY_IMPL(CUDA, m) { m.impl("lion", OP_BOX(&lion)); }
// No tensor argument to dispatch on: one kernel for every backend.
OP_LIBRARY_IMPL(CompositeExplicitAutograd, m) { m.impl("has_bf16", OP_BOX(&gpu_ops::has_bf16)); }
OP_PYTHON_MODULE("Multi-tensor Lion (fp32 state and math; fp32, fp16 or bf16 params): torch.ops")
#else
PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.doc() = "Multi-tensor Lion (fp32 state and math; fp32, fp16 or bf16 params)";
  m.def("lion", &lion, "One Lion step over lists of tensors, in place", py::arg("grads"), py::arg("params"),
        py::arg("exp_avgs"), py::arg("lr"), py::arg("beta1"), py::arg("beta2"), py::arg("weight_decay"));
  m.def("has_bf16", &gpu_ops::has_bf16, "Whether this build has bf16 kernels");
}
#endif
