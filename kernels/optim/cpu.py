"""CPU optimizers backed by the ``cpu_adam``, ``cpu_adagrad`` and ``cpu_lion`` ops.

``CPUAdam``, ``CPUAdagrad`` and ``CPULion`` are ``torch.optim.Optimizer`` subclasses that
update CPU parameters in place with one SIMD + OpenMP pass per tensor:

* fp32 params, optionally writing ``params.to(bf16 | fp16)`` into a half-precision copy in the
  same pass (``opt.step(half_params=[...])``, one entry per parameter);
* bf16 / fp16 params (and grads) directly, as DeepSpeed's CPU optimizers take them: read as
  half, updated in fp32 against fp32 state, rounded back;
* non-contiguous params (transposed, tied, channels_last), through a contiguous copy;
* sparse gradients for ``CPUAdagrad``, as ``torch.optim.Adagrad`` takes them.

``CPUAdam`` keeps its moments in bf16 for param groups given ``"state_dtype": torch.bfloat16``
(DeepSpeed's ``fp32_optimizer_states=False``): half the state memory, at an accuracy cost
measured in docs/benchmarks.md. ``step_subgroup(i)`` / ``rollback_subgroup(i)`` step one param
group and undo that step exactly (ZeRO-Offload's sub-groups), for all three optimizers.

The op is loaded on the first step. When it cannot load (no compiler, JIT disabled and not
installed, ...), the optimizer runs a pure-PyTorch implementation of the same update and
warns once per op per process with the reason. ``use_kernel=False`` forces that fallback,
``use_kernel=True`` makes a missing kernel an error; ``opt.backend`` tells which path ran.

State keys and step counters follow torch (``step``, ``exp_avg``, ``exp_avg_sq``, ``sum``), so
a ``torch.optim.Adam`` / ``AdamW`` or ``Adagrad`` state dict loads into the matching optimizer.

``set_simd_level("scalar" | "avx2" | "avx512" | "neon" | "sve" | "auto")`` forces the kernels'
instruction set (tests run each path): scalar, avx2 and avx512 on x86, scalar, neon and sve on
aarch64. By default each op uses the best one the CPU supports, probed once.
"""

from __future__ import annotations

import math
from types import ModuleType
from typing import Any, ClassVar, Literal

import torch
from torch import Tensor
from torch.optim.optimizer import ParamsT

from kernels._op_load import LazyOp, check_message
from kernels.optim._common import (
    AdagradHyper,
    AdamHyper,
    LionHyper,
    Scalar,
    advance_step,
    hyperparams,
)
from kernels.optim._cpu_base import CPUOptimizer
from op_builder.errors import OpLoadError

__all__ = ["CPUAdagrad", "CPUAdam", "CPULion", "set_simd_level", "simd_level", "supported_simd_level"]

SimdLevel = Literal["auto", "scalar", "avx2", "avx512", "neon", "sve"]
# Every architecture's names: one this CPU's architecture lacks is refused by the op itself,
# with the same "not supported by this CPU" error as a level this CPU lacks.
_SIMD_LEVELS: tuple[SimdLevel, ...] = ("auto", "scalar", "avx2", "avx512", "neon", "sve")

# Per process: the op modules loaded so far, and the SIMD level every one of them must use.
_MODULES: dict[str, ModuleType] = {}
_simd_level: SimdLevel = "auto"


def set_simd_level(level: SimdLevel) -> None:
    """Force the instruction set of every CPU optimizer op: scalar, avx2, avx512, neon, sve, or auto.

    For tests and comparisons; ``auto`` (the default) uses the best one the CPU supports.
    Applies to ops already loaded and to ops loaded later. Raises ValueError for a level
    this CPU cannot run.
    """
    global _simd_level
    if level not in _SIMD_LEVELS:
        raise ValueError(f"unknown SIMD level {level!r}; expected one of {', '.join(_SIMD_LEVELS)}")
    for module in _MODULES.values():
        _set_level(module, level)
    _simd_level = level


def _set_level(module: ModuleType, level: str) -> None:
    try:
        module.set_simd_level(level)
    except RuntimeError as exc:  # a stable module's refusal crosses torch.ops as RuntimeError
        raise ValueError(check_message(exc)) from None


def simd_level(op: str) -> str | None:
    """The instruction set ``op``'s next step runs (scalar, avx2, avx512, neon or sve); None before it loads.

    Self-tests and reports read it to say which code path they checked.
    """
    module = _MODULES.get(op)
    return None if module is None else str(module.simd_level())


def supported_simd_level(op: str = "cpu_adam") -> str:
    """The best instruction set this CPU supports, as ``op``'s kernel probes it (loads the op).

    Raises OpLoadError when the op cannot load.
    """
    return str(_OPS[op].load().supported_simd_level())


def _on_load(op: str, module: ModuleType) -> None:
    if _simd_level != "auto":
        _set_level(module, _simd_level)
    _MODULES[op] = module


_OPS: dict[str, LazyOp] = {name: LazyOp(name, _on_load) for name in ("cpu_adam", "cpu_adagrad", "cpu_lion")}


def _resolve(op: str, use_kernel: bool | None) -> ModuleType | None:
    """The op module, or None for the fallback (after warning once why)."""
    if use_kernel is False:
        return None
    lazy = _OPS[op]
    try:
        return lazy.load()
    except (OpLoadError, ImportError) as exc:
        if use_kernel:
            raise
        reason = getattr(exc, "message", None) or str(exc)
        lazy.warn_once(
            "unavailable",
            f"{op}: the compiled kernel is unavailable ({reason}); using the PyTorch fallback (slower)",
        )
    return None


class _CPUOptimizer(CPUOptimizer):
    """Binds the shared step loop to this module's op loading and SIMD settings."""

    def _module(self) -> ModuleType | None:
        return _resolve(self.op_name, self.use_kernel)


class CPUAdam(_CPUOptimizer):
    """Adam (``adamw_mode=False``, L2 penalty) or AdamW (default, decoupled weight decay).

    Matches ``torch.optim.AdamW`` / ``torch.optim.Adam`` with ``bias_correction=True``;
    ``bias_correction=False`` uses ``lr`` and ``sqrt(exp_avg_sq)`` uncorrected.

    A param group with ``"state_dtype": torch.bfloat16`` keeps ``exp_avg`` and ``exp_avg_sq`` in
    bf16 (each step computes them in fp32 and rounds what it stores). A per-group option rather
    than a constructor argument, so groups may differ, as ZeRO's sub-groups do:
    ``CPUAdam([{"params": params, "state_dtype": torch.bfloat16}])``.
    """

    hyper = AdamHyper
    op_name: ClassVar[str] = "cpu_adam"
    kernel_fn: ClassVar[str] = "adam_step"
    kernel_list_fn: ClassVar[str] = "adam_steps"
    per_param_scalars: ClassVar[int] = 1  # the step count
    state_keys: ClassVar[tuple[str, ...]] = ("exp_avg", "exp_avg_sq")
    state_dtypes: ClassVar[tuple[torch.dtype, ...]] = (torch.float32, torch.bfloat16)

    def __init__(
        self,
        params: ParamsT,
        lr: float = AdamHyper.lr,
        betas: tuple[float, float] = AdamHyper.betas,
        eps: float = AdamHyper.eps,
        weight_decay: float = AdamHyper.weight_decay,
        *,
        adamw_mode: bool = AdamHyper.adamw_mode,
        bias_correction: bool = AdamHyper.bias_correction,
        use_kernel: bool | None = None,
    ) -> None:
        options = AdamHyper(lr, betas, eps, weight_decay, adamw_mode, bias_correction)
        super().__init__(params, options, use_kernel)

    def _init_state(self, p: Tensor, group: dict[str, Any], state: dict[str, Any]) -> None:
        state["step"] = torch.tensor(0.0, dtype=torch.float32)
        dtype = self._state_dtype(group)
        state["exp_avg"] = torch.zeros_like(p, dtype=dtype, memory_format=torch.contiguous_format)
        state["exp_avg_sq"] = torch.zeros_like(p, dtype=dtype, memory_format=torch.contiguous_format)

    def _kernel_scalars(self, state: dict[str, Any], group: dict[str, Any]) -> tuple[Scalar, ...]:
        floats = hyperparams(group, "lr", "betas", "eps", "weight_decay")
        return (advance_step(state), *floats, bool(group["bias_correction"]), bool(group["adamw_mode"]))

    def _fallback_update(self, p: Tensor, grad: Tensor, state: dict[str, Any], group: dict[str, Any]) -> None:
        # torch.optim.Adam's single-tensor algorithm, step for step.
        step = advance_step(state)
        lr, eps, wd = float(group["lr"]), float(group["eps"]), float(group["weight_decay"])
        beta1, beta2 = group["betas"]
        exp_avg, exp_avg_sq = state["exp_avg"], state["exp_avg_sq"]
        if wd != 0.0:
            if group["adamw_mode"]:
                p.mul_(1.0 - lr * wd)
            else:
                grad = grad.add(p, alpha=wd)
        exp_avg.lerp_(grad, 1.0 - beta1)
        exp_avg_sq.mul_(beta2).addcmul_(grad, grad, value=1.0 - beta2)
        bc1 = 1.0 - beta1**step if group["bias_correction"] else 1.0
        bc2 = 1.0 - beta2**step if group["bias_correction"] else 1.0
        denom = (exp_avg_sq.sqrt() / math.sqrt(bc2)).add_(eps)
        p.addcdiv_(exp_avg, denom, value=-lr / bc1)


class CPUAdagrad(_CPUOptimizer):
    """Adagrad with ``torch.optim.Adagrad`` semantics (lr_decay, weight_decay, initial accumulator).

    Takes sparse COO gradients (an ``nn.Embedding(sparse=True)``) as torch's does: only the rows
    the gradient names are updated, repeated indices summed; weight_decay must then be 0.
    """

    hyper = AdagradHyper
    op_name: ClassVar[str] = "cpu_adagrad"
    kernel_fn: ClassVar[str] = "adagrad_step"
    kernel_list_fn: ClassVar[str] = "adagrad_steps"
    per_param_scalars: ClassVar[int] = 1  # the step count
    state_keys: ClassVar[tuple[str, ...]] = ("sum",)
    sparse_grads: ClassVar[bool] = True

    def __init__(
        self,
        params: ParamsT,
        lr: float = AdagradHyper.lr,
        lr_decay: float = AdagradHyper.lr_decay,
        weight_decay: float = AdagradHyper.weight_decay,
        initial_accumulator_value: float = AdagradHyper.initial_accumulator_value,
        eps: float = AdagradHyper.eps,
        *,
        use_kernel: bool | None = None,
    ) -> None:
        options = AdagradHyper(lr, lr_decay, weight_decay, initial_accumulator_value, eps)
        super().__init__(params, options, use_kernel)

    def _init_state(self, p: Tensor, group: dict[str, Any], state: dict[str, Any]) -> None:
        state["step"] = torch.tensor(0.0, dtype=torch.float32)
        init = float(group["initial_accumulator_value"])
        state["sum"] = torch.full_like(p, init, dtype=torch.float32, memory_format=torch.contiguous_format)

    def _kernel_scalars(self, state: dict[str, Any], group: dict[str, Any]) -> tuple[Scalar, ...]:
        return (advance_step(state), *hyperparams(group, "lr", "lr_decay", "eps", "weight_decay"))

    def _fallback_update(self, p: Tensor, grad: Tensor, state: dict[str, Any], group: dict[str, Any]) -> None:
        # torch.optim.Adagrad's single-tensor algorithm.
        step = advance_step(state)
        wd = float(group["weight_decay"])
        if wd != 0.0:
            grad = grad.add(p, alpha=wd)
        clr = float(group["lr"]) / (1.0 + (step - 1) * float(group["lr_decay"]))
        state_sum = state["sum"]
        state_sum.addcmul_(grad, grad, value=1.0)
        std = state_sum.sqrt().add_(float(group["eps"]))
        p.addcdiv_(grad, std, value=-clr)


class CPULion(_CPUOptimizer):
    """Lion: ``p = p * (1 - lr * wd) - lr * sign(beta1 * m + (1 - beta1) * g)``,
    then ``m = beta2 * m + (1 - beta2) * g``."""

    hyper = LionHyper
    op_name: ClassVar[str] = "cpu_lion"
    kernel_fn: ClassVar[str] = "lion_step"
    kernel_list_fn: ClassVar[str] = "lion_steps"
    state_keys: ClassVar[tuple[str, ...]] = ("exp_avg",)

    def __init__(
        self,
        params: ParamsT,
        lr: float = LionHyper.lr,
        betas: tuple[float, float] = LionHyper.betas,
        weight_decay: float = LionHyper.weight_decay,
        *,
        use_kernel: bool | None = None,
    ) -> None:
        super().__init__(params, LionHyper(lr, betas, weight_decay), use_kernel)

    def _init_state(self, p: Tensor, group: dict[str, Any], state: dict[str, Any]) -> None:
        state["exp_avg"] = torch.zeros_like(p, dtype=torch.float32, memory_format=torch.contiguous_format)

    def _kernel_scalars(self, state: dict[str, Any], group: dict[str, Any]) -> tuple[Scalar, ...]:
        return hyperparams(group, "lr", "betas", "weight_decay")

    def _fallback_update(self, p: Tensor, grad: Tensor, state: dict[str, Any], group: dict[str, Any]) -> None:
        # The same roundings as the kernel (each product and sum rounded to fp32 on its own):
        # sign() amplifies any difference in c near zero into a full 2 * lr step.
        lr, wd = float(group["lr"]), float(group["weight_decay"])
        beta1, beta2 = group["betas"]
        exp_avg = state["exp_avg"]
        c = exp_avg * beta1 + grad * (1.0 - beta1)
        if wd != 0.0:
            p.mul_(1.0 - lr * wd)
        p.add_(c.sign_(), alpha=-lr)
        exp_avg.mul_(beta2).add_(grad * (1.0 - beta2))
