// New tensors for a binding written once for both ABIs (op_abi.h): the outputs and scratch an op
// returns or launches into, allocated through torch's caching allocator either way.
//
// Only what torch 2.10's stable API has (torch::stable::empty_like, new_empty, empty, narrow, zero_), so a
// stable build at target 2.10 compiles; the ATen build does the same through at::.
#pragma once

#include <cstdint>
#include <vector>

#include "op_abi.h"

#ifdef IMAGEGEN_STABLE_ABI
#include <torch/csrc/stable/ops.h>
#else
#include <ATen/ops/empty.h>
#include <ATen/ops/empty_like.h>
#endif

namespace op_abi {

// Shaped, typed and placed as `like`.
inline Tensor empty_like(const Tensor& like) {
#ifdef IMAGEGEN_STABLE_ABI
  return torch::stable::empty_like(like);
#else
  return at::empty_like(like);
#endif
}

// On `like`'s device, of `dtype`, shaped `sizes`.
inline Tensor new_empty(const Tensor& like, const std::vector<int64_t>& sizes, ScalarType dtype) {
#ifdef IMAGEGEN_STABLE_ABI
  return torch::stable::new_empty(like, sizes, dtype);
#else
  return at::empty(sizes, like.options().dtype(dtype));
#endif
}

// On `like`'s device and of its dtype, shaped `sizes`.
inline Tensor new_empty(const Tensor& like, const std::vector<int64_t>& sizes) {
  return new_empty(like, sizes, like.scalar_type());
}

// Uninitialised, on the CPU (an op's empty result when it was given no tensor to place it by).
inline Tensor cpu_empty(const std::vector<int64_t>& sizes, ScalarType dtype) {
#ifdef IMAGEGEN_STABLE_ABI
  return torch::stable::empty(sizes, dtype);
#else
  return at::empty(sizes, at::TensorOptions().dtype(dtype));
#endif
}

// A view of `length` entries of `t` along `dim`, from `start` (`t` by value: a handle, and the
// stable narrow takes a non-const one).
inline Tensor narrow(Tensor t, int64_t dim, int64_t start, int64_t length) {
#ifdef IMAGEGEN_STABLE_ABI
  return torch::stable::narrow(t, dim, start, length);
#else
  return t.narrow(dim, start, length);
#endif
}

// `t` filled with zeros, in place; returns it.
inline Tensor zero_(Tensor& t) {
#ifdef IMAGEGEN_STABLE_ABI
  return torch::stable::zero_(t);
#else
  return t.zero_();
#endif
}

}  // namespace op_abi
