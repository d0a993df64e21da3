// acme_rmsnorm: RMSNorm forward on CPU tensors, y = x / sqrt(mean(x^2) + eps) * weight over
// the last dimension.
//
// Plain C++ the compiler vectorizes (`omp simd`), with OpenMP threads over rows: no intrinsics,
// so the same source builds for x86-64 and arm64, and an image built on one CPU runs on
// another. Half-precision inputs are widened to float for the math (at::opmath_type).
#include <ATen/OpMathType.h>
#include <torch/extension.h>

#include <cmath>
#include <cstdint>

namespace {

// Below this many elements, starting threads costs more than it saves.
constexpr int64_t kParallelElements = 1 << 15;

template <typename T>
void rms_norm_rows(const T* x, const T* weight, T* y, int64_t rows, int64_t cols, double eps) {
  using Acc = at::opmath_type<T>;
#pragma omp parallel for schedule(static) if (rows * cols >= kParallelElements)
  for (int64_t r = 0; r < rows; ++r) {
    const T* xr = x + r * cols;
    T* yr = y + r * cols;
    Acc sum = 0;
#pragma omp simd reduction(+ : sum)
    for (int64_t i = 0; i < cols; ++i) {
      const Acc v = static_cast<Acc>(xr[i]);
      sum += v * v;
    }
    const Acc scale = Acc(1) / std::sqrt(sum / static_cast<Acc>(cols) + static_cast<Acc>(eps));
#pragma omp simd
    for (int64_t i = 0; i < cols; ++i) {
      yr[i] = static_cast<T>(static_cast<Acc>(xr[i]) * scale * static_cast<Acc>(weight[i]));
    }
  }
}

at::Tensor rms_norm(const at::Tensor& x, const at::Tensor& weight, double eps) {
  TORCH_CHECK(x.device().is_cpu() && weight.device().is_cpu(), "acme_rmsnorm: x and weight must be CPU tensors");
  TORCH_CHECK(x.dim() >= 1 && x.is_contiguous(), "acme_rmsnorm: x must be contiguous with at least one dimension");
  const int64_t cols = x.size(-1);
  TORCH_CHECK(weight.dim() == 1 && weight.size(0) == cols && weight.is_contiguous(),
              "acme_rmsnorm: weight must be contiguous of shape [", cols, "], got ", weight.sizes());
  TORCH_CHECK(weight.scalar_type() == x.scalar_type(), "acme_rmsnorm: weight is ", weight.scalar_type(),
              " but x is ", x.scalar_type());
  at::Tensor y = at::empty_like(x);
  if (x.numel() == 0) return y;
  const int64_t rows = x.numel() / cols;
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, x.scalar_type(), "acme_rmsnorm", [&] {
    rms_norm_rows<scalar_t>(x.data_ptr<scalar_t>(), weight.data_ptr<scalar_t>(), y.data_ptr<scalar_t>(), rows,
                            cols, eps);
  });
  return y;
}

}  // namespace

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.def("rms_norm", &rms_norm, "y = x / sqrt(mean(x^2, -1) + eps) * weight", py::arg("x"), py::arg("weight"),
        py::arg("eps"));
}
