// acme_rmsnorm: RMSNorm forward on CPU tensors, y = x / sqrt(mean(x^2) + eps) * weight over
// the last dimension.
//
// Plain C++ the compiler vectorizes (`omp simd`), with OpenMP threads over rows: no intrinsics,
// so the same source builds for x86-64 and arm64, and an image built on one CPU runs on
// another. Half-precision inputs are widened to float for the math, fp64 stays fp64 (Acc).
//
// The binding is written once against op_abi.h (imagegen's shared headers: the builder names
// op_builder.SHARED_INCLUDE_DIR): built with torch >= 2.10 it is a stable-ABI module that loads
// on every torch from 2.10 on; an older torch builds an ATen + pybind11 module from this source.
// So no ATen here: a switch on the dtype instead of AT_DISPATCH, Acc instead of at::opmath_type.
#include <cmath>
#include <cstdint>

#include "op_abi.h"
#include "op_tensors.h"

#ifndef IMAGEGEN_STABLE_ABI
#include <torch/csrc/utils/pybind.h>
#endif

namespace {

using op_abi::dtype_name;
using op_abi::ScalarType;
using op_abi::Tensor;

// The element types of ScalarType::Half and ScalarType::BFloat16 in either ABI (op_abi.h's
// ScalarType brings them: torch/headeronly/util in a stable build, c10/util otherwise). Each
// converts to float exactly and from float rounding to nearest even, as tensor.to() does.
using Half = c10::Half;
using BFloat16 = c10::BFloat16;

// What a row's sum and scale are computed in: float for fp32, fp16 and bf16, double for fp64.
template <typename T>
struct Acc {
  using type = float;
};
template <>
struct Acc<double> {
  using type = double;
};

// Below this many elements, starting threads costs more than it saves.
constexpr int64_t kParallelElements = 1 << 15;

template <typename T>
void rms_norm_rows(const T* x, const T* weight, T* y, int64_t rows, int64_t cols, double eps) {
  using A = typename Acc<T>::type;
#pragma omp parallel for schedule(static) if (rows * cols >= kParallelElements)
  for (int64_t r = 0; r < rows; ++r) {
    const T* xr = x + r * cols;
    T* yr = y + r * cols;
    A sum = 0;
#pragma omp simd reduction(+ : sum)
    for (int64_t i = 0; i < cols; ++i) {
      const A v = static_cast<A>(xr[i]);
      sum += v * v;
    }
    const A scale = A(1) / std::sqrt(sum / static_cast<A>(cols) + static_cast<A>(eps));
#pragma omp simd
    for (int64_t i = 0; i < cols; ++i) {
      yr[i] = static_cast<T>(static_cast<A>(xr[i]) * scale * static_cast<A>(weight[i]));
    }
  }
}

template <typename T>
void run(const Tensor& x, const Tensor& weight, Tensor& y, int64_t rows, int64_t cols, double eps) {
  rms_norm_rows<T>(x.const_data_ptr<T>(), weight.const_data_ptr<T>(), y.mutable_data_ptr<T>(), rows, cols, eps);
}

// The front checks the weight's shape first (a ValueError it promises) and sends only tensors
// these checks pass; they keep a direct call from reading memory wrongly. A stable module raises
// them as RuntimeError, the one error type torch.ops carries.
Tensor rms_norm(const Tensor& x, const Tensor& weight, double eps) {
  OP_CHECK(x.is_cpu() && weight.is_cpu(), "acme_rmsnorm: x and weight must be CPU tensors, got ",
           op_abi::device_text(x), " and ", op_abi::device_text(weight));
  OP_CHECK(x.dim() >= 1 && x.is_contiguous(), "acme_rmsnorm: x must be contiguous with at least one dimension");
  const int64_t cols = x.size(x.dim() - 1);
  OP_CHECK(weight.dim() == 1 && weight.size(0) == cols && weight.is_contiguous(),
           "acme_rmsnorm: weight must be contiguous of shape [", cols, "], got ", shape_text(weight.sizes()));
  OP_CHECK(weight.scalar_type() == x.scalar_type(), "acme_rmsnorm: weight is ", dtype_name(weight.scalar_type()),
           " but x is ", dtype_name(x.scalar_type()));
  Tensor y = op_abi::empty_like(x);
  if (x.numel() == 0) return y;
  const int64_t rows = x.numel() / cols;
  switch (x.scalar_type()) {
    case ScalarType::Float:
      run<float>(x, weight, y, rows, cols, eps);
      break;
    case ScalarType::Double:
      run<double>(x, weight, y, rows, cols, eps);
      break;
    case ScalarType::Half:
      run<Half>(x, weight, y, rows, cols, eps);
      break;
    case ScalarType::BFloat16:
      run<BFloat16>(x, weight, y, rows, cols, eps);
      break;
    default:
      OP_CHECK(false, "acme_rmsnorm: x must be float32, float64, float16 or bfloat16, got ",
               dtype_name(x.scalar_type()));
  }
  return y;
}

}  // namespace

#ifdef IMAGEGEN_STABLE_ABI
// The schema's argument names are the pybind11 build's, so keyword calls work on either build.
OP_LIBRARY(m) { m.def("rms_norm(Tensor x, Tensor weight, float eps) -> Tensor"); }
OP_LIBRARY_IMPL(CPU, m) { m.impl("rms_norm", OP_BOX(&rms_norm)); }
OP_PYTHON_MODULE("RMSNorm forward on CPU tensors (fp32, fp64, fp16, bf16): torch.ops")
#else
PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.def("rms_norm", &rms_norm, "y = x / sqrt(mean(x^2, -1) + eps) * weight", py::arg("x"), py::arg("weight"),
        py::arg("eps"));
}
#endif
