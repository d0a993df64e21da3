// torch bindings of the integer quantizer. Shapes: x is viewed as [groups, group_size].
#include "gpu_bindings.h"
#include "gpu_quantizer.h"

#include <tuple>

namespace {

int64_t groups_of(int64_t numel, int64_t group_size, int64_t bits) {
  TORCH_CHECK(bits == 8 || bits == 4, "bits must be 8 or 4, got ", bits);
  TORCH_CHECK(group_size > 0, "group_size must be positive, got ", group_size);
  TORCH_CHECK(numel % group_size == 0, "the number of elements (", numel, ") is not a multiple of group_size (",
              group_size, ")");
  TORCH_CHECK(bits == 8 || group_size % 2 == 0, "int4 packs two values per byte: group_size must be even, got ",
              group_size);
  return numel / group_size;
}

void check_scales(const at::Tensor& t, const at::Tensor& ref, int64_t groups, const char* what) {
  gpu_bind::check_gpu_tensor(t, what);
  gpu_bind::check_same_device(t, ref, what);
  TORCH_CHECK(t.scalar_type() == at::kFloat && t.numel() == groups, what, " must be float32 with ", groups,
              " elements");
}

std::tuple<at::Tensor, at::Tensor, c10::optional<at::Tensor>> quantize(const at::Tensor& x, int64_t group_size,
                                                                       int64_t bits, bool symmetric) {
  gpu_bind::check_gpu_tensor(x, "x");
  const gpu_ops::DType dtype = gpu_bind::float_dtype(x, "x");
  const int64_t groups = groups_of(x.numel(), group_size, bits);
  const c10::cuda::CUDAGuard guard(x.device());
  const auto code_type = (bits == 8 && symmetric) ? at::kChar : at::kByte;
  at::Tensor q = at::empty({groups, bits == 8 ? group_size : group_size / 2}, x.options().dtype(code_type));
  at::Tensor scale = at::empty({groups}, x.options().dtype(at::kFloat));
  c10::optional<at::Tensor> offset;
  if (!symmetric) offset = at::empty({groups}, x.options().dtype(at::kFloat));
  gpu_bind::check_launch(gpu_ops::quantize_int(x.data_ptr(), static_cast<uint8_t*>(q.data_ptr()),
                                               scale.data_ptr<float>(),
                                               symmetric ? nullptr : offset->data_ptr<float>(), groups, group_size,
                                               static_cast<int>(bits), symmetric, dtype, gpu_bind::current_stream()),
                         "quantize");
  return {q, scale, offset};
}

// Writes into `out` (float32, float16 or bfloat16, group_size * groups elements).
void dequantize(const at::Tensor& q, const at::Tensor& scale, const c10::optional<at::Tensor>& offset,
                at::Tensor& out, int64_t group_size, int64_t bits, bool symmetric) {
  gpu_bind::check_gpu_tensor(out, "out");
  const gpu_ops::DType dtype = gpu_bind::float_dtype(out, "out");
  const int64_t groups = groups_of(out.numel(), group_size, bits);
  gpu_bind::check_gpu_tensor(q, "q");
  gpu_bind::check_same_device(q, out, "q");
  TORCH_CHECK(q.scalar_type() == at::kChar || q.scalar_type() == at::kByte, "q must be int8 or uint8");
  TORCH_CHECK(q.numel() == (bits == 8 ? out.numel() : out.numel() / 2), "q has ", q.numel(),
              " elements, which does not match out's ", out.numel(), " at ", bits, " bits");
  check_scales(scale, out, groups, "scale");
  TORCH_CHECK(symmetric || offset.has_value(), "asymmetric dequantization needs the offsets");
  if (!symmetric) check_scales(*offset, out, groups, "offset");
  const c10::cuda::CUDAGuard guard(out.device());
  gpu_bind::check_launch(
      gpu_ops::dequantize_int(static_cast<const uint8_t*>(q.data_ptr()), scale.data_ptr<float>(),
                              symmetric ? nullptr : offset->data_ptr<float>(), out.data_ptr(), groups, group_size,
                              static_cast<int>(bits), symmetric, dtype, gpu_bind::current_stream()),
      "dequantize");
}

}  // namespace

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.doc() = "Grouped int8 / int4 quantization, symmetric and asymmetric";
  m.def("quantize", &quantize, "(codes, scale, offset or None)", py::arg("x"), py::arg("group_size"),
        py::arg("bits"), py::arg("symmetric"));
  m.def("dequantize", &dequantize, "Dequantize into out", py::arg("q"), py::arg("scale"), py::arg("offset"),
        py::arg("out"), py::arg("group_size"), py::arg("bits"), py::arg("symmetric"));
  m.def("has_bf16", &gpu_ops::has_bf16, "Whether this build has bf16 kernels");
}
