"""CPU optimizers backed by the ``cpu_adam``, ``cpu_adagrad`` and ``cpu_lion`` ops.

``CPUAdam``, ``CPUAdagrad`` and ``CPULion`` are ``torch.optim.Optimizer`` subclasses that
update fp32 CPU parameters in place with one SIMD + OpenMP pass per tensor, and can write
``params.to(bf16 | fp16)`` into a half-precision copy in the same pass
(``opt.step(half_params=[...])``, one entry per parameter).

The op is loaded on the first step. When it cannot load (no compiler, JIT disabled and not
installed, ...), the optimizer runs a pure-PyTorch implementation of the same update and
warns once per op per process with the reason. ``use_kernel=False`` forces that fallback,
``use_kernel=True`` makes a missing kernel an error; ``opt.backend`` tells which path ran.

State keys and step counters follow torch (``step``, ``exp_avg``, ``exp_avg_sq``, ``sum``), so
a ``torch.optim.Adam`` / ``AdamW`` or ``Adagrad`` state dict loads into the matching optimizer.

``set_simd_level("scalar" | "avx2" | "avx512" | "auto")`` forces the kernels' instruction set
(tests run each path); by default each op uses the best one the CPU supports, probed once.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from types import ModuleType
from typing import Any, ClassVar, Literal

import torch
from torch import Tensor
from torch.optim.optimizer import ParamsT

from kernels._op_load import LazyOp
from kernels._optim_common import (
    AdagradHyper,
    AdamHyper,
    KernelOptimizer,
    LionHyper,
    Scalar,
    advance_step,
    hyperparams,
)
from op_builder.errors import OpLoadError

__all__ = ["CPUAdagrad", "CPUAdam", "CPULion", "set_simd_level", "simd_level", "supported_simd_level"]

Backend = Literal["kernel", "fallback"]
SimdLevel = Literal["auto", "scalar", "avx2", "avx512"]
_SIMD_LEVELS: tuple[SimdLevel, ...] = ("auto", "scalar", "avx2", "avx512")

# Per process: the op modules loaded so far, and the SIMD level every one of them must use.
_MODULES: dict[str, ModuleType] = {}
_simd_level: SimdLevel = "auto"


def set_simd_level(level: SimdLevel) -> None:
    """Force the instruction set of every CPU optimizer op: scalar, avx2, avx512, or auto.

    For tests and comparisons; ``auto`` (the default) uses the best one the CPU supports.
    Applies to ops already loaded and to ops loaded later. Raises ValueError for a level
    this CPU cannot run.
    """
    global _simd_level
    if level not in _SIMD_LEVELS:
        raise ValueError(f"unknown SIMD level {level!r}; expected one of {', '.join(_SIMD_LEVELS)}")
    for module in _MODULES.values():
        module.set_simd_level(level)
    _simd_level = level


def simd_level(op: str) -> str | None:
    """The instruction set ``op``'s next step runs (scalar, avx2 or avx512); None before it loads.

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
        module.set_simd_level(_simd_level)
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


def _check_param(name: str, p: Tensor, half: Tensor | None) -> None:
    # Checked here for both paths, so the fallback refuses what the kernel refuses.
    if p.dtype != torch.float32:
        raise TypeError(
            f"{name}: params must be float32, got {p.dtype} (keep fp32 master params and pass "
            "the reduced-precision copies as half_params)"
        )
    if p.device.type != "cpu":
        raise ValueError(f"{name}: params must be CPU tensors, got one on {p.device}")
    if not p.is_contiguous():
        raise ValueError(f"{name}: params must be contiguous")
    if p.grad is not None and p.grad.is_sparse:
        raise ValueError(f"{name}: sparse gradients are not supported")
    if p.grad is not None and p.grad.dtype != torch.float32:
        raise TypeError(f"{name}: gradients must be float32, got {p.grad.dtype}")
    if half is None:
        return
    if half.dtype not in (torch.bfloat16, torch.float16):
        raise TypeError(f"{name}: half_params entries must be bfloat16 or float16, got {half.dtype}")
    if half.device.type != "cpu" or not half.is_contiguous():
        raise ValueError(f"{name}: half_params entries must be contiguous CPU tensors")
    if half.numel() != p.numel():
        raise ValueError(
            f"{name}: a half_params entry has {half.numel()} elements but its param has {p.numel()}"
        )


class _CPUOptimizer(KernelOptimizer):
    """The step loop shared by the three optimizers; subclasses supply state and updates.

    The kernel call is ``module.<kernel_fn>(param, grad, *state[state_keys], half, *scalars)``.
    """

    backend: Backend | None
    op_name: ClassVar[str]
    kernel_fn: ClassVar[str]
    state_keys: ClassVar[tuple[str, ...]]

    @torch.no_grad()
    def step(  # type: ignore[override]
        self,
        closure: Callable[[], float] | None = None,
        half_params: Sequence[Tensor | None] | None = None,
    ) -> float | None:
        """One update of every parameter that has a gradient.

        half_params: one tensor (bf16 or fp16, same numel) or None per parameter, in
        param-group order; each receives its parameter's new values, converted as
        ``param.to(dtype)`` would.
        """
        loss = self._run_closure(closure)
        params = [p for group in self.param_groups for p in group["params"]]
        if half_params is not None and len(half_params) != len(params):
            raise ValueError(
                f"{type(self).__name__}: half_params has {len(half_params)} entries but the "
                f"optimizer has {len(params)} params (give one per param, None to skip one)"
            )
        module = _resolve(self.op_name, self.use_kernel)
        self.backend = "fallback" if module is None else "kernel"
        index = 0
        for group in self.param_groups:
            for p in group["params"]:
                half = half_params[index] if half_params is not None else None
                index += 1
                if p.grad is None:
                    continue
                _check_param(type(self).__name__, p, half)
                state = self.state[p]
                if not state:
                    self._init_state(p, group, state)
                grad = p.grad.contiguous()  # the kernel reads grads densely; a no-op for most
                if module is None:
                    self._fallback_update(p, grad, state, group, half)
                else:
                    tensors = [state[key] for key in self.state_keys]
                    scalars = self._kernel_scalars(state, group)
                    getattr(module, self.kernel_fn)(p, grad, *tensors, half, *scalars)
        return loss

    def _init_state(self, p: Tensor, group: dict[str, Any], state: dict[str, Any]) -> None:
        raise NotImplementedError

    def _kernel_scalars(self, state: dict[str, Any], group: dict[str, Any]) -> tuple[Scalar, ...]:
        """The kernel's arguments after ``half``; counts the step when the kernel takes one."""
        raise NotImplementedError

    def _fallback_update(
        self, p: Tensor, grad: Tensor, state: dict[str, Any], group: dict[str, Any], half: Tensor | None
    ) -> None:
        raise NotImplementedError


class CPUAdam(_CPUOptimizer):
    """Adam (``adamw_mode=False``, L2 penalty) or AdamW (default, decoupled weight decay).

    Matches ``torch.optim.AdamW`` / ``torch.optim.Adam`` with ``bias_correction=True``;
    ``bias_correction=False`` uses ``lr`` and ``sqrt(exp_avg_sq)`` uncorrected.
    """

    hyper = AdamHyper
    op_name: ClassVar[str] = "cpu_adam"
    kernel_fn: ClassVar[str] = "adam_step"
    state_keys: ClassVar[tuple[str, ...]] = ("exp_avg", "exp_avg_sq")

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
        state["exp_avg"] = torch.zeros_like(p, memory_format=torch.contiguous_format)
        state["exp_avg_sq"] = torch.zeros_like(p, memory_format=torch.contiguous_format)

    def _kernel_scalars(self, state: dict[str, Any], group: dict[str, Any]) -> tuple[Scalar, ...]:
        floats = hyperparams(group, "lr", "betas", "eps", "weight_decay")
        return (advance_step(state), *floats, bool(group["bias_correction"]), bool(group["adamw_mode"]))

    def _fallback_update(
        self, p: Tensor, grad: Tensor, state: dict[str, Any], group: dict[str, Any], half: Tensor | None
    ) -> None:
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
        if half is not None:
            half.copy_(p)


class CPUAdagrad(_CPUOptimizer):
    """Adagrad with ``torch.optim.Adagrad`` semantics (lr_decay, weight_decay, initial accumulator)."""

    hyper = AdagradHyper
    op_name: ClassVar[str] = "cpu_adagrad"
    kernel_fn: ClassVar[str] = "adagrad_step"
    state_keys: ClassVar[tuple[str, ...]] = ("sum",)

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
        state["sum"] = torch.full_like(p, init, memory_format=torch.contiguous_format)

    def _kernel_scalars(self, state: dict[str, Any], group: dict[str, Any]) -> tuple[Scalar, ...]:
        return (advance_step(state), *hyperparams(group, "lr", "lr_decay", "eps", "weight_decay"))

    def _fallback_update(
        self, p: Tensor, grad: Tensor, state: dict[str, Any], group: dict[str, Any], half: Tensor | None
    ) -> None:
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
        if half is not None:
            half.copy_(p)


class CPULion(_CPUOptimizer):
    """Lion: ``p = p * (1 - lr * wd) - lr * sign(beta1 * m + (1 - beta1) * g)``,
    then ``m = beta2 * m + (1 - beta2) * g``."""

    hyper = LionHyper
    op_name: ClassVar[str] = "cpu_lion"
    kernel_fn: ClassVar[str] = "lion_step"
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
        state["exp_avg"] = torch.zeros_like(p, memory_format=torch.contiguous_format)

    def _kernel_scalars(self, state: dict[str, Any], group: dict[str, Any]) -> tuple[Scalar, ...]:
        return hyperparams(group, "lr", "betas", "weight_decay")

    def _fallback_update(
        self, p: Tensor, grad: Tensor, state: dict[str, Any], group: dict[str, Any], half: Tensor | None
    ) -> None:
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
        if half is not None:
            half.copy_(p)
