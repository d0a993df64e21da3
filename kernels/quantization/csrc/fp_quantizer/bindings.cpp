// torch bindings of the FP8 quantizer. Shapes: x is viewed as [groups, group_size];
// codes are uint8 with the bit layout of torch.float8_e4m3fn / torch.float8_e5m2.
// quantize_fp / dequantize_fp: the packed small float formats (gpu_fp_quantizer.h), codes
// uint8 [groups, group_size * bits / 8].
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

gpu_ops::FpFormat fp_format_of(const std::string& name) {
  if (name == "e4m3") return gpu_ops::FpFormat::kE4M3;
  if (name == "e5m2") return gpu_ops::FpFormat::kE5M2;
  if (name == "e3m2") return gpu_ops::FpFormat::kE3M2;
  if (name == "e2m3") return gpu_ops::FpFormat::kE2M3;
  if (name == "e2m1") return gpu_ops::FpFormat::kE2M1;
  TORCH_CHECK(name == "e4m7", "format must be one of e4m3, e5m2, e3m2, e2m3, e2m1, e4m7, got '", name, "'");
  return gpu_ops::FpFormat::kE4M7;
}

// Bytes of one group's codes; an error unless they are whole bytes.
int64_t group_bytes_of(int64_t group_size, gpu_ops::FpFormat format) {
  const int bits = gpu_ops::fp_format_bits(format);
  TORCH_CHECK(group_size > 0 && group_size * bits % 8 == 0, "group_size (", group_size, ") times ", bits,
              " bits must be whole bytes");
  return group_size * bits / 8;
}

std::tuple<at::Tensor, at::Tensor> quantize_fp(const at::Tensor& x, int64_t group_size, const std::string& format,
                                               bool stochastic, uint64_t seed) {
  gpu_bind::check_gpu_tensor(x, "x");
  const gpu_ops::DType dtype = gpu_bind::float_dtype(x, "x");
  const gpu_ops::FpFormat fmt = fp_format_of(format);
  const int64_t bytes = group_bytes_of(group_size, fmt);
  const int64_t groups = groups_of(x.numel(), group_size);
  const c10::cuda::CUDAGuard guard(x.device());
  at::Tensor q = at::empty({groups, bytes}, x.options().dtype(at::kByte));
  at::Tensor scale = at::empty({groups}, x.options().dtype(at::kFloat));
  gpu_bind::check_launch(gpu_ops::fp_quantize(x.data_ptr(), q.data_ptr<uint8_t>(), scale.data_ptr<float>(), groups,
                                              group_size, fmt, stochastic, seed, dtype, gpu_bind::current_stream()),
                         "fp_quantize");
  return {q, scale};
}

// Writes into `out` (float32, float16 or bfloat16). Without `index`, out holds every group of
// q; with it (int64, the rows of q to take, each row_groups groups), index.numel() * row_groups
// groups. The indices must be in range: the front checks them (the kernel writes NaN rows for
// any that are not, rather than read out of bounds).
void dequantize_fp(const at::Tensor& q, const at::Tensor& scale, at::Tensor& out, int64_t group_size,
                   const std::string& format, const c10::optional<at::Tensor>& index, int64_t row_groups) {
  gpu_bind::check_gpu_tensor(out, "out");
  const gpu_ops::DType dtype = gpu_bind::float_dtype(out, "out");
  const gpu_ops::FpFormat fmt = fp_format_of(format);
  const int64_t bytes = group_bytes_of(group_size, fmt);
  const int64_t out_groups = groups_of(out.numel(), group_size);
  gpu_bind::check_gpu_tensor(q, "q");
  gpu_bind::check_same_device(q, out, "q");
  TORCH_CHECK(q.scalar_type() == at::kByte && q.numel() % bytes == 0, "q must be uint8 groups of ", bytes,
              " bytes");
  const int64_t groups = q.numel() / bytes;
  gpu_bind::check_gpu_tensor(scale, "scale");
  gpu_bind::check_same_device(scale, out, "scale");
  TORCH_CHECK(scale.scalar_type() == at::kFloat && scale.numel() == groups, "scale must be float32 with ", groups,
              " elements");
  const int64_t* index_ptr = nullptr;
  int64_t rows = 0;
  if (index.has_value()) {
    const at::Tensor& idx = *index;
    gpu_bind::check_gpu_tensor(idx, "index");
    gpu_bind::check_same_device(idx, out, "index");
    TORCH_CHECK(idx.scalar_type() == at::kLong, "index must be int64, got ", idx.scalar_type());
    TORCH_CHECK(row_groups > 0 && groups % row_groups == 0, "row_groups (", row_groups, ") must divide the ",
                groups, " groups of q");
    TORCH_CHECK(out_groups == idx.numel() * row_groups, "out must hold ", idx.numel() * row_groups, " groups");
    index_ptr = idx.data_ptr<int64_t>();
    rows = groups / row_groups;
  } else {
    TORCH_CHECK(out_groups == groups, "out must hold the ", groups, " groups of q");
  }
  const c10::cuda::CUDAGuard guard(out.device());
  gpu_bind::check_launch(gpu_ops::fp_dequantize(q.data_ptr<uint8_t>(), scale.data_ptr<float>(), out.data_ptr(),
                                                out_groups, group_size, fmt, index_ptr, row_groups, rows, dtype,
                                                gpu_bind::current_stream()),
                         "fp_dequantize");
}

}  // namespace

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
