// One CPU optimizer kernel compiled once per instruction set, and the run-time choice among the
// copies. No include guard: each op's .cpp includes it once, inside its anonymous namespace,
// after the op's argument struct and
//     #define CPU_OPTIM_KERNEL "cpu_<op>_impl.h"
// That header defines, in terms of `isa` (one instruction set's primitives, see cpu_simd.h),
//     template <cpu_simd::Dtype kParam, cpu_simd::HalfKind kHalf, cpu_simd::Dtype kState>
//     void step_range(const Args&, int64_t begin, int64_t end);
// kState is fp32, or bf16 for an op that also defines CPU_OPTIM_BF16_STATE (Adam's moments).

namespace kernel_scalar {
namespace isa = cpu_simd::scalar;
#include CPU_OPTIM_KERNEL
}  // namespace kernel_scalar

#if defined(CPU_SIMD_X86)
#pragma GCC push_options
#pragma GCC target("avx2,fma,f16c")
namespace kernel_avx2 {
namespace isa = cpu_simd::avx2;
#include CPU_OPTIM_KERNEL
}  // namespace kernel_avx2
#pragma GCC pop_options

#pragma GCC push_options
#pragma GCC target("avx512f,avx2,fma,f16c")
namespace kernel_avx512 {
namespace isa = cpu_simd::avx512;
#include CPU_OPTIM_KERNEL
}  // namespace kernel_avx512
#pragma GCC pop_options
#elif defined(CPU_SIMD_ARM)
namespace kernel_neon {  // NEON is aarch64's baseline: no target region
namespace isa = cpu_simd::neon;
#include CPU_OPTIM_KERNEL
}  // namespace kernel_neon

#if defined(CPU_SIMD_SVE)
#pragma GCC push_options
#pragma GCC target("+sve")
namespace kernel_sve {
namespace isa = cpu_simd::sve;
#include CPU_OPTIM_KERNEL
}  // namespace kernel_sve
#pragma GCC pop_options
#else
namespace kernel_sve = kernel_neon;  // never picked: detect_level reports no SVE
#endif
#endif

using RangeFn = decltype(&kernel_scalar::step_range<cpu_simd::Dtype::kFloat, cpu_simd::HalfKind::kNone,
                                                      cpu_simd::Dtype::kFloat>);

// The variants of one instruction set and state storage: fp32 params with no copy, a bf16 copy
// or an fp16 copy, then bf16 and fp16 params (updated in place; the binding refuses a half copy
// of them).
#define CPU_OPTIM_VARIANTS(ns, state)                                                        \
  {                                                                                          \
    ns::step_range<cpu_simd::Dtype::kFloat, cpu_simd::HalfKind::kNone, state>,               \
        ns::step_range<cpu_simd::Dtype::kFloat, cpu_simd::HalfKind::kBF16, state>,           \
        ns::step_range<cpu_simd::Dtype::kFloat, cpu_simd::HalfKind::kFP16, state>,           \
        ns::step_range<cpu_simd::Dtype::kBFloat16, cpu_simd::HalfKind::kNone, state>,        \
        ns::step_range<cpu_simd::Dtype::kHalf, cpu_simd::HalfKind::kNone, state>             \
  }
// One row per cpu_simd::Level, in its order.
#if defined(CPU_SIMD_X86)
#define CPU_OPTIM_TABLE(state)                                                                      \
  {                                                                                                 \
    CPU_OPTIM_VARIANTS(kernel_scalar, state), CPU_OPTIM_VARIANTS(kernel_avx2, state),              \
        CPU_OPTIM_VARIANTS(kernel_avx512, state)                                                    \
  }
#elif defined(CPU_SIMD_ARM)
#define CPU_OPTIM_TABLE(state)                                                                      \
  {                                                                                                 \
    CPU_OPTIM_VARIANTS(kernel_scalar, state), CPU_OPTIM_VARIANTS(kernel_neon, state),              \
        CPU_OPTIM_VARIANTS(kernel_sve, state)                                                       \
  }
#else
#define CPU_OPTIM_TABLE(state) \
  { CPU_OPTIM_VARIANTS(kernel_scalar, state) }
#endif

// The copy for this instruction set, param storage, half-precision output and state storage
// (bf16 state only where the op defines CPU_OPTIM_BF16_STATE; its binding checks that).
inline RangeFn pick(cpu_simd::Level level, cpu_simd::Dtype param, cpu_simd::HalfKind half,
                    cpu_simd::Dtype state = cpu_simd::Dtype::kFloat) {
  static constexpr RangeFn fp32_state[cpu_simd::kLevelCount][5] = CPU_OPTIM_TABLE(cpu_simd::Dtype::kFloat);
  const int variant = param == cpu_simd::Dtype::kFloat ? static_cast<int>(half) : 2 + static_cast<int>(param);
#ifdef CPU_OPTIM_BF16_STATE
  static constexpr RangeFn bf16_state[cpu_simd::kLevelCount][5] = CPU_OPTIM_TABLE(cpu_simd::Dtype::kBFloat16);
  if (state == cpu_simd::Dtype::kBFloat16) return bf16_state[static_cast<int>(level)][variant];
#else
  (void)state;
#endif
  return fp32_state[static_cast<int>(level)][variant];
}

// One step over each block of args[0, count) (its [0, n)), every block by the copy for its storage
// types, all on `threads` threads together (an op's cpu_<op>_run).
template <class Args>
void run_blocks(const Args* args, size_t count, int threads) {
  const cpu_simd::Level level = cpu_simd::active_level();
  cpu_simd::parallel_for_list(
      count, [&](size_t i) { return args[i].n; }, threads, [&](size_t i, int64_t begin, int64_t end) {
        const Args& a = args[i];
#ifdef CPU_OPTIM_BF16_STATE
        pick(level, a.param, a.half_kind, a.state)(a, begin, end);
#else
        pick(level, a.param, a.half_kind)(a, begin, end);
#endif
      });
}

#undef CPU_OPTIM_TABLE
#undef CPU_OPTIM_VARIANTS
