// One CPU optimizer kernel compiled once per instruction set, and the run-time choice among the
// copies. No include guard: each op's .cpp includes it once, inside its anonymous namespace,
// after the op's argument struct and
//     #define CPU_OPTIM_KERNEL "cpu_<op>_impl.h"
// That header defines, in terms of `isa` (one instruction set's primitives, see cpu_simd.h),
//     template <cpu_simd::HalfKind kHalf> void step_range(const Args&, int64_t begin, int64_t end);

namespace kernel_scalar {
namespace isa = cpu_simd::scalar;
#include CPU_OPTIM_KERNEL
}  // namespace kernel_scalar

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

using RangeFn = decltype(&kernel_scalar::step_range<cpu_simd::HalfKind::kNone>);

// The copy for this instruction set and half-precision output (rows: Level; columns: HalfKind).
inline RangeFn pick(cpu_simd::Level level, cpu_simd::HalfKind half) {
  using cpu_simd::HalfKind;
  static constexpr RangeFn table[3][3] = {
      {kernel_scalar::step_range<HalfKind::kNone>, kernel_scalar::step_range<HalfKind::kBF16>,
       kernel_scalar::step_range<HalfKind::kFP16>},
      {kernel_avx2::step_range<HalfKind::kNone>, kernel_avx2::step_range<HalfKind::kBF16>,
       kernel_avx2::step_range<HalfKind::kFP16>},
      {kernel_avx512::step_range<HalfKind::kNone>, kernel_avx512::step_range<HalfKind::kBF16>,
       kernel_avx512::step_range<HalfKind::kFP16>},
  };
  return table[static_cast<int>(level)][static_cast<int>(half)];
}
