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

namespace lion_scalar {
namespace isa = cpu_simd::scalar;
#include "cpu_lion_impl.h"
}  // namespace lion_scalar

#pragma GCC push_options
#pragma GCC target("avx2,fma,f16c")
namespace lion_avx2 {
namespace isa = cpu_simd::avx2;
#include "cpu_lion_impl.h"
}  // namespace lion_avx2
#pragma GCC pop_options

#pragma GCC push_options
#pragma GCC target("avx512f,avx2,fma,f16c")
namespace lion_avx512 {
namespace isa = cpu_simd::avx512;
#include "cpu_lion_impl.h"
}  // namespace lion_avx512
#pragma GCC pop_options

using RangeFn = void (*)(const LionArgs&, int64_t, int64_t);
using cpu_simd::HalfKind;

RangeFn pick(cpu_simd::Level level, HalfKind half) {
  static constexpr RangeFn table[3][3] = {
      {lion_scalar::lion_range<HalfKind::kNone>, lion_scalar::lion_range<HalfKind::kBF16>,
       lion_scalar::lion_range<HalfKind::kFP16>},
      {lion_avx2::lion_range<HalfKind::kNone>, lion_avx2::lion_range<HalfKind::kBF16>,
       lion_avx2::lion_range<HalfKind::kFP16>},
      {lion_avx512::lion_range<HalfKind::kNone>, lion_avx512::lion_range<HalfKind::kBF16>,
       lion_avx512::lion_range<HalfKind::kFP16>},
  };
  return table[static_cast<int>(level)][static_cast<int>(half)];
}

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

  const RangeFn fn = pick(cpu_simd::active_level(), half_kind);
  const int64_t n = params.numel();
  const int threads = cpu_optim::num_threads();
  pybind11::gil_scoped_release no_gil;  // other Python threads run while we update
  cpu_simd::parallel_for(n, threads, [&](int64_t begin, int64_t end) { fn(args, begin, end); });
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
