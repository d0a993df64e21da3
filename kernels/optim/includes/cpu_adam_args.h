// The argument block of the cpu_adam kernels and their entry point: what the binding
// (csrc/cpu_adam.cpp, torch) and the kernels (csrc/cpu_adam_kernel.cpp, torch-free)
// share. The kernels sit in their own translation unit so that an edit to the math recompiles
// only that small one, not the binding that parses torch's headers.
#pragma once

#include <cstddef>
#include <cstdint>

#include "cpu_simd.h"

namespace cpu_optim {

struct AdamArgs {
  void* p;        // params, stored as the step_range's kParam
  const void* g;  // grads, stored like params
  void* m;  // moments, stored as the step_range's kState
  void* v;
  uint16_t* half;
  float l2;     // Adam's L2 coefficient (0 for AdamW)
  float decay;  // AdamW's 1 - lr * wd (1 for Adam)
  float one_minus_beta1, beta2, one_minus_beta2, bc2_sqrt, eps, step_size;
  // What the step covers and which kernel copy runs it.
  int64_t n;
  cpu_simd::Dtype param;
  cpu_simd::HalfKind half_kind;
  cpu_simd::Dtype state;
};

// One step over each of args[0, count) (its [0, n)) on `threads` threads together, with the
// code path the CPU (or a forced level) selects for its storage types.
void cpu_adam_run(const AdamArgs* args, size_t count, int threads);

}  // namespace cpu_optim
