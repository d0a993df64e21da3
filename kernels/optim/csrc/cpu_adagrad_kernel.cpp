// The Adagrad kernels of cpu_adagrad: compiled once per instruction set (cpu_optim_dispatch.h),
// picked at run time. No torch header here: see cpu_adagrad_args.h.
#include "cpu_adagrad_args.h"
#include "cpu_simd.h"

namespace {

using cpu_optim::AdagradArgs;

#define CPU_OPTIM_KERNEL "cpu_adagrad_impl.h"
#include "cpu_optim_dispatch.h"

}  // namespace

namespace cpu_optim {

void cpu_adagrad_run(const AdagradArgs& args, int64_t n, int threads, cpu_simd::Dtype param,
                  cpu_simd::HalfKind half) {
  const RangeFn fn = pick(cpu_simd::active_level(), param, half);
  cpu_simd::parallel_for(n, threads, [&](int64_t begin, int64_t end) { fn(args, begin, end); });
}

}  // namespace cpu_optim
