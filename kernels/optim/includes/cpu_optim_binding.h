// What the three CPU optimizer bindings share: tensor checks with clear messages, the
// optional half-precision copy-out argument, the threaded run, and the controls of the SIMD
// dispatch (the per-instruction-set kernels and their choice: cpu_optim_dispatch.h). Written
// once for both ABIs (op_abi.h).
#pragma once

// Narrow includes instead of <torch/extension.h>: a JIT build on first use compiles in a third
// of the time.
#include <algorithm>
#include <initializer_list>
#include <iterator>
#include <utility>
#include <vector>
#include <optional>
#include <string>

#include "cpu_simd.h"
#include "op_abi.h"
#include "shape_text.h"

#ifndef IMAGEGEN_STABLE_ABI
#include <torch/csrc/utils/pybind.h>
#endif

namespace cpu_optim {

using cpu_simd::HalfKind;
using cpu_simd::Level;

using cpu_simd::Dtype;
using op_abi::dtype_name;
using op_abi::ScalarType;
using op_abi::Tensor;

inline ScalarType scalar_type(Dtype dtype) {
  switch (dtype) {
    case Dtype::kBFloat16:
      return ScalarType::BFloat16;
    case Dtype::kHalf:
      return ScalarType::Half;
    default:
      return ScalarType::Float;
  }
}

// The kernels write through raw pointers, so anything but a dense CPU tensor of the dtype
// they were compiled for would be read or written wrongly: refuse it with the reason instead.
inline void check_dense(const Tensor& t, const char* op, const char* what) {
  OP_CHECK(t.defined(), op, ": ", what, " is undefined (None)");
  OP_CHECK(t.is_cpu(), op, ": ", what, " must be a CPU tensor, got one on ", op_abi::device_text(t));
  OP_CHECK(t.is_contiguous(), op, ": ", what, " must be contiguous (call .contiguous() on it)");
}

// Params: fp32, or bf16 / fp16 updated directly (fp32 arithmetic and fp32 state inside).
inline Dtype check_params(const Tensor& params, const char* op) {
  OP_CHECK(params.defined(), op, ": params is undefined (None)");
  const ScalarType type = params.scalar_type();
  OP_CHECK(type == ScalarType::Float || type == ScalarType::BFloat16 || type == ScalarType::Half, op,
           ": params must be float32, bfloat16 or float16, got ", dtype_name(type));
  check_dense(params, op, "params");
  return type == ScalarType::Float ? Dtype::kFloat : type == ScalarType::BFloat16 ? Dtype::kBFloat16 : Dtype::kHalf;
}

// A tensor read and written alongside params: same shape, stored as `dtype`.
inline void check_like(const Tensor& params, const Tensor& t, Dtype dtype, const char* op, const char* what) {
  OP_CHECK(t.defined(), op, ": ", what, " is undefined (None)");
  OP_CHECK(t.scalar_type() == scalar_type(dtype), op, ": ", what, " must be ", dtype_name(scalar_type(dtype)),
           ", got ", dtype_name(t.scalar_type()));
  check_dense(t, op, what);
  OP_CHECK(op_abi::same_shape(t, params), op, ": ", what, " has shape ", shape_text(t.sizes()),
           " but params have shape ", shape_text(params.sizes()));
}

// The optional bf16/fp16 tensor that receives params.to(dtype) in the same pass, for fp32
// params only. Same number of elements as params (a flat view of a model's half weights is fine).
inline HalfKind check_half(const std::optional<Tensor>& half, const Tensor& params, const char* op) {
  if (!half.has_value() || !half->defined()) return HalfKind::kNone;
  const Tensor& h = *half;
  OP_CHECK(params.scalar_type() == ScalarType::Float, op,
           ": a half copy is for float32 params; these params are ", dtype_name(params.scalar_type()), " already");
  OP_CHECK(h.is_cpu(), op, ": the half copy must be a CPU tensor, got one on ", op_abi::device_text(h));
  OP_CHECK(h.scalar_type() == ScalarType::BFloat16 || h.scalar_type() == ScalarType::Half, op,
           ": the half copy must be bfloat16 or float16, got ", dtype_name(h.scalar_type()));
  OP_CHECK(h.is_contiguous(), op, ": the half copy must be contiguous");
  OP_CHECK(h.numel() == params.numel(), op, ": the half copy has ", h.numel(), " elements but params have ",
           params.numel());
  return h.scalar_type() == ScalarType::BFloat16 ? HalfKind::kBF16 : HalfKind::kFP16;
}

inline uint16_t* half_data(const std::optional<Tensor>& half, HalfKind kind) {
  return kind == HalfKind::kNone ? nullptr : reinterpret_cast<uint16_t*>(half->data_ptr());
}

// The list form of a step (one call for a param group's tensors, so a call's cost is paid once
// per group, not per tensor): every list must have one entry per param.
inline void check_list_lengths(const char* op, size_t params, std::initializer_list<std::pair<const char*, size_t>> lists) {
  for (const auto& [what, size] : lists) {
    OP_CHECK(size == params, op, ": ", what, " has ", size, " entries but params has ", params);
  }
}

// torch.set_num_threads governs these ops too, so one knob sizes every CPU kernel.
inline int num_threads() { return std::max(1, op_abi::num_threads()); }

// A step's kernel (an op's cpu_<op>_run) over args[0, count) on num_threads() threads. A
// pybind11 module lets the GIL go meanwhile, so other Python threads run while the kernel
// updates; a stable module's kernels run without it already (op_box.h).
template <typename Args>
void run_steps(void (*run)(const Args*, size_t, int), const Args* args, size_t count) {
  const int threads = num_threads();
#ifndef IMAGEGEN_STABLE_ABI
  pybind11::gil_scoped_release no_gil;
#endif
  run(args, count, threads);
}

// A level of another architecture (avx2 on aarch64, neon on x86) is refused like one this CPU
// lacks; only a name no build knows is "unknown".
inline Level parse_level(const std::string& name) {
  if (name == "auto") return cpu_simd::supported_level();
  for (int i = 0; i < cpu_simd::kLevelCount; ++i) {
    if (name == cpu_simd::level_name(static_cast<Level>(i))) return static_cast<Level>(i);
  }
  const auto& known = cpu_simd::kAllLevelNames;
  OP_CHECK_VALUE(std::find(std::begin(known), std::end(known), name) != std::end(known), "unknown SIMD level '",
                 name, "': expected one of auto, scalar, avx2, avx512, neon, sve");
  OP_CHECK_VALUE(false, "SIMD level '", name, "' is not supported by this CPU (best: ",
                 cpu_simd::level_name(cpu_simd::supported_level()), ")");
  return Level::kScalar;  // not reached
}

// Each op module carries its own copy of the dispatch state; the Python front forwards a
// choice to every module it has loaded.
inline std::string simd_level() { return cpu_simd::level_name(cpu_simd::active_level()); }

inline std::string supported_simd_level() { return cpu_simd::level_name(cpu_simd::supported_level()); }

inline void set_simd_level(std::string name) {
  const Level level = parse_level(name);
  OP_CHECK_VALUE(static_cast<int>(level) <= static_cast<int>(cpu_simd::supported_level()), "SIMD level '", name,
                 "' is not supported by this CPU (best: ", cpu_simd::level_name(cpu_simd::supported_level()), ")");
  cpu_simd::forced_level().store(name == "auto" ? -1 : static_cast<int>(level));
}

}  // namespace cpu_optim

// The SIMD controls' registration, in each CPU optimizer's module.
#ifdef IMAGEGEN_STABLE_ABI
#define CPU_OPTIM_SIMD_SCHEMAS(m)                          \
  m.def("simd_level() -> str");                           \
  m.def("supported_simd_level() -> str");                 \
  m.def("set_simd_level(str level) -> ()")
// No tensor argument to dispatch on: one kernel for every backend.
#define CPU_OPTIM_SIMD_IMPLS(m)                                                 \
  m.impl("simd_level", OP_BOX(&cpu_optim::simd_level));                         \
  m.impl("supported_simd_level", OP_BOX(&cpu_optim::supported_simd_level));     \
  m.impl("set_simd_level", OP_BOX(&cpu_optim::set_simd_level))
#else
namespace cpu_optim {
inline void bind_simd_controls(pybind11::module& m) {
  m.def("simd_level", &simd_level,
        "The instruction set the next step will use: scalar, avx2, avx512 (x86), neon or sve (aarch64).");
  m.def("supported_simd_level", &supported_simd_level, "The best instruction set this CPU supports (probed once).");
  m.def("set_simd_level", &set_simd_level, pybind11::arg("level"),
        "Force scalar/avx2/avx512/neon/sve (for tests and comparisons), or 'auto' to follow the CPU.");
}
}  // namespace cpu_optim
#endif
