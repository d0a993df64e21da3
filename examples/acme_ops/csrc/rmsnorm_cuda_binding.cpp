// The torch binding of acme_rmsnorm_cuda: check the tensors, allocate the output through
// torch's caching allocator, launch on the current stream of x's device.
//
// c10/cuda headers only: ATen/cuda/CUDAContext.h pulls in cuBLAS headers that minimal CUDA
// toolkits lack.
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <torch/extension.h>

#include "acme_rmsnorm.h"

namespace {

acme::DType dtype_of(const at::Tensor& x) {
  switch (x.scalar_type()) {
    case at::kFloat:
      return acme::DType::kFloat32;
    case at::kHalf:
      return acme::DType::kFloat16;
    case at::kBFloat16:
      TORCH_CHECK(acme::has_bf16(), "acme_rmsnorm_cuda: this build has no bf16 kernels (an arch below sm_80)");
      return acme::DType::kBFloat16;
    default:
      TORCH_CHECK(false, "acme_rmsnorm_cuda: x must be float32, float16 or bfloat16, got ", x.scalar_type());
  }
}

at::Tensor rms_norm(const at::Tensor& x, const at::Tensor& weight, double eps) {
  TORCH_CHECK(x.is_cuda() && weight.is_cuda(), "acme_rmsnorm_cuda: x and weight must be CUDA tensors");
  TORCH_CHECK(x.device() == weight.device(), "acme_rmsnorm_cuda: weight is on ", weight.device(), ", x on ",
              x.device());
  TORCH_CHECK(x.dim() >= 1 && x.is_contiguous(),
              "acme_rmsnorm_cuda: x must be contiguous with at least one dimension");
  const int64_t cols = x.size(-1);
  TORCH_CHECK(weight.dim() == 1 && weight.size(0) == cols && weight.is_contiguous(),
              "acme_rmsnorm_cuda: weight must be contiguous of shape [", cols, "], got ", weight.sizes());
  TORCH_CHECK(weight.scalar_type() == x.scalar_type(), "acme_rmsnorm_cuda: weight is ", weight.scalar_type(),
              " but x is ", x.scalar_type());
  const acme::DType dtype = dtype_of(x);
  const c10::cuda::CUDAGuard guard(x.device());
  at::Tensor y = at::empty_like(x);
  const int64_t rows = cols == 0 ? 0 : x.numel() / cols;
  const cudaError_t err = acme::rms_norm_forward(x.data_ptr(), weight.data_ptr(), y.data_ptr(), rows, cols,
                                                 static_cast<float>(eps), dtype,
                                                 c10::cuda::getCurrentCUDAStream().stream());
  TORCH_CHECK(err == cudaSuccess, "acme_rmsnorm_cuda: kernel launch failed: ", cudaGetErrorString(err));
  return y;
}

}  // namespace

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.def("rms_norm", &rms_norm, "y = x / sqrt(mean(x^2, -1) + eps) * weight", py::arg("x"), py::arg("weight"),
        py::arg("eps"));
  m.def("has_bf16", &acme::has_bf16, "whether this build has bf16 kernels (every arch sm_80 or newer)");
}
