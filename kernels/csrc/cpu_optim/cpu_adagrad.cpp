// Adagrad step on fp32 CPU tensors, in place: SIMD (run-time choice of AVX-512, AVX2 or
// scalar), OpenMP across cores, optional bf16/fp16 copy of the new params in the same pass.
#include "cpu_optim_binding.h"
#include "cpu_simd.h"

namespace {

struct AdagradArgs {
  float* p;
  const float* g;
  float* sum;
  uint16_t* half;
  float l2, eps, clr;
};

namespace adagrad_scalar {
namespace isa = cpu_simd::scalar;
#include "cpu_adagrad_impl.h"
}  // namespace adagrad_scalar

#pragma GCC push_options
#pragma GCC target("avx2,fma,f16c")
namespace adagrad_avx2 {
namespace isa = cpu_simd::avx2;
#include "cpu_adagrad_impl.h"
}  // namespace adagrad_avx2
#pragma GCC pop_options

#pragma GCC push_options
#pragma GCC target("avx512f,avx2,fma,f16c")
namespace adagrad_avx512 {
namespace isa = cpu_simd::avx512;
#include "cpu_adagrad_impl.h"
}  // namespace adagrad_avx512
#pragma GCC pop_options

using RangeFn = void (*)(const AdagradArgs&, int64_t, int64_t);
using cpu_simd::HalfKind;

RangeFn pick(cpu_simd::Level level, HalfKind half) {
  static constexpr RangeFn table[3][3] = {
      {adagrad_scalar::adagrad_range<HalfKind::kNone>, adagrad_scalar::adagrad_range<HalfKind::kBF16>,
       adagrad_scalar::adagrad_range<HalfKind::kFP16>},
      {adagrad_avx2::adagrad_range<HalfKind::kNone>, adagrad_avx2::adagrad_range<HalfKind::kBF16>,
       adagrad_avx2::adagrad_range<HalfKind::kFP16>},
      {adagrad_avx512::adagrad_range<HalfKind::kNone>, adagrad_avx512::adagrad_range<HalfKind::kBF16>,
       adagrad_avx512::adagrad_range<HalfKind::kFP16>},
  };
  return table[static_cast<int>(level)][static_cast<int>(half)];
}

void adagrad_step(const at::Tensor& params, const at::Tensor& grads, const at::Tensor& state_sum,
                  const std::optional<at::Tensor>& half, int64_t step, double lr, double lr_decay,
                  double eps, double weight_decay) {
  constexpr const char* op = "cpu_adagrad";
  cpu_optim::check_fp32(params, op, "params");
  cpu_optim::check_like(params, grads, op, "grads");
  cpu_optim::check_like(params, state_sum, op, "state_sum");
  const HalfKind half_kind = cpu_optim::check_half(half, params, op);
  TORCH_CHECK_VALUE(step >= 1, op, ": step must be >= 1 (the count including this step), got ", step);

  AdagradArgs args{};
  args.p = params.data_ptr<float>();
  args.g = grads.data_ptr<float>();
  args.sum = state_sum.data_ptr<float>();
  args.half = cpu_optim::half_data(half, half_kind);
  args.l2 = static_cast<float>(weight_decay);
  args.eps = static_cast<float>(eps);
  args.clr = static_cast<float>(lr / (1.0 + static_cast<double>(step - 1) * lr_decay));

  const RangeFn fn = pick(cpu_simd::active_level(), half_kind);
  const int64_t n = params.numel();
  const int threads = cpu_optim::num_threads();
  pybind11::gil_scoped_release no_gil;  // other Python threads run while we update
  cpu_simd::parallel_for(n, threads, [&](int64_t begin, int64_t end) { fn(args, begin, end); });
}

}  // namespace

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.doc() = "Adagrad step on fp32 CPU tensors (SIMD + OpenMP)";
  m.def("adagrad_step", &adagrad_step, pybind11::arg("params"), pybind11::arg("grads"),
        pybind11::arg("state_sum"), pybind11::arg("half"), pybind11::arg("step"), pybind11::arg("lr"),
        pybind11::arg("lr_decay"), pybind11::arg("eps"), pybind11::arg("weight_decay"),
        "One Adagrad step (torch.optim.Adagrad semantics), in place on params and state_sum. "
        "step counts this step (1 on the first). half, when given (bf16 or fp16, same numel), "
        "receives params.to(half.dtype).");
  cpu_optim::bind_simd_controls(m);
}
