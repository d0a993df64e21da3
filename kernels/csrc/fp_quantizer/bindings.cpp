// torch bindings of the FP8 quantizer. Shapes: x is viewed as [groups, group_size];
// codes are uint8 with the bit layout of torch.float8_e4m3fn / torch.float8_e5m2.
#include "gpu_bindings.h"
#include "gpu_fp_quantizer.h"

#include <string>
#include <tuple>

namespace {

gpu_ops::Fp8Format format_of(const std::string& name) {
  if (name == "e4m3") return gpu_ops::Fp8Format::kE4M3;
  TORCH_CHECK(name == "e5m2", "format must be 'e4m3' or 'e5m2', got '", name, "'");
  return gpu_ops::Fp8Format::kE5M2;
}

int64_t groups_of(int64_t numel, int64_t group_size) {
  TORCH_CHECK(group_size > 0, "group_size must be positive, got ", group_size);
  TORCH_CHECK(numel % group_size == 0, "the number of elements (", numel, ") is not a multiple of group_size (",
              group_size, ")");
  return numel / group_size;
}

std::tuple<at::Tensor, at::Tensor> quantize(const at::Tensor& x, int64_t group_size, const std::string& format) {
  gpu_bind::check_gpu_tensor(x, "x");
  const gpu_ops::DType dtype = gpu_bind::float_dtype(x, "x");
  const gpu_ops::Fp8Format fmt = format_of(format);
  const int64_t groups = groups_of(x.numel(), group_size);
  const c10::cuda::CUDAGuard guard(x.device());
  at::Tensor q = at::empty({groups, group_size}, x.options().dtype(at::kByte));
  at::Tensor scale = at::empty({groups}, x.options().dtype(at::kFloat));
  gpu_bind::check_launch(gpu_ops::fp8_quantize(x.data_ptr(), q.data_ptr<uint8_t>(), scale.data_ptr<float>(), groups,
                                               group_size, fmt, dtype, gpu_bind::current_stream()),
                         "fp8_quantize");
  return {q, scale};
}

// Writes into `out` (float32, float16 or bfloat16, same element count as q).
void dequantize(const at::Tensor& q, const at::Tensor& scale, at::Tensor& out, int64_t group_size,
                const std::string& format) {
  gpu_bind::check_gpu_tensor(out, "out");
  const gpu_ops::DType dtype = gpu_bind::float_dtype(out, "out");
  const gpu_ops::Fp8Format fmt = format_of(format);
  const int64_t groups = groups_of(out.numel(), group_size);
  gpu_bind::check_gpu_tensor(q, "q");
  gpu_bind::check_same_device(q, out, "q");
  TORCH_CHECK(q.element_size() == 1 && q.numel() == out.numel(), "q must hold one byte per element of out");
  gpu_bind::check_gpu_tensor(scale, "scale");
  gpu_bind::check_same_device(scale, out, "scale");
  TORCH_CHECK(scale.scalar_type() == at::kFloat && scale.numel() == groups, "scale must be float32 with ", groups,
              " elements");
  const c10::cuda::CUDAGuard guard(out.device());
  gpu_bind::check_launch(gpu_ops::fp8_dequantize(static_cast<const uint8_t*>(q.data_ptr()), scale.data_ptr<float>(),
                                                 out.data_ptr(), groups, group_size, fmt, dtype,
                                                 gpu_bind::current_stream()),
                         "fp8_dequantize");
}

}  // namespace

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.doc() = "Grouped FP8 (e4m3, e5m2) quantization with one fp32 scale per group";
  m.def("quantize", &quantize, "(codes as uint8, scale)", py::arg("x"), py::arg("group_size"),
        py::arg("format"));
  m.def("dequantize", &dequantize, "Dequantize into out", py::arg("q"), py::arg("scale"), py::arg("out"),
        py::arg("group_size"), py::arg("format"));
  m.def("has_bf16", &gpu_ops::has_bf16, "Whether this build has bf16 kernels");
}
