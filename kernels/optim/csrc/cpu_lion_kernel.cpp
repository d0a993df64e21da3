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

void cpu_lion_run(const LionArgs* args, size_t count, int threads) { run_blocks(args, count, threads); }

}  // namespace cpu_optim
