// torch bindings of fused_lion: check the tensor lists, then launch on the current stream.
#include "gpu_bindings.h"
#include "gpu_fused_optim.h"

namespace {

void lion(const std::vector<at::Tensor>& grads, const std::vector<at::Tensor>& params,
          const std::vector<at::Tensor>& exp_avgs, double lr, double beta1, double beta2, double weight_decay) {
  const size_t n = params.size();
  TORCH_CHECK(grads.size() == n && exp_avgs.size() == n,
              "fused_lion: grads, params and exp_avgs must have the same length");
  if (n == 0) return;
  TORCH_CHECK(n < (1u << 30), "fused_lion: too many tensors");
  const at::Tensor& first = params[0];
  gpu_bind::check_gpu_tensor(first, "params[0]");
  const gpu_ops::DType dtype = gpu_bind::float_dtype(first, "params");
  std::vector<int64_t> sizes;
  sizes.reserve(n);
  for (const at::Tensor& p : params) sizes.push_back(p.numel());
  const at::Device device = first.device();
  auto p = gpu_bind::pointers(params, "params", device, first.scalar_type(), &sizes);
  auto g = gpu_bind::pointers(grads, "grads", device, first.scalar_type(), &sizes);
  auto m = gpu_bind::pointers(exp_avgs, "exp_avgs", device, at::kFloat, &sizes);

  gpu_ops::LionConfig config{};
  config.lr = static_cast<float>(lr);
  config.beta1 = static_cast<float>(beta1);
  config.beta2 = static_cast<float>(beta2);
  config.weight_decay = static_cast<float>(weight_decay);

  const c10::cuda::CUDAGuard guard(device);
  gpu_bind::check_launch(gpu_ops::fused_lion(static_cast<int>(n), g.data(), p.data(),
                                             gpu_bind::typed<float>(m).data(), sizes.data(), dtype, config,
                                             gpu_bind::current_stream()),
                         "fused_lion");
}

}  // namespace

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.doc() = "Multi-tensor Lion (fp32 state and math; fp32, fp16 or bf16 params)";
  m.def("lion", &lion, "One Lion step over lists of tensors, in place", py::arg("grads"), py::arg("params"),
        py::arg("exp_avgs"), py::arg("lr"), py::arg("beta1"), py::arg("beta2"), py::arg("weight_decay"));
  m.def("has_bf16", &gpu_ops::has_bf16, "Whether this build has bf16 kernels");
}
