// Adam / AdamW step on CPU tensors, in place: SIMD (run-time choice of AVX-512, AVX2 or scalar
// on x86; SVE, NEON or scalar on aarch64), OpenMP across cores. fp32 params, with an optional
// bf16/fp16 copy of the new params in the same pass, or bf16 / fp16 params updated directly;
// fp32 arithmetic, fp32 or bf16 moments.
#include "cpu_optim_binding.h"
#include "cpu_adam_args.h"

namespace {

using cpu_simd::Dtype;
using cpu_simd::HalfKind;
using op_abi::dtype_name;
using op_abi::ScalarType;
using op_abi::Tensor;

// One tensor's step, checked: the kernel's arguments.
cpu_optim::AdamArgs adam_args(const Tensor& params, const Tensor& grads, const Tensor& exp_avg,
                              const Tensor& exp_avg_sq, const std::optional<Tensor>& half, int64_t step, double lr,
                              double beta1, double beta2, double eps, double weight_decay, bool bias_correction,
                              bool adamw_mode) {
  constexpr const char* op = "cpu_adam";
  const Dtype dtype = cpu_optim::check_params(params, op);
  cpu_optim::check_like(params, grads, dtype, op, "grads");
  // The moments: fp32, or both bf16 (half the state memory, at an accuracy cost).
  OP_CHECK(exp_avg.defined() && (exp_avg.scalar_type() == ScalarType::Float || exp_avg.scalar_type() == ScalarType::BFloat16),
              op, ": exp_avg must be float32 or bfloat16, got ",
              exp_avg.defined() ? dtype_name(exp_avg.scalar_type()) : "None");
  const Dtype state = exp_avg.scalar_type() == ScalarType::BFloat16 ? Dtype::kBFloat16 : Dtype::kFloat;
  cpu_optim::check_like(params, exp_avg, state, op, "exp_avg");
  cpu_optim::check_like(params, exp_avg_sq, state, op, "exp_avg_sq");
  const HalfKind half_kind = cpu_optim::check_half(half, params, op);
  OP_CHECK_VALUE(step >= 1, op, ": step must be >= 1 (the count including this step), got ", step);

  // Scalars in double, then rounded once, as torch.optim.Adam does in Python.
  const double bc1 = bias_correction ? 1.0 - std::pow(beta1, static_cast<double>(step)) : 1.0;
  const double bc2 = bias_correction ? 1.0 - std::pow(beta2, static_cast<double>(step)) : 1.0;
  cpu_optim::AdamArgs args{};
  args.p = params.data_ptr();
  args.g = grads.data_ptr();
  args.m = exp_avg.data_ptr();
  args.v = exp_avg_sq.data_ptr();
  args.half = cpu_optim::half_data(half, half_kind);
  args.l2 = adamw_mode ? 0.0f : static_cast<float>(weight_decay);
  args.decay = adamw_mode ? static_cast<float>(1.0 - lr * weight_decay) : 1.0f;
  args.one_minus_beta1 = static_cast<float>(1.0 - beta1);
  args.beta2 = static_cast<float>(beta2);
  args.one_minus_beta2 = static_cast<float>(1.0 - beta2);
  args.bc2_sqrt = static_cast<float>(std::sqrt(bc2));
  args.eps = static_cast<float>(eps);
  args.step_size = static_cast<float>(lr / bc1);
  args.n = params.numel();
  args.param = dtype;
  args.half_kind = half_kind;
  args.state = state;
  return args;
}

void adam_step(const Tensor& params, const Tensor& grads, const Tensor& exp_avg, const Tensor& exp_avg_sq,
               const std::optional<Tensor>& half, int64_t step, double lr, double beta1, double beta2,
               double eps, double weight_decay, bool bias_correction, bool adamw_mode) {
  const cpu_optim::AdamArgs args = adam_args(params, grads, exp_avg, exp_avg_sq, half, step, lr, beta1, beta2,
                                             eps, weight_decay, bias_correction, adamw_mode);
  cpu_optim::run_steps(cpu_optim::cpu_adam_run, &args, 1);
}

// adam_step over lists (no half copies): one call per param group, every tensor checked before
// any is stepped, then all stepped in one parallel run.
void adam_steps(const std::vector<Tensor>& params, const std::vector<Tensor>& grads,
                const std::vector<Tensor>& exp_avg, const std::vector<Tensor>& exp_avg_sq,
                const std::vector<int64_t>& steps, double lr, double beta1, double beta2, double eps,
                double weight_decay, bool bias_correction, bool adamw_mode) {
  cpu_optim::check_list_lengths("cpu_adam", params.size(),
                                {{"grads", grads.size()}, {"exp_avg", exp_avg.size()},
                                 {"exp_avg_sq", exp_avg_sq.size()}, {"steps", steps.size()}});
  std::vector<cpu_optim::AdamArgs> args;
  args.reserve(params.size());
  for (size_t i = 0; i < params.size(); ++i) {
    args.push_back(adam_args(params[i], grads[i], exp_avg[i], exp_avg_sq[i], std::nullopt, steps[i], lr, beta1,
                             beta2, eps, weight_decay, bias_correction, adamw_mode));
  }
  cpu_optim::run_steps(cpu_optim::cpu_adam_run, args.data(), args.size());
}

}  // namespace

#ifdef IMAGEGEN_STABLE_ABI
OP_LIBRARY(m) {
  m.def(
      "adam_step(Tensor(a!) params, Tensor grads, Tensor(b!) exp_avg, Tensor(c!) exp_avg_sq, Tensor(d!)? half, "
      "int step, float lr, float beta1, float beta2, float eps, float weight_decay, bool bias_correction, "
      "bool adamw_mode) -> ()");
  m.def(
      "adam_steps(Tensor(a!)[] params, Tensor[] grads, Tensor(b!)[] exp_avg, Tensor(c!)[] exp_avg_sq, int[] steps, "
      "float lr, float beta1, float beta2, float eps, float weight_decay, bool bias_correction, bool adamw_mode) -> ()");
  CPU_OPTIM_SIMD_SCHEMAS(m);
}
OP_LIBRARY_IMPL(CPU, m) {
  m.impl("adam_step", OP_BOX(&adam_step));
  m.impl("adam_steps", OP_BOX(&adam_steps));
}
OP_LIBRARY_IMPL(CompositeExplicitAutograd, m) { CPU_OPTIM_SIMD_IMPLS(m); }
OP_PYTHON_MODULE("Adam / AdamW step on fp32, bf16 or fp16 CPU tensors (SIMD + OpenMP): torch.ops")
#else
PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.doc() = "Adam / AdamW step on fp32, bf16 or fp16 CPU tensors (SIMD + OpenMP)";
  m.def("adam_step", &adam_step, pybind11::arg("params"), pybind11::arg("grads"), pybind11::arg("exp_avg"),
        pybind11::arg("exp_avg_sq"), pybind11::arg("half"), pybind11::arg("step"),
        pybind11::arg("lr"), pybind11::arg("beta1"), pybind11::arg("beta2"), pybind11::arg("eps"),
        pybind11::arg("weight_decay"), pybind11::arg("bias_correction"), pybind11::arg("adamw_mode"),
        "One Adam (adamw_mode=False) or AdamW step, in place on params, exp_avg and exp_avg_sq. "
        "step counts this step (1 on the first). params and grads: float32, bfloat16 or float16 "
        "(one dtype; fp32 arithmetic); exp_avg and exp_avg_sq: both float32 or both bfloat16. half, when given for fp32 params (bf16 or "
        "fp16, same numel), receives params.to(half.dtype).");
  m.def("adam_steps", &adam_steps, pybind11::arg("params"), pybind11::arg("grads"), pybind11::arg("exp_avg"),
        pybind11::arg("exp_avg_sq"), pybind11::arg("steps"), pybind11::arg("lr"), pybind11::arg("beta1"),
        pybind11::arg("beta2"), pybind11::arg("eps"), pybind11::arg("weight_decay"),
        pybind11::arg("bias_correction"), pybind11::arg("adamw_mode"),
        "adam_step over lists of tensors (one step count each, no half copies): one call per param group.");
  cpu_optim::bind_simd_controls(m);
}
#endif
