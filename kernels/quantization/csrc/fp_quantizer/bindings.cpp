// torch bindings of the FP8 quantizer. Shapes: x is viewed as [groups, group_size];
// codes are uint8 with the bit layout of torch.float8_e4m3fn / torch.float8_e5m2.
// quantize_fp / dequantize_fp: the packed small float formats (gpu_fp_quantizer.h), codes
// uint8 [groups, group_size * bits / 8].
// Written once for both ABIs (op_abi.h, gpu_bindings.h).
#include "gpu_bindings.h"
#include "gpu_fp_quantizer.h"

#include <optional>
#include <string>
#include <tuple>

namespace {

using op_abi::ScalarType;
using op_abi::Tensor;

gpu_ops::Fp8Format format_of(const std::string& name) {
  if (name == "e4m3") return gpu_ops::Fp8Format::kE4M3;
  OP_CHECK(name == "e5m2", "format must be 'e4m3' or 'e5m2', got '", name, "'");
  return gpu_ops::Fp8Format::kE5M2;
}

int64_t groups_of(int64_t numel, int64_t group_size) {
  OP_CHECK(group_size > 0, "group_size must be positive, got ", group_size);
  OP_CHECK(numel % group_size == 0, "the number of elements (", numel, ") is not a multiple of group_size (",
           group_size, ")");
  return numel / group_size;
}

std::tuple<Tensor, Tensor> quantize(const Tensor& x, int64_t group_size, const std::string& format) {
  gpu_bind::check_gpu_tensor(x, "x");
  const gpu_ops::DType dtype = gpu_bind::float_dtype(x, "x");
  const gpu_ops::Fp8Format fmt = format_of(format);
  const int64_t groups = groups_of(x.numel(), group_size);
  const gpu_bind::DeviceGuard guard(x.device().index());
  Tensor q = op_abi::new_empty(x, {groups, group_size}, ScalarType::Byte);
  Tensor scale = op_abi::new_empty(x, {groups}, ScalarType::Float);
  gpu_bind::check_launch(gpu_ops::fp8_quantize(x.data_ptr(), q.mutable_data_ptr<uint8_t>(),
                                               scale.mutable_data_ptr<float>(), groups, group_size, fmt, dtype,
                                               gpu_bind::current_stream(x.device())),
                         "fp8_quantize");
  return {q, scale};
}

// Writes into `out` (float32, float16 or bfloat16, same element count as q).
void dequantize(const Tensor& q, const Tensor& scale, const Tensor& out, int64_t group_size,
                const std::string& format) {
  gpu_bind::check_gpu_tensor(out, "out");
  const gpu_ops::DType dtype = gpu_bind::float_dtype(out, "out");
  const gpu_ops::Fp8Format fmt = format_of(format);
  const int64_t groups = groups_of(out.numel(), group_size);
  gpu_bind::check_gpu_tensor(q, "q");
  gpu_bind::check_same_device(q, out, "q");
  OP_CHECK(q.element_size() == 1 && q.numel() == out.numel(), "q must hold one byte per element of out");
  gpu_bind::check_gpu_tensor(scale, "scale");
  gpu_bind::check_same_device(scale, out, "scale");
  OP_CHECK(scale.scalar_type() == ScalarType::Float && scale.numel() == groups, "scale must be float32 with ", groups,
           " elements");
  const gpu_bind::DeviceGuard guard(out.device().index());
  gpu_bind::check_launch(
      gpu_ops::fp8_dequantize(static_cast<const uint8_t*>(q.data_ptr()), scale.const_data_ptr<float>(),
                              out.data_ptr(), groups, group_size, fmt, dtype, gpu_bind::current_stream(out.device())),
      "fp8_dequantize");
}

gpu_ops::FpFormat fp_format_of(const std::string& name) {
  if (name == "e4m3") return gpu_ops::FpFormat::kE4M3;
  if (name == "e5m2") return gpu_ops::FpFormat::kE5M2;
  if (name == "e3m2") return gpu_ops::FpFormat::kE3M2;
  if (name == "e2m3") return gpu_ops::FpFormat::kE2M3;
  if (name == "e2m1") return gpu_ops::FpFormat::kE2M1;
  OP_CHECK(name == "e4m7", "format must be one of e4m3, e5m2, e3m2, e2m3, e2m1, e4m7, got '", name, "'");
  return gpu_ops::FpFormat::kE4M7;
}

// Bytes of one group's codes; an error unless they are whole bytes.
int64_t group_bytes_of(int64_t group_size, gpu_ops::FpFormat format) {
  const int bits = gpu_ops::fp_format_bits(format);
  OP_CHECK(group_size > 0 && group_size * bits % 8 == 0, "group_size (", group_size, ") times ", bits,
           " bits must be whole bytes");
  return group_size * bits / 8;
}

// seed: the 64 bits of the stochastic rounding key as a signed int (a torch.ops schema has no
// unsigned one): the front passes seed - 2**64 for a seed of 2**63 or more.
std::tuple<Tensor, Tensor> quantize_fp(const Tensor& x, int64_t group_size, const std::string& format,
                                       bool stochastic, int64_t seed) {
  gpu_bind::check_gpu_tensor(x, "x");
  const gpu_ops::DType dtype = gpu_bind::float_dtype(x, "x");
  const gpu_ops::FpFormat fmt = fp_format_of(format);
  const int64_t bytes = group_bytes_of(group_size, fmt);
  const int64_t groups = groups_of(x.numel(), group_size);
  const gpu_bind::DeviceGuard guard(x.device().index());
  Tensor q = op_abi::new_empty(x, {groups, bytes}, ScalarType::Byte);
  Tensor scale = op_abi::new_empty(x, {groups}, ScalarType::Float);
  gpu_bind::check_launch(gpu_ops::fp_quantize(x.data_ptr(), q.mutable_data_ptr<uint8_t>(),
                                              scale.mutable_data_ptr<float>(), groups, group_size, fmt, stochastic,
                                              static_cast<uint64_t>(seed), dtype, gpu_bind::current_stream(x.device())),
                         "fp_quantize");
  return {q, scale};
}

// Writes into `out` (float32, float16 or bfloat16). Without `index`, out holds every group of
// q; with it (int64, the rows of q to take, each row_groups groups), index.numel() * row_groups
// groups. The indices must be in range: the front checks them (the kernel writes NaN rows for
// any that are not, rather than read out of bounds).
void dequantize_fp(const Tensor& q, const Tensor& scale, const Tensor& out, int64_t group_size,
                   const std::string& format, const std::optional<Tensor>& index, int64_t row_groups) {
  gpu_bind::check_gpu_tensor(out, "out");
  const gpu_ops::DType dtype = gpu_bind::float_dtype(out, "out");
  const gpu_ops::FpFormat fmt = fp_format_of(format);
  const int64_t bytes = group_bytes_of(group_size, fmt);
  const int64_t out_groups = groups_of(out.numel(), group_size);
  gpu_bind::check_gpu_tensor(q, "q");
  gpu_bind::check_same_device(q, out, "q");
  OP_CHECK(q.scalar_type() == ScalarType::Byte && q.numel() % bytes == 0, "q must be uint8 groups of ", bytes,
           " bytes");
  const int64_t groups = q.numel() / bytes;
  gpu_bind::check_gpu_tensor(scale, "scale");
  gpu_bind::check_same_device(scale, out, "scale");
  OP_CHECK(scale.scalar_type() == ScalarType::Float && scale.numel() == groups, "scale must be float32 with ", groups,
           " elements");
  const int64_t* index_ptr = nullptr;
  int64_t rows = 0;
  if (index.has_value()) {
    const Tensor& idx = *index;
    gpu_bind::check_gpu_tensor(idx, "index");
    gpu_bind::check_same_device(idx, out, "index");
    OP_CHECK(idx.scalar_type() == ScalarType::Long, "index must be int64, got ", op_abi::dtype_name(idx.scalar_type()));
    OP_CHECK(row_groups > 0 && groups % row_groups == 0, "row_groups (", row_groups, ") must divide the ",
             groups, " groups of q");
    OP_CHECK(out_groups == idx.numel() * row_groups, "out must hold ", idx.numel() * row_groups, " groups");
    index_ptr = idx.const_data_ptr<int64_t>();
    rows = groups / row_groups;
  } else {
    OP_CHECK(out_groups == groups, "out must hold the ", groups, " groups of q");
  }
  const gpu_bind::DeviceGuard guard(out.device().index());
  gpu_bind::check_launch(gpu_ops::fp_dequantize(q.const_data_ptr<uint8_t>(), scale.const_data_ptr<float>(),
                                                out.data_ptr(), out_groups, group_size, fmt, index_ptr, row_groups,
                                                rows, dtype, gpu_bind::current_stream(out.device())),
                         "fp_dequantize");
}

}  // namespace

#ifdef IMAGEGEN_STABLE_ABI
// The argument names are the pybind11 build's, so keyword calls work on either build.
OP_LIBRARY(m) {
  m.def("quantize(Tensor x, int group_size, str format) -> (Tensor, Tensor)");
  m.def("dequantize(Tensor q, Tensor scale, Tensor(a!) out, int group_size, str format) -> ()");
  m.def("quantize_fp(Tensor x, int group_size, str format, bool stochastic, int seed) -> (Tensor, Tensor)");
  m.def(
      "dequantize_fp(Tensor q, Tensor scale, Tensor(a!) out, int group_size, str format, Tensor? index, "
      "int row_groups) -> ()");
  m.def("has_bf16() -> bool");
}
OP_LIBRARY_IMPL(CUDA, m) {
  m.impl("quantize", OP_BOX(&quantize));
  m.impl("dequantize", OP_BOX(&dequantize));
  m.impl("quantize_fp", OP_BOX(&quantize_fp));
  m.impl("dequantize_fp", OP_BOX(&dequantize_fp));
}
// No tensor argument to dispatch on: one kernel for every backend.
OP_LIBRARY_IMPL(CompositeExplicitAutograd, m) { m.impl("has_bf16", OP_BOX(&gpu_ops::has_bf16)); }
OP_PYTHON_MODULE("Grouped FP8 / FP6 / FP4 / 12-bit float quantization with one fp32 scale per group: torch.ops")
#else
PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.doc() = "Grouped FP8 / FP6 / FP4 / 12-bit float quantization with one fp32 scale per group";
  m.def("quantize", &quantize, "(codes as uint8, scale)", py::arg("x"), py::arg("group_size"),
        py::arg("format"));
  m.def("dequantize", &dequantize, "Dequantize into out", py::arg("q"), py::arg("scale"), py::arg("out"),
        py::arg("group_size"), py::arg("format"));
  m.def("quantize_fp", &quantize_fp, "(packed codes as uint8, scale)", py::arg("x"), py::arg("group_size"),
        py::arg("format"), py::arg("stochastic"), py::arg("seed"));
  m.def("dequantize_fp", &dequantize_fp, "Dequantize packed codes (all groups, or the rows in index) into out",
        py::arg("q"), py::arg("scale"), py::arg("out"), py::arg("group_size"), py::arg("format"), py::arg("index"),
        py::arg("row_groups"));
  m.def("has_bf16", &gpu_ops::has_bf16, "Whether this build has bf16 kernels");
}
#endif
