// The Lion kernels of cpu_lion: compiled once per instruction set (cpu_optim_dispatch.h),
// picked at run time. No torch header here: see cpu_lion_args.h.
#include "cpu_lion_args.h"
#include "cpu_simd.h"

namespace {

using cpu_optim::LionArgs;

#define CPU_OPTIM_KERNEL "cpu_lion_impl.h"
#include "cpu_optim_dispatch.h"

}  // namespace

namespace cpu_optim {

void cpu_lion_run(const LionArgs* args, size_t count, int threads) {
  const cpu_simd::Level level = cpu_simd::active_level();
  cpu_simd::parallel_for_list(
      count, [&](size_t i) { return args[i].n; }, threads, [&](size_t i, int64_t begin, int64_t end) {
        const LionArgs& a = args[i];
        pick(level, a.param, a.half_kind)(a, begin, end);
      });
}

}  // namespace cpu_optim
