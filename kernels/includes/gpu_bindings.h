// Helpers for the torch bindings of the GPU ops: tensor checks, dtype mapping,
// the current stream, launch-error reporting, and the checked tensor lists of the
// multi-tensor optimizers. Host-only (included by .cpp).
//
// Uses c10/cuda headers only: ATen/cuda/CUDAContext.h would pull in cuBLAS and
// cuSPARSE headers that minimal CUDA toolkits lack. torch's hipify maps these
// names to their ROCm equivalents when the op is built for ROCm.
#pragma once

#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <torch/extension.h>

#include <string>
#include <utility>
#include <vector>

#include "gpu_runtime.h"

namespace gpu_bind {

inline void check_gpu_tensor(const at::Tensor& t, const char* what) {
  TORCH_CHECK(t.is_cuda(), what, " must be a CUDA tensor, got one on ", t.device());
  TORCH_CHECK(t.is_contiguous(), what, " must be contiguous");
}

inline void check_same_device(const at::Tensor& t, const at::Tensor& ref, const char* what) {
  TORCH_CHECK(t.device() == ref.device(), what, " is on ", t.device(), " but expected ", ref.device());
}

// The launcher dtype of a float tensor; an error for other dtypes, and for bf16
// when this build has no bf16 code (an arch below sm_80 in the op's list).
inline gpu_ops::DType float_dtype(const at::Tensor& t, const char* what) {
  switch (t.scalar_type()) {
    case at::kFloat:
      return gpu_ops::DType::kFloat32;
    case at::kHalf:
      return gpu_ops::DType::kFloat16;
    case at::kBFloat16:
      TORCH_CHECK(gpu_ops::has_bf16(), what,
                  " is bfloat16, but this build has no bf16 kernels (its arch list includes an arch "
                  "below sm_80)");
      return gpu_ops::DType::kBFloat16;
    default:
      TORCH_CHECK(false, what, " must be float32, float16 or bfloat16, got ", t.scalar_type());
  }
}

inline void check_launch(gpuError_t err, const char* op) {
  TORCH_CHECK(err == gpuSuccess, op, ": kernel launch failed: ", gpuGetErrorString(err));
}

inline gpuStream_t current_stream() { return c10::cuda::getCurrentCUDAStream().stream(); }

// Raw pointers of a tensor list, after checking each is a contiguous CUDA tensor
// on `device`, of `dtype` (when given), with `sizes[i]` elements (when given).
inline std::vector<void*> pointers(const std::vector<at::Tensor>& list, const char* what,
                                   const at::Device& device, c10::optional<at::ScalarType> dtype,
                                   const std::vector<int64_t>* sizes) {
  std::vector<void*> out;
  out.reserve(list.size());
  for (size_t i = 0; i < list.size(); ++i) {
    const at::Tensor& t = list[i];
    const std::string name = std::string(what) + "[" + std::to_string(i) + "]";
    check_gpu_tensor(t, name.c_str());
    TORCH_CHECK(t.device() == device, name, " is on ", t.device(), " but expected ", device);
    if (dtype.has_value()) {
      TORCH_CHECK(t.scalar_type() == *dtype, name, " must be ", *dtype, ", got ", t.scalar_type());
    }
    if (sizes != nullptr) {
      TORCH_CHECK(t.numel() == (*sizes)[i], name, " has ", t.numel(), " elements, expected ", (*sizes)[i]);
    }
    out.push_back(t.data_ptr());
  }
  return out;
}

template <typename T>
std::vector<T*> typed(const std::vector<void*>& raw) {
  std::vector<T*> out;
  out.reserve(raw.size());
  for (void* p : raw) out.push_back(static_cast<T*>(p));
  return out;
}

// The params and grads of a multi-tensor optimizer step, checked: contiguous CUDA tensors of
// one float dtype on one device, grads[i] with as many elements as params[i].
struct OptimizerLists {
  at::Device device;
  gpu_ops::DType dtype;
  std::vector<int64_t> sizes;  // params[i].numel()
  std::vector<void*> params, grads;
};

// Callers check first that `params` is not empty (the ops return early on empty lists) and
// that `grads` has as many tensors.
inline OptimizerLists optimizer_lists(const char* op, const std::vector<at::Tensor>& params,
                                      const std::vector<at::Tensor>& grads) {
  TORCH_CHECK(params.size() < (1u << 30), op, ": too many tensors");  // the launchers take an int count
  const at::Tensor& first = params[0];
  check_gpu_tensor(first, "params[0]");
  const gpu_ops::DType dtype = float_dtype(first, "params");
  std::vector<int64_t> sizes;
  sizes.reserve(params.size());
  for (const at::Tensor& p : params) sizes.push_back(p.numel());
  const at::Device device = first.device();
  std::vector<void*> p = pointers(params, "params", device, first.scalar_type(), &sizes);
  std::vector<void*> g = pointers(grads, "grads", device, first.scalar_type(), &sizes);
  return OptimizerLists{device, dtype, std::move(sizes), std::move(p), std::move(g)};
}

// An fp32 optimizer state list (exp_avgs, ...), checked against the params' device and sizes.
inline std::vector<float*> fp32_state(const std::vector<at::Tensor>& list, const char* what,
                                      const OptimizerLists& lists) {
  return typed<float>(pointers(list, what, lists.device, at::kFloat, &lists.sizes));
}

}  // namespace gpu_bind
