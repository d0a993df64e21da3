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

void cpu_adagrad_run(const AdagradArgs* args, size_t count, int threads) { run_blocks(args, count, threads); }

}  // namespace cpu_optim
