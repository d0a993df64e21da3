// Lion step on fp32 CPU tensors, in place: SIMD (run-time choice of AVX-512, AVX2 or scalar),
// OpenMP across cores, optional bf16/fp16 copy of the new params in the same pass.
#include "cpu_optim_binding.h"
#include "cpu_simd.h"

namespace {

struct LionArgs {
  float* p;
  const float* g;
  float* m;
  uint16_t* half;
  float beta1, one_minus_beta1, beta2, one_minus_beta2, decay, lr;
};

#define CPU_OPTIM_KERNEL "cpu_lion_impl.h"
#include "cpu_optim_dispatch.h"

using cpu_simd::HalfKind;

void lion_step(const at::Tensor& params, const at::Tensor& grads, const at::Tensor& exp_avg,
               const std::optional<at::Tensor>& half, double lr, double beta1, double beta2,
               double weight_decay) {
  constexpr const char* op = "cpu_lion";
  cpu_optim::check_fp32(params, op, "params");
  cpu_optim::check_like(params, grads, op, "grads");
  cpu_optim::check_like(params, exp_avg, op, "exp_avg");
  const HalfKind half_kind = cpu_optim::check_half(half, params, op);

  // Each scalar rounded to fp32 once, from double: what torch does with a Python float
  // multiplied into an fp32 tensor.
  LionArgs args{};
  args.p = params.data_ptr<float>();
  args.g = grads.data_ptr<float>();
  args.m = exp_avg.data_ptr<float>();
  args.half = cpu_optim::half_data(half, half_kind);
  args.beta1 = static_cast<float>(beta1);
  args.one_minus_beta1 = static_cast<float>(1.0 - beta1);
  args.beta2 = static_cast<float>(beta2);
  args.one_minus_beta2 = static_cast<float>(1.0 - beta2);
  args.decay = static_cast<float>(1.0 - lr * weight_decay);
  args.lr = static_cast<float>(lr);

  cpu_optim::run_parallel(pick(cpu_simd::active_level(), half_kind), args, params.numel());
}

}  // namespace

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.doc() = "Lion step on fp32 CPU tensors (SIMD + OpenMP)";
  m.def("lion_step", &lion_step, pybind11::arg("params"), pybind11::arg("grads"), pybind11::arg("exp_avg"),
        pybind11::arg("half"), pybind11::arg("lr"), pybind11::arg("beta1"), pybind11::arg("beta2"),
        pybind11::arg("weight_decay"),
        "One Lion step, in place on params and exp_avg. half, when given (bf16 or fp16, same "
        "numel), receives params.to(half.dtype).");
  cpu_optim::bind_simd_controls(m);
}
