// Helpers for the torch bindings of the GPU ops: tensor checks, dtype mapping,
// the current stream, launch-error reporting, and the checked tensor lists of the
// multi-tensor optimizers. Host-only (included by .cpp).
//
// Written once for both ABIs (op_abi.h): a binding ported to the stable ABI and one still on
// ATen + pybind11 call the same helpers with their own Tensor.
//
// The ATen build uses c10/cuda headers only: ATen/cuda/CUDAContext.h would pull in cuBLAS and
// cuSPARSE headers that minimal CUDA toolkits lack. torch's hipify maps these
// names to their ROCm equivalents when the op is built for ROCm.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "gpu_runtime.h"
#include "op_abi.h"
#include "op_tensors.h"  // the new tensors an op returns, for both ABIs

#ifdef IMAGEGEN_STABLE_ABI
// The CUDA functions of the C shim (the current stream) are declared under USE_CUDA, which
// op_builder defines for a stable CUDA build.
#include <torch/csrc/inductor/aoti_torch/c/shim.h>
#include <torch/csrc/stable/accelerator.h>
#include <torch/csrc/stable/device.h>
#include <torch/csrc/stable/macros.h>
#else
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
// The ops not yet ported take pybind11 and ATen from here.
#include <torch/extension.h>
#endif

#ifdef IMAGEGEN_STABLE_ABI
// Hidden, as torch::stable's own types are (its Device is a field of OptimizerLists): each
// module keeps its own copy of these inline helpers.
HIDDEN_NAMESPACE_BEGIN(gpu_bind)
#else
namespace gpu_bind {
#endif

using op_abi::dtype_name;
using op_abi::ScalarType;
using op_abi::Tensor;

#ifdef IMAGEGEN_STABLE_ABI
using Device = torch::stable::Device;
// The accelerator's guard: sets the CUDA device of a CUDA index, like c10::cuda::CUDAGuard.
using DeviceGuard = torch::stable::accelerator::DeviceGuard;
#else
using Device = at::Device;
using DeviceGuard = c10::cuda::CUDAGuard;
#endif

// Where a device is, for messages: "cpu", "cuda:1" (neither ABI's own printing is in both).
inline std::string device_text(const Device& device) {
  if (device.is_cpu()) return "cpu";
  if (device.is_cuda()) return "cuda:" + std::to_string(static_cast<int>(device.index()));
  return "another device";
}

inline void check_gpu_tensor(const Tensor& t, const char* what) {
  OP_CHECK(t.is_cuda(), what, " must be a CUDA tensor, got one on ", device_text(t.device()));
  OP_CHECK(t.is_contiguous(), what, " must be contiguous");
}

inline void check_same_device(const Tensor& t, const Tensor& ref, const char* what) {
  OP_CHECK(t.device() == ref.device(), what, " is on ", device_text(t.device()), " but expected ",
           device_text(ref.device()));
}

// The launcher dtype of a float tensor; an error for other dtypes, and for bf16
// when this build has no bf16 code (an arch below sm_80 in the op's list).
inline gpu_ops::DType float_dtype(const Tensor& t, const char* what) {
  switch (t.scalar_type()) {
    case ScalarType::Float:
      return gpu_ops::DType::kFloat32;
    case ScalarType::Half:
      return gpu_ops::DType::kFloat16;
    case ScalarType::BFloat16:
      OP_CHECK(gpu_ops::has_bf16(), what,
               " is bfloat16, but this build has no bf16 kernels (its arch list includes an arch "
               "below sm_80)");
      return gpu_ops::DType::kBFloat16;
    default:
      OP_CHECK(false, what, " must be float32, float16 or bfloat16, got ", dtype_name(t.scalar_type()));
      return gpu_ops::DType::kFloat32;  // not reached
  }
}

inline void check_launch(gpuError_t err, const char* op) {
  OP_CHECK(err == gpuSuccess, op, ": kernel launch failed: ", gpuGetErrorString(err));
}

// The stream torch runs on for `device` (a CUDA device): the launches queue behind its work.
inline gpuStream_t current_stream(const Device& device) {
#ifdef IMAGEGEN_STABLE_ABI
  void* stream = nullptr;
  STABLE_TORCH_ERROR_CODE_CHECK(aoti_torch_get_current_cuda_stream(device.index(), &stream));
  return static_cast<gpuStream_t>(stream);
#else
  return c10::cuda::getCurrentCUDAStream(device.index()).stream();
#endif
}

#ifndef IMAGEGEN_STABLE_ABI
// The current device's stream, for the bindings not yet ported (they set the device first).
inline gpuStream_t current_stream() { return c10::cuda::getCurrentCUDAStream().stream(); }
#endif

// Raw pointers of a tensor list, after checking each is a contiguous CUDA tensor
// on `device`, of `dtype` (when given), with `sizes[i]` elements (when given).
inline std::vector<void*> pointers(const std::vector<Tensor>& list, const char* what, const Device& device,
                                   std::optional<ScalarType> dtype, const std::vector<int64_t>* sizes) {
  std::vector<void*> out;
  out.reserve(list.size());
  for (size_t i = 0; i < list.size(); ++i) {
    const Tensor& t = list[i];
    const std::string name = std::string(what) + "[" + std::to_string(i) + "]";
    check_gpu_tensor(t, name.c_str());
    OP_CHECK(t.device() == device, name, " is on ", device_text(t.device()), " but expected ",
             device_text(device));
    if (dtype.has_value()) {
      OP_CHECK(t.scalar_type() == *dtype, name, " must be ", dtype_name(*dtype), ", got ",
               dtype_name(t.scalar_type()));
    }
    if (sizes != nullptr) {
      OP_CHECK(t.numel() == (*sizes)[i], name, " has ", t.numel(), " elements, expected ", (*sizes)[i]);
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
  Device device;
  gpu_ops::DType dtype;
  std::vector<int64_t> sizes;  // params[i].numel()
  std::vector<void*> params, grads;
};

// Callers check first that `params` is not empty (the ops return early on empty lists) and
// that `grads` has as many tensors.
inline OptimizerLists optimizer_lists(const char* op, const std::vector<Tensor>& params,
                                      const std::vector<Tensor>& grads) {
  OP_CHECK(params.size() < (1u << 30), op, ": too many tensors");  // the launchers take an int count
  const Tensor& first = params[0];
  check_gpu_tensor(first, "params[0]");
  const gpu_ops::DType dtype = float_dtype(first, "params");
  std::vector<int64_t> sizes;
  sizes.reserve(params.size());
  for (const Tensor& p : params) sizes.push_back(p.numel());
  const Device device = first.device();
  std::vector<void*> p = pointers(params, "params", device, first.scalar_type(), &sizes);
  std::vector<void*> g = pointers(grads, "grads", device, first.scalar_type(), &sizes);
  return OptimizerLists{device, dtype, std::move(sizes), std::move(p), std::move(g)};
}

// An fp32 optimizer state list (exp_avgs, ...), checked against the params' device and sizes.
inline std::vector<float*> fp32_state(const std::vector<Tensor>& list, const char* what,
                                      const OptimizerLists& lists) {
  return typed<float>(pointers(list, what, lists.device, ScalarType::Float, &lists.sizes));
}

#ifdef IMAGEGEN_STABLE_ABI
HIDDEN_NAMESPACE_END(gpu_bind)
#else
}  // namespace gpu_bind
#endif
