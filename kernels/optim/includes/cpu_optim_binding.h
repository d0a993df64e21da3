// What the three CPU optimizer bindings share: tensor checks with clear messages, the
// optional half-precision copy-out argument, the threaded run, and the Python controls of the
// SIMD dispatch (the per-instruction-set kernels and their choice: cpu_optim_dispatch.h).
#pragma once

// Narrow includes instead of <torch/extension.h>: a JIT build on first use compiles in a third
// of the time.
#include <ATen/Parallel.h>
#include <ATen/core/Tensor.h>
#include <torch/csrc/utils/pybind.h>

#include <algorithm>
#include <iterator>
#include <optional>
#include <string>

#include "cpu_simd.h"
#include "shape_text.h"

namespace cpu_optim {

using cpu_simd::HalfKind;
using cpu_simd::Level;

using cpu_simd::Dtype;

inline const char* dtype_name(at::ScalarType type) {
  switch (type) {
    case at::kFloat:
      return "float32";
    case at::kBFloat16:
      return "bfloat16";
    case at::kHalf:
      return "float16";
    default:
      return at::toString(type);
  }
}

inline at::ScalarType scalar_type(Dtype dtype) {
  switch (dtype) {
    case Dtype::kBFloat16:
      return at::kBFloat16;
    case Dtype::kHalf:
      return at::kHalf;
    default:
      return at::kFloat;
  }
}

// The kernels write through raw pointers, so anything but a dense CPU tensor of the dtype
// they were compiled for would be read or written wrongly: refuse it with the reason instead.
inline void check_dense(const at::Tensor& t, const char* op, const char* what) {
  TORCH_CHECK(t.defined(), op, ": ", what, " is undefined (None)");
  TORCH_CHECK(t.device().is_cpu(), op, ": ", what, " must be a CPU tensor, got one on ", t.device());
  TORCH_CHECK(t.is_contiguous(), op, ": ", what, " must be contiguous (call .contiguous() on it)");
}

// Params: fp32, or bf16 / fp16 updated directly (fp32 arithmetic and fp32 state inside).
inline Dtype check_params(const at::Tensor& params, const char* op) {
  TORCH_CHECK(params.defined(), op, ": params is undefined (None)");
  const at::ScalarType type = params.scalar_type();
  TORCH_CHECK(type == at::kFloat || type == at::kBFloat16 || type == at::kHalf, op,
              ": params must be float32, bfloat16 or float16, got ", dtype_name(type));
  check_dense(params, op, "params");
  return type == at::kFloat ? Dtype::kFloat : type == at::kBFloat16 ? Dtype::kBFloat16 : Dtype::kHalf;
}

// A tensor read and written alongside params: same shape, stored as `dtype`.
inline void check_like(const at::Tensor& params, const at::Tensor& t, Dtype dtype, const char* op,
                       const char* what) {
  TORCH_CHECK(t.defined(), op, ": ", what, " is undefined (None)");
  TORCH_CHECK(t.scalar_type() == scalar_type(dtype), op, ": ", what, " must be ", dtype_name(scalar_type(dtype)),
              ", got ", dtype_name(t.scalar_type()));
  check_dense(t, op, what);
  TORCH_CHECK(t.sizes() == params.sizes(), op, ": ", what, " has shape ", shape_text(t.sizes()),
              " but params have shape ", shape_text(params.sizes()));
}

// The optional bf16/fp16 tensor that receives params.to(dtype) in the same pass, for fp32
// params only. Same number of elements as params (a flat view of a model's half weights is fine).
inline HalfKind check_half(const std::optional<at::Tensor>& half, const at::Tensor& params, const char* op) {
  if (!half.has_value() || !half->defined()) return HalfKind::kNone;
  const at::Tensor& h = *half;
  TORCH_CHECK(params.scalar_type() == at::kFloat, op, ": a half copy is for float32 params; these params are ",
              dtype_name(params.scalar_type()), " already");
  TORCH_CHECK(h.device().is_cpu(), op, ": the half copy must be a CPU tensor, got one on ", h.device());
  TORCH_CHECK(h.scalar_type() == at::kBFloat16 || h.scalar_type() == at::kHalf, op,
              ": the half copy must be bfloat16 or float16, got ", dtype_name(h.scalar_type()));
  TORCH_CHECK(h.is_contiguous(), op, ": the half copy must be contiguous");
  TORCH_CHECK(h.numel() == params.numel(), op, ": the half copy has ", h.numel(), " elements but params have ",
              params.numel());
  return h.scalar_type() == at::kBFloat16 ? HalfKind::kBF16 : HalfKind::kFP16;
}

inline uint16_t* half_data(const std::optional<at::Tensor>& half, HalfKind kind) {
  return kind == HalfKind::kNone ? nullptr : reinterpret_cast<uint16_t*>(half->data_ptr());
}

// torch.set_num_threads governs these ops too, so one knob sizes every CPU kernel.
inline int num_threads() { return std::max(1, at::get_num_threads()); }

// run(threads) with num_threads() and the GIL released, so other Python threads run while the
// kernel (an op's cpu_<op>_run) updates.
template <typename Run>
void with_gil_released(const Run& run) {
  const int threads = num_threads();
  pybind11::gil_scoped_release no_gil;
  run(threads);
}

// A level of another architecture (avx2 on aarch64, neon on x86) is refused like one this CPU
// lacks; only a name no build knows is "unknown".
inline Level parse_level(const std::string& name) {
  if (name == "auto") return cpu_simd::supported_level();
  for (int i = 0; i < cpu_simd::kLevelCount; ++i) {
    if (name == cpu_simd::level_name(static_cast<Level>(i))) return static_cast<Level>(i);
  }
  const auto& known = cpu_simd::kAllLevelNames;
  TORCH_CHECK_VALUE(std::find(std::begin(known), std::end(known), name) != std::end(known), "unknown SIMD level '",
                    name, "': expected one of auto, scalar, avx2, avx512, neon, sve");
  TORCH_CHECK_VALUE(false, "SIMD level '", name, "' is not supported by this CPU (best: ",
                    cpu_simd::level_name(cpu_simd::supported_level()), ")");
  return Level::kScalar;  // not reached
}

// Each op module carries its own copy of the dispatch state; the Python front forwards a
// choice to every module it has loaded.
inline void bind_simd_controls(pybind11::module& m) {
  m.def(
      "simd_level", [] { return std::string(cpu_simd::level_name(cpu_simd::active_level())); },
      "The instruction set the next step will use: scalar, avx2, avx512 (x86), neon or sve (aarch64).");
  m.def(
      "supported_simd_level", [] { return std::string(cpu_simd::level_name(cpu_simd::supported_level())); },
      "The best instruction set this CPU supports (probed once).");
  m.def(
      "set_simd_level",
      [](const std::string& name) {
        const Level level = parse_level(name);
        TORCH_CHECK_VALUE(static_cast<int>(level) <= static_cast<int>(cpu_simd::supported_level()),
                          "SIMD level '", name, "' is not supported by this CPU (best: ",
                          cpu_simd::level_name(cpu_simd::supported_level()), ")");
        cpu_simd::forced_level().store(name == "auto" ? -1 : static_cast<int>(level));
      },
      pybind11::arg("level"),
      "Force scalar/avx2/avx512/neon/sve (for tests and comparisons), or 'auto' to follow the CPU.");
}

}  // namespace cpu_optim
