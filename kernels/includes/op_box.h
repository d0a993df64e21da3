// How a stable op's kernel is boxed (OP_BOX in op_abi.h): torch's TORCH_BOX, but with the
// arguments made and freed while this thread holds the GIL, and the kernel itself run without it.
//
// Why: torch.ops calls a kernel with the GIL released, and the stable ABI hands every tensor
// over as a heap handle of its own (a list element too), which the box frees after the call. A
// tensor that Python also holds is tied to its Python object, so torch takes the GIL to drop
// that tie each time such a handle goes: one GIL round trip per tensor. A step over a list of 512
// tensors (three or four lists) paid ~0.4 us per handle for it. Held across the making and the
// freeing, the GIL is taken twice per call instead (once for the arguments, once for the
// teardown), and torch finds it held.
//
// The kernel runs with the GIL released, as under torch.ops without this box (its compute may
// take long, and other Python threads run meanwhile). Only the stable ABI's own conversions run
// under the GIL; torch takes the GIL in the same places itself whenever a Python object is tied
// to the tensor. A process without a Python interpreter (a C++ host of the op library) boxes
// without it.
#pragma once

#include <Python.h>

#include <cstdint>
#include <optional>
#include <tuple>
#include <type_traits>
#include <utility>

#include <torch/csrc/stable/library.h>

namespace op_abi::detail {

// This thread holds the GIL for the object's life (PyGILState_Ensure nests: a caller that holds
// it already keeps it).
class PythonGil {
 public:
  PythonGil() : active_(Py_IsInitialized() != 0) {
    if (active_) state_ = PyGILState_Ensure();
  }
  ~PythonGil() {
    if (active_) PyGILState_Release(state_);
  }
  PythonGil(const PythonGil&) = delete;
  PythonGil& operator=(const PythonGil&) = delete;
  bool active() const { return active_; }

 private:
  bool active_;
  PyGILState_STATE state_{};
};

// The GIL let go for the object's life, taken back on the way out (an exception's too).
class GilLetGo {
 public:
  explicit GilLetGo(const PythonGil& gil) : saved_(gil.active() ? PyEval_SaveThread() : nullptr) {}
  ~GilLetGo() {
    if (saved_ != nullptr) PyEval_RestoreThread(saved_);
  }
  GilLetGo(const GilLetGo&) = delete;
  GilLetGo& operator=(const GilLetGo&) = delete;

 private:
  PyThreadState* saved_;
};

template <typename Result>
void box_result(StableIValue* stack, Result&& result) {
  stack[0] = torch::stable::detail::from<std::decay_t<Result>>(std::forward<Result>(result));
}

template <typename... Results>
void box_result(StableIValue* stack, std::tuple<Results...>&& results) {
  torch::stable::detail::box_from_tuple<Results...>(stack, std::move(results));
}

// How many values a kernel's return type puts on the stack.
template <typename Return>
constexpr uint64_t output_count = 1;
template <>
constexpr uint64_t output_count<void> = 0;
template <typename... Results>
constexpr uint64_t output_count<std::tuple<Results...>> = sizeof...(Results);

template <typename FuncT, FuncT* func>
struct GilBoxer;

template <typename Return, typename... Parameters, Return (*func)(Parameters...)>
struct GilBoxer<Return(Parameters...), func> {
  static void boxed_fn(StableIValue* stack, uint64_t num_args, uint64_t num_outputs) {
    STD_TORCH_CHECK(num_args == sizeof...(Parameters), "the registered schema has ", num_args,
                    " arguments but the kernel takes ", sizeof...(Parameters));
    STD_TORCH_CHECK(num_outputs == output_count<Return>, "the registered schema has ", num_outputs,
                    " outputs but the kernel returns ", output_count<Return>);
    const PythonGil gil;
    // Declared after `gil`: the arguments (and their handles) are freed while it is held.
    std::tuple<torch::stable::detail::unbox_type_t<Parameters>...> args =
        torch::stable::detail::unbox_to_tuple<torch::stable::detail::unbox_type_t<Parameters>...>(stack);
    if constexpr (std::is_void_v<Return>) {
      const GilLetGo let_go(gil);
      std::apply(func, args);
    } else {
      std::optional<Return> result;
      {
        const GilLetGo let_go(gil);
        result.emplace(std::apply(func, args));
      }
      box_result(stack, std::move(*result));
    }
  }
};

}  // namespace op_abi::detail
