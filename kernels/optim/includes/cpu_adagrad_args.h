// The argument block of the cpu_adagrad kernels and their entry point: what the binding
// (csrc/cpu_adagrad.cpp, torch) and the kernels (csrc/cpu_adagrad_kernel.cpp, torch-free)
// share. The kernels sit in their own translation unit so that an edit to the math recompiles
// only that small one, not the binding that parses torch's headers.
#pragma once

#include <cstddef>
#include <cstdint>

#include "cpu_simd.h"

namespace cpu_optim {

struct AdagradArgs {
  void* p;        // params, stored as the step_range's kParam
  const void* g;  // grads, stored like params
  float* sum;
  uint16_t* half;
  float l2, eps, clr;
  // What the step covers and which kernel copy runs it.
  int64_t n;
  cpu_simd::Dtype param;
  cpu_simd::HalfKind half_kind;
};

// One step over each of args[0, count) (its [0, n)) on `threads` threads together, with the
// code path the CPU (or a forced level) selects for its storage types.
void cpu_adagrad_run(const AdagradArgs* args, size_t count, int threads);

}  // namespace cpu_optim
