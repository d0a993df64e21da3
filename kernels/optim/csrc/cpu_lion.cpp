// Lion step on CPU tensors, in place: SIMD (run-time choice of AVX-512, AVX2 or scalar on x86;
// SVE, NEON or scalar on aarch64), OpenMP across cores. fp32 params, with an optional bf16/fp16
// copy of the new params in the same pass, or bf16 / fp16 params updated directly; fp32
// arithmetic and momentum.
#include "cpu_optim_binding.h"
#include "cpu_lion_args.h"

namespace {

using cpu_simd::Dtype;
using cpu_simd::HalfKind;
using op_abi::dtype_name;
using op_abi::ScalarType;
using op_abi::Tensor;

// One tensor's step, checked: the kernel's arguments.
cpu_optim::LionArgs lion_args(const Tensor& params, const Tensor& grads, const Tensor& exp_avg,
                              const std::optional<Tensor>& half, double lr, double beta1, double beta2,
                              double weight_decay) {
  constexpr const char* op = "cpu_lion";
  const Dtype dtype = cpu_optim::check_params(params, op);
  cpu_optim::check_like(params, grads, dtype, op, "grads");
  cpu_optim::check_like(params, exp_avg, Dtype::kFloat, op, "exp_avg");
  const HalfKind half_kind = cpu_optim::check_half(half, params, op);

  // Each scalar rounded to fp32 once, from double: what torch does with a Python float
  // multiplied into an fp32 tensor.
  cpu_optim::LionArgs args{};
  args.p = params.data_ptr();
  args.g = grads.data_ptr();
  args.m = static_cast<float*>(exp_avg.data_ptr());
  args.half = cpu_optim::half_data(half, half_kind);
  args.beta1 = static_cast<float>(beta1);
  args.one_minus_beta1 = static_cast<float>(1.0 - beta1);
  args.beta2 = static_cast<float>(beta2);
  args.one_minus_beta2 = static_cast<float>(1.0 - beta2);
  args.decay = static_cast<float>(1.0 - lr * weight_decay);
  args.lr = static_cast<float>(lr);
  args.n = params.numel();
  args.param = dtype;
  args.half_kind = half_kind;
  return args;
}

void lion_step(const Tensor& params, const Tensor& grads, const Tensor& exp_avg,
               const std::optional<Tensor>& half, double lr, double beta1, double beta2,
               double weight_decay) {
  const cpu_optim::LionArgs args = lion_args(params, grads, exp_avg, half, lr, beta1, beta2, weight_decay);
  cpu_optim::run_steps(cpu_optim::cpu_lion_run, &args, 1);
}

// lion_step over lists (no half copies): one call per param group, every tensor checked before
// any is stepped, then all stepped in one parallel run.
void lion_steps(const std::vector<Tensor>& params, const std::vector<Tensor>& grads,
                const std::vector<Tensor>& exp_avg, double lr, double beta1, double beta2, double weight_decay) {
  cpu_optim::check_list_lengths("cpu_lion", params.size(), {{"grads", grads.size()}, {"exp_avg", exp_avg.size()}});
  std::vector<cpu_optim::LionArgs> args;
  args.reserve(params.size());
  for (size_t i = 0; i < params.size(); ++i) {
    args.push_back(lion_args(params[i], grads[i], exp_avg[i], std::nullopt, lr, beta1, beta2, weight_decay));
  }
  cpu_optim::run_steps(cpu_optim::cpu_lion_run, args.data(), args.size());
}

}  // namespace

#ifdef IMAGEGEN_STABLE_ABI
OP_LIBRARY(m) {
  m.def(
      "lion_step(Tensor(a!) params, Tensor grads, Tensor(b!) exp_avg, Tensor(c!)? half, float lr, float beta1, "
      "float beta2, float weight_decay) -> ()");
  m.def(
      "lion_steps(Tensor(a!)[] params, Tensor[] grads, Tensor(b!)[] exp_avg, float lr, float beta1, float beta2, "
      "float weight_decay) -> ()");
  CPU_OPTIM_SIMD_SCHEMAS(m);
}
OP_LIBRARY_IMPL(CPU, m) {
  m.impl("lion_step", OP_BOX(&lion_step));
  m.impl("lion_steps", OP_BOX(&lion_steps));
}
OP_LIBRARY_IMPL(CompositeExplicitAutograd, m) { CPU_OPTIM_SIMD_IMPLS(m); }
OP_PYTHON_MODULE("Lion step on fp32, bf16 or fp16 CPU tensors (SIMD + OpenMP): torch.ops")
#else
PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.doc() = "Lion step on fp32, bf16 or fp16 CPU tensors (SIMD + OpenMP)";
  m.def("lion_step", &lion_step, pybind11::arg("params"), pybind11::arg("grads"), pybind11::arg("exp_avg"),
        pybind11::arg("half"), pybind11::arg("lr"), pybind11::arg("beta1"), pybind11::arg("beta2"),
        pybind11::arg("weight_decay"),
        "One Lion step, in place on params and exp_avg. params and grads: float32, bfloat16 or "
        "float16 (one dtype; fp32 arithmetic); exp_avg: float32. half, when given for fp32 params "
        "(bf16 or fp16, same numel), receives params.to(half.dtype).");
  m.def("lion_steps", &lion_steps, pybind11::arg("params"), pybind11::arg("grads"), pybind11::arg("exp_avg"),
        pybind11::arg("lr"), pybind11::arg("beta1"), pybind11::arg("beta2"), pybind11::arg("weight_decay"),
        "lion_step over lists of tensors (no half copies): one call per param group.");
  cpu_optim::bind_simd_controls(m);
}
#endif
