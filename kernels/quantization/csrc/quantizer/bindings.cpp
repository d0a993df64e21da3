// torch bindings of the integer quantizer. Shapes: x is viewed as [groups, group_size].
// Written once for both ABIs (op_abi.h, gpu_bindings.h).
#include "gpu_bindings.h"
#include "gpu_quantizer.h"

#include <optional>
#include <tuple>

namespace {

using op_abi::ScalarType;
using op_abi::Tensor;

int64_t groups_of(int64_t numel, int64_t group_size, int64_t bits) {
  OP_CHECK(bits == 8 || bits == 4, "bits must be 8 or 4, got ", bits);
  OP_CHECK(group_size > 0, "group_size must be positive, got ", group_size);
  OP_CHECK(numel % group_size == 0, "the number of elements (", numel, ") is not a multiple of group_size (",
           group_size, ")");
  OP_CHECK(bits == 8 || group_size % 2 == 0, "int4 packs two values per byte: group_size must be even, got ",
           group_size);
  return numel / group_size;
}

void check_scales(const Tensor& t, const Tensor& ref, int64_t groups, const char* what) {
  gpu_bind::check_gpu_tensor(t, what);
  gpu_bind::check_same_device(t, ref, what);
  OP_CHECK(t.scalar_type() == ScalarType::Float && t.numel() == groups, what, " must be float32 with ", groups,
           " elements");
}

std::tuple<Tensor, Tensor, std::optional<Tensor>> quantize(const Tensor& x, int64_t group_size, int64_t bits,
                                                           bool symmetric) {
  gpu_bind::check_gpu_tensor(x, "x");
  const gpu_ops::DType dtype = gpu_bind::float_dtype(x, "x");
  const int64_t groups = groups_of(x.numel(), group_size, bits);
  const gpu_bind::DeviceGuard guard(x.device().index());
  const ScalarType code_type = (bits == 8 && symmetric) ? ScalarType::Char : ScalarType::Byte;
  Tensor q = op_abi::new_empty(x, {groups, bits == 8 ? group_size : group_size / 2}, code_type);
  Tensor scale = op_abi::new_empty(x, {groups}, ScalarType::Float);
  std::optional<Tensor> offset;
  if (!symmetric) offset = op_abi::new_empty(x, {groups}, ScalarType::Float);
  gpu_bind::check_launch(
      gpu_ops::quantize_int(x.data_ptr(), static_cast<uint8_t*>(q.data_ptr()), scale.mutable_data_ptr<float>(),
                            symmetric ? nullptr : offset->mutable_data_ptr<float>(), groups, group_size,
                            static_cast<int>(bits), symmetric, dtype, gpu_bind::current_stream(x.device())),
      "quantize");
  return {q, scale, offset};
}

// Writes into `out` (float32, float16 or bfloat16, group_size * groups elements).
void dequantize(const Tensor& q, const Tensor& scale, const std::optional<Tensor>& offset, const Tensor& out,
                int64_t group_size, int64_t bits, bool symmetric) {
  gpu_bind::check_gpu_tensor(out, "out");
  const gpu_ops::DType dtype = gpu_bind::float_dtype(out, "out");
  const int64_t groups = groups_of(out.numel(), group_size, bits);
  gpu_bind::check_gpu_tensor(q, "q");
  gpu_bind::check_same_device(q, out, "q");
  OP_CHECK(q.scalar_type() == ScalarType::Char || q.scalar_type() == ScalarType::Byte, "q must be int8 or uint8");
  OP_CHECK(q.numel() == (bits == 8 ? out.numel() : out.numel() / 2), "q has ", q.numel(),
           " elements, which does not match out's ", out.numel(), " at ", bits, " bits");
  check_scales(scale, out, groups, "scale");
  OP_CHECK(symmetric || offset.has_value(), "asymmetric dequantization needs the offsets");
  if (!symmetric) check_scales(*offset, out, groups, "offset");
  const gpu_bind::DeviceGuard guard(out.device().index());
  gpu_bind::check_launch(
      gpu_ops::dequantize_int(static_cast<const uint8_t*>(q.data_ptr()), scale.const_data_ptr<float>(),
                              symmetric ? nullptr : offset->const_data_ptr<float>(), out.data_ptr(), groups,
                              group_size, static_cast<int>(bits), symmetric, dtype,
                              gpu_bind::current_stream(out.device())),
      "dequantize");
}

}  // namespace

#ifdef IMAGEGEN_STABLE_ABI
// The argument names are the pybind11 build's, so keyword calls work on either build.
OP_LIBRARY(m) {
  m.def("quantize(Tensor x, int group_size, int bits, bool symmetric) -> (Tensor, Tensor, Tensor?)");
  m.def(
      "dequantize(Tensor q, Tensor scale, Tensor? offset, Tensor(a!) out, int group_size, int bits, "
      "bool symmetric) -> ()");
  m.def("has_bf16() -> bool");
}
OP_LIBRARY_IMPL(CUDA, m) {
  m.impl("quantize", OP_BOX(&quantize));
  m.impl("dequantize", OP_BOX(&dequantize));
}
// No tensor argument to dispatch on: one kernel for every backend.
OP_LIBRARY_IMPL(CompositeExplicitAutograd, m) { m.impl("has_bf16", OP_BOX(&gpu_ops::has_bf16)); }
OP_PYTHON_MODULE("Grouped int8 / int4 quantization, symmetric and asymmetric: torch.ops")
#else
PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.doc() = "Grouped int8 / int4 quantization, symmetric and asymmetric";
  m.def("quantize", &quantize, "(codes, scale, offset or None)", py::arg("x"), py::arg("group_size"),
        py::arg("bits"), py::arg("symmetric"));
  m.def("dequantize", &dequantize, "Dequantize into out", py::arg("q"), py::arg("scale"), py::arg("offset"),
        py::arg("out"), py::arg("group_size"), py::arg("bits"), py::arg("symmetric"));
  m.def("has_bf16", &gpu_ops::has_bf16, "Whether this build has bf16 kernels");
}
#endif
