// One binding source, two ABIs. An op's binding is written once against the names here and
// compiled either way:
//
// * IMAGEGEN_STABLE_ABI defined (op_builder sets it, with TORCH_TARGET_VERSION and
//   Py_LIMITED_API, for a builder that declares a stable target and a torch that has one): torch's
//   stable C++ API over its C shim, ops registered in a per-build namespace of torch.ops, and a
//   limited-API Python module. One module then loads on every torch from the target on and every
//   CPython from 3.10 on.
// * otherwise: ATen and pybind11, a module per torch release, as before torch had a stable ABI.
//
// Only what both have is offered: an op that needs more is not stable yet.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "shape_text.h"

#ifdef IMAGEGEN_STABLE_ABI

#ifndef IMAGEGEN_OP_NAMESPACE
#error "IMAGEGEN_OP_NAMESPACE names the build's torch.ops namespace (op_builder defines it)"
#endif

#include <Python.h>
#include <torch/csrc/stable/library.h>
#include <torch/csrc/stable/ops.h>
#include <torch/csrc/stable/tensor.h>
#include <torch/headeronly/core/ScalarType.h>
#include <torch/headeronly/util/Exception.h>

#include "op_box.h"

namespace op_abi {
using Tensor = torch::stable::Tensor;
using ScalarType = torch::headeronly::ScalarType;
inline int num_threads() { return static_cast<int>(torch::stable::get_num_threads()); }
}  // namespace op_abi

// Both raise RuntimeError through torch.ops: the stable ABI carries no other exception type, so
// a front that promises ValueError checks the value itself first.
#define OP_CHECK(cond, ...) STD_TORCH_CHECK(cond, __VA_ARGS__)
#define OP_CHECK_VALUE(cond, ...) STD_TORCH_CHECK(cond, __VA_ARGS__)

// The ops' schemas and their kernels, in the build's own namespace: two builds of one op (an
// image's and a JIT build, say) may then share a process.
// The namespace is passed through one macro more, so that it arrives expanded: torch 2.10's
// STABLE_TORCH_LIBRARY stringizes its argument with a bare #ns, which would name the namespace
// "IMAGEGEN_OP_NAMESPACE" itself (its schemas then defined there, its kernels in the real one:
// ops with no schema). 2.13's expands it first (C10_STRINGIZE); the indirection serves both.
#define OP_LIBRARY_IN(ns, m) STABLE_TORCH_LIBRARY(ns, m)
#define OP_LIBRARY_IMPL_IN(ns, key, m) STABLE_TORCH_LIBRARY_IMPL(ns, key, m)
#define OP_LIBRARY(m) OP_LIBRARY_IN(IMAGEGEN_OP_NAMESPACE, m)
#define OP_LIBRARY_IMPL(key, m) OP_LIBRARY_IMPL_IN(IMAGEGEN_OP_NAMESPACE, key, m)
#define OP_BOX(fn) \
  (&op_abi::detail::GilBoxer<std::remove_pointer_t<std::remove_reference_t<decltype(fn)>>, (fn)>::boxed_fn)

#define OP_STRINGIZE_(x) #x
#define OP_STRINGIZE(x) OP_STRINGIZE_(x)
#define OP_PYINIT_(name) PyInit_##name
#define OP_PYINIT(name) OP_PYINIT_(name)

// The Python module is only a handle: importing it runs the registrations above, and its
// op_namespace attribute says where torch.ops holds them (the loader reads it).
#define OP_PYTHON_MODULE(doc)                                                                  \
  extern "C" PyMODINIT_FUNC OP_PYINIT(TORCH_EXTENSION_NAME)(void) {                           \
    static PyModuleDef definition = {PyModuleDef_HEAD_INIT, OP_STRINGIZE(TORCH_EXTENSION_NAME), \
                                     doc,                    -1,                                \
                                     nullptr,                nullptr,                           \
                                     nullptr,                nullptr,                           \
                                     nullptr};                                                  \
    PyObject* module = PyModule_Create(&definition);                                           \
    if (module != nullptr &&                                                                   \
        PyModule_AddStringConstant(module, "op_namespace", OP_STRINGIZE(IMAGEGEN_OP_NAMESPACE)) < 0) { \
      Py_DECREF(module);                                                                       \
      return nullptr;                                                                          \
    }                                                                                          \
    return module;                                                                             \
  }

#else  // ATen and pybind11

#include <ATen/Parallel.h>
#include <ATen/core/Tensor.h>
#include <c10/util/Exception.h>

namespace op_abi {
using Tensor = at::Tensor;
using ScalarType = at::ScalarType;
inline int num_threads() { return at::get_num_threads(); }
}  // namespace op_abi

#define OP_CHECK(cond, ...) TORCH_CHECK(cond, __VA_ARGS__)
#define OP_CHECK_VALUE(cond, ...) TORCH_CHECK_VALUE(cond, __VA_ARGS__)

#endif

namespace op_abi {

// The names users know dtypes by, for messages (neither ABI's own printing is in both).
inline std::string dtype_name(ScalarType type) {
  switch (type) {
    case ScalarType::Float:
      return "float32";
    case ScalarType::BFloat16:
      return "bfloat16";
    case ScalarType::Half:
      return "float16";
    case ScalarType::Double:
      return "float64";
    case ScalarType::Byte:
      return "uint8";
    case ScalarType::Char:
      return "int8";
    case ScalarType::Int:
      return "int32";
    case ScalarType::Long:
      return "int64";
    case ScalarType::Bool:
      return "bool";
    default:
      return "dtype #" + std::to_string(static_cast<int>(type));
  }
}

// Where a tensor lives, for messages: "cpu", "cuda:1".
inline std::string device_text(const Tensor& t) {
  if (t.is_cpu()) return "cpu";
  if (t.is_cuda()) return "cuda:" + std::to_string(static_cast<int>(t.get_device()));
  return "another device";
}

// Whether two tensors have one shape (neither ABI's sizes type compares with the other's ==).
inline bool same_shape(const Tensor& a, const Tensor& b) {
  const auto left = a.sizes();
  const auto right = b.sizes();
  if (left.size() != right.size()) return false;
  for (size_t i = 0; i < left.size(); ++i) {
    if (left[i] != right[i]) return false;
  }
  return true;
}

}  // namespace op_abi
