// The Adam / AdamW kernels of cpu_adam: compiled once per instruction set (cpu_optim_dispatch.h),
// picked at run time. No torch header here: see cpu_adam_args.h.
#include "cpu_adam_args.h"
#include "cpu_simd.h"

namespace {

using cpu_optim::AdamArgs;

#define CPU_OPTIM_KERNEL "cpu_adam_impl.h"
#define CPU_OPTIM_BF16_STATE  // the moments may be kept in bf16
#include "cpu_optim_dispatch.h"

}  // namespace

namespace cpu_optim {

void cpu_adam_run(const AdamArgs* args, size_t count, int threads) { run_blocks(args, count, threads); }

}  // namespace cpu_optim
