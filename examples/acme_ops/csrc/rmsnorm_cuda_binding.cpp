// The torch binding of acme_rmsnorm_cuda: check the tensors, allocate the output through
// torch's caching allocator, launch on the current stream of x's device.
//
// Written once against imagegen's shared headers (the builder names
// op_builder.SHARED_INCLUDE_DIR): op_abi.h for the tensor type and the checks, gpu_bindings.h for
// the device guard and the current stream. Built with torch >= 2.10 for CUDA it is a stable-ABI
// module that loads on every torch from 2.10 on with the same CUDA major; an older torch, or
// ROCm, builds an ATen + pybind11 module from this source. The device code (rmsnorm_cuda.cu)
// sees neither: it takes raw pointers.
#include "acme_rmsnorm.h"
#include "gpu_bindings.h"

namespace {

using op_abi::dtype_name;
using op_abi::ScalarType;
using op_abi::Tensor;

acme::DType dtype_of(const Tensor& x) {
  switch (x.scalar_type()) {
    case ScalarType::Float:
      return acme::DType::kFloat32;
    case ScalarType::Half:
      return acme::DType::kFloat16;
    case ScalarType::BFloat16:
      OP_CHECK(acme::has_bf16(), "acme_rmsnorm_cuda: this build has no bf16 kernels (an arch below sm_80)");
      return acme::DType::kBFloat16;
    default:
      OP_CHECK(false, "acme_rmsnorm_cuda: x must be float32, float16 or bfloat16, got ",
               dtype_name(x.scalar_type()));
      return acme::DType::kFloat32;  // not reached
  }
}

// The front checks the weight's shape first (a ValueError it promises) and sends only tensors
// these checks pass; they keep a direct call from reading memory wrongly. A stable module raises
// them as RuntimeError, the one error type torch.ops carries.
Tensor rms_norm(const Tensor& x, const Tensor& weight, double eps) {
  gpu_bind::check_gpu_tensor(x, "acme_rmsnorm_cuda: x");
  gpu_bind::check_gpu_tensor(weight, "acme_rmsnorm_cuda: weight");
  gpu_bind::check_same_device(weight, x, "acme_rmsnorm_cuda: weight");
  OP_CHECK(x.dim() >= 1, "acme_rmsnorm_cuda: x must have at least one dimension");
  const int64_t cols = x.size(x.dim() - 1);
  OP_CHECK(weight.dim() == 1 && weight.size(0) == cols, "acme_rmsnorm_cuda: weight must be of shape [", cols,
           "], got ", shape_text(weight.sizes()));
  OP_CHECK(weight.scalar_type() == x.scalar_type(), "acme_rmsnorm_cuda: weight is ",
           dtype_name(weight.scalar_type()), " but x is ", dtype_name(x.scalar_type()));
  const acme::DType dtype = dtype_of(x);
  const gpu_bind::DeviceGuard guard(x.device().index());
  Tensor y = op_abi::empty_like(x);
  const int64_t rows = cols == 0 ? 0 : x.numel() / cols;
  gpu_bind::check_launch(acme::rms_norm_forward(x.const_data_ptr(), weight.const_data_ptr(), y.mutable_data_ptr(),
                                                rows, cols, static_cast<float>(eps), dtype,
                                                gpu_bind::current_stream(x.device())),
                         "acme_rmsnorm_cuda");
  return y;
}

}  // namespace

#ifdef IMAGEGEN_STABLE_ABI
// The schema's argument names are the pybind11 build's, so keyword calls work on either build.
OP_LIBRARY(m) {
  m.def("rms_norm(Tensor x, Tensor weight, float eps) -> Tensor");
  m.def("has_bf16() -> bool");
}
OP_LIBRARY_IMPL(CUDA, m) { m.impl("rms_norm", OP_BOX(&rms_norm)); }
// No tensor argument to dispatch on: one kernel for every backend.
OP_LIBRARY_IMPL(CompositeExplicitAutograd, m) { m.impl("has_bf16", OP_BOX(&acme::has_bf16)); }
OP_PYTHON_MODULE("RMSNorm forward on CUDA tensors (fp32, fp16, bf16 from sm_80): torch.ops")
#else
PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.def("rms_norm", &rms_norm, "y = x / sqrt(mean(x^2, -1) + eps) * weight", py::arg("x"), py::arg("weight"),
        py::arg("eps"));
  m.def("has_bf16", &acme::has_bf16, "whether this build has bf16 kernels (every arch sm_80 or newer)");
}
#endif
