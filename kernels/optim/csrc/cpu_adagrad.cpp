// Adagrad step on CPU tensors, in place: SIMD (run-time choice of AVX-512, AVX2 or scalar on
// x86; SVE, NEON or scalar on aarch64), OpenMP across cores. fp32 params, with an optional
// bf16/fp16 copy of the new params in the same pass, or bf16 / fp16 params updated directly;
// fp32 arithmetic and state.
#include "cpu_optim_binding.h"
#include "cpu_adagrad_args.h"

namespace {

using cpu_simd::Dtype;
using cpu_simd::HalfKind;
using op_abi::dtype_name;
using op_abi::ScalarType;
using op_abi::Tensor;

// One tensor's step, checked: the kernel's arguments.
cpu_optim::AdagradArgs adagrad_args(const Tensor& params, const Tensor& grads, const Tensor& state_sum,
                                    const std::optional<Tensor>& half, int64_t step, double lr, double lr_decay,
                                    double eps, double weight_decay) {
  constexpr const char* op = "cpu_adagrad";
  const Dtype dtype = cpu_optim::check_params(params, op);
  cpu_optim::check_like(params, grads, dtype, op, "grads");
  cpu_optim::check_like(params, state_sum, Dtype::kFloat, op, "state_sum");
  const HalfKind half_kind = cpu_optim::check_half(half, params, op);
  OP_CHECK_VALUE(step >= 1, op, ": step must be >= 1 (the count including this step), got ", step);

  cpu_optim::AdagradArgs args{};
  args.p = params.data_ptr();
  args.g = grads.data_ptr();
  args.sum = static_cast<float*>(state_sum.data_ptr());
  args.half = cpu_optim::half_data(half, half_kind);
  args.l2 = static_cast<float>(weight_decay);
  args.eps = static_cast<float>(eps);
  args.clr = static_cast<float>(lr / (1.0 + static_cast<double>(step - 1) * lr_decay));
  args.n = params.numel();
  args.param = dtype;
  args.half_kind = half_kind;
  return args;
}

void adagrad_step(const Tensor& params, const Tensor& grads, const Tensor& state_sum,
                  const std::optional<Tensor>& half, int64_t step, double lr, double lr_decay,
                  double eps, double weight_decay) {
  const cpu_optim::AdagradArgs args =
      adagrad_args(params, grads, state_sum, half, step, lr, lr_decay, eps, weight_decay);
  cpu_optim::run_steps(cpu_optim::cpu_adagrad_run, &args, 1);
}

// adagrad_step over lists (no half copies): one call per param group, every tensor checked
// before any is stepped, then all stepped in one parallel run.
void adagrad_steps(const std::vector<Tensor>& params, const std::vector<Tensor>& grads,
                   const std::vector<Tensor>& state_sum, const std::vector<int64_t>& steps, double lr,
                   double lr_decay, double eps, double weight_decay) {
  cpu_optim::check_list_lengths("cpu_adagrad", params.size(),
                                {{"grads", grads.size()}, {"state_sum", state_sum.size()}, {"steps", steps.size()}});
  std::vector<cpu_optim::AdagradArgs> args;
  args.reserve(params.size());
  for (size_t i = 0; i < params.size(); ++i) {
    args.push_back(
        adagrad_args(params[i], grads[i], state_sum[i], std::nullopt, steps[i], lr, lr_decay, eps, weight_decay));
  }
  cpu_optim::run_steps(cpu_optim::cpu_adagrad_run, args.data(), args.size());
}

}  // namespace

#ifdef IMAGEGEN_STABLE_ABI
OP_LIBRARY(m) {
  m.def(
      "adagrad_step(Tensor(a!) params, Tensor grads, Tensor(b!) state_sum, Tensor(c!)? half, int step, float lr, "
      "float lr_decay, float eps, float weight_decay) -> ()");
  m.def(
      "adagrad_steps(Tensor(a!)[] params, Tensor[] grads, Tensor(b!)[] state_sum, int[] steps, float lr, "
      "float lr_decay, float eps, float weight_decay) -> ()");
  CPU_OPTIM_SIMD_SCHEMAS(m);
}
OP_LIBRARY_IMPL(CPU, m) {
  m.impl("adagrad_step", OP_BOX(&adagrad_step));
  m.impl("adagrad_steps", OP_BOX(&adagrad_steps));
}
OP_LIBRARY_IMPL(CompositeExplicitAutograd, m) { CPU_OPTIM_SIMD_IMPLS(m); }
OP_PYTHON_MODULE("Adagrad step on fp32, bf16 or fp16 CPU tensors (SIMD + OpenMP): torch.ops")
#else
PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.doc() = "Adagrad step on fp32, bf16 or fp16 CPU tensors (SIMD + OpenMP)";
  m.def("adagrad_step", &adagrad_step, pybind11::arg("params"), pybind11::arg("grads"),
        pybind11::arg("state_sum"), pybind11::arg("half"), pybind11::arg("step"), pybind11::arg("lr"),
        pybind11::arg("lr_decay"), pybind11::arg("eps"), pybind11::arg("weight_decay"),
        "One Adagrad step (torch.optim.Adagrad semantics), in place on params and state_sum. "
        "step counts this step (1 on the first). params and grads: float32, bfloat16 or float16 "
        "(one dtype; fp32 arithmetic); state_sum: float32. half, when given for fp32 params (bf16 "
        "or fp16, same numel), receives params.to(half.dtype).");
  m.def("adagrad_steps", &adagrad_steps, pybind11::arg("params"), pybind11::arg("grads"),
        pybind11::arg("state_sum"), pybind11::arg("steps"), pybind11::arg("lr"), pybind11::arg("lr_decay"),
        pybind11::arg("eps"), pybind11::arg("weight_decay"),
        "adagrad_step over lists of tensors (one step count each, no half copies): one call per param group.");
  cpu_optim::bind_simd_controls(m);
}
#endif
