// The argument block of the cpu_lion kernels and their entry point: what the binding
// (csrc/cpu_lion.cpp, torch) and the kernels (csrc/cpu_lion_kernel.cpp, torch-free)
// share. The kernels sit in their own translation unit so that an edit to the math recompiles
// only that small one, not the binding that parses torch's headers.
#pragma once

#include <cstddef>
#include <cstdint>

#include "cpu_simd.h"

namespace cpu_optim {

struct LionArgs {
  void* p;        // params, stored as the step_range's kParam
  const void* g;  // grads, stored like params
  float* m;
  uint16_t* half;
  float beta1, one_minus_beta1, beta2, one_minus_beta2, decay, lr;
  // What the step covers and which kernel copy runs it.
  int64_t n;
  cpu_simd::Dtype param;
  cpu_simd::HalfKind half_kind;
};

// One step over each of args[0, count) (its [0, n)) on `threads` threads together, with the
// code path the CPU (or a forced level) selects for its storage types.
void cpu_lion_run(const LionArgs* args, size_t count, int threads);

}  // namespace cpu_optim
