"""GPU optimizers backed by the ``fused_adam``, ``fused_lamb`` and ``fused_lion`` ops.

``FusedAdam``, ``FusedLamb`` and ``FusedLion`` are ``torch.optim.Optimizer`` subclasses.
On a CUDA / ROCm device each step updates all parameters of a group that share a
dtype with one multi-tensor kernel launch (Lamb: three phases, its per-tensor norms
summed in a fixed order so that a step gives the same bits every run). Parameters may be fp32,
fp16 or bf16; the optimizer state (``exp_avg``, ``exp_avg_sq``) is fp32 and all math is
fp32, so half-precision parameters do not lose the small updates.

Parameters may have any layout (transposed, channels_last, strided views): the kernels
update a non-contiguous one through a contiguous copy written back after the step, the
fallback updates it in place; optimizer state is always contiguous.

When the op cannot run (not built and no JIT, tensors on the CPU, float64
parameters, ...) the step runs a PyTorch implementation of the same update and
warns once per op and reason. ``use_kernel=False`` forces that fallback,
``use_kernel=True`` makes it an error; ``opt.backend`` tells which path the last step took.

``FusedLamb`` (``kernels.optim.fused_lamb``) also takes apex's / DeepSpeed's options (global
grad-norm clipping, eps under the square root, bounds on the trust ratio) and reports the trust
ratios of its last step; see its docstring.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, ClassVar, Literal

import torch
from torch import Tensor
from torch.optim.optimizer import ParamsT

from kernels._gpu_load import GpuOp
from kernels.optim._common import (
    AdamHyper,
    KernelOptimizer,
    LionHyper,
    Scalar,
    StepCounts,
    hyperparams,
    renamed_argument,
)

__all__ = ["FusedAdam", "FusedLion"]

Backend = Literal["kernel", "fallback", "mixed"]

# One record per parameter updated in a step: (param, grad, state).
Entry = tuple[Tensor, Tensor, dict[str, Any]]

# What an optimizer works out once per param group before its updates (Lamb: the clip factor
# of the group's grads, per device), handed to both the kernel launch and the fallback.
GroupContext = dict[torch.device, Tensor] | None


@dataclass(frozen=True)
class FallbackStep:
    """One param's update by the PyTorch fallback, as ``_FusedOptimizer._fallback`` hands it to
    the rule: ``work`` is what the rule updates in place (p itself when fp32 / fp64, else an fp32
    copy written back to p afterwards), ``g`` the grad in work's dtype."""

    p: Tensor
    work: Tensor
    g: Tensor
    state: dict[str, Any]
    group: dict[str, Any]
    step: int
    context: GroupContext


def _fp32_state(state: dict[str, Any], key: str, like: Tensor) -> Tensor:
    """``state[key]`` as fp32 on the param's device (load_state_dict casts it to the param dtype)."""
    value: Tensor | None = state.get(key)
    if value is None:
        value = torch.zeros_like(like, dtype=torch.float32, memory_format=torch.contiguous_format)
    # Runs for every param on every step: the cheap checks first, the device comparison last.
    elif value.dtype is not torch.float32 or not value.is_contiguous() or value.device != like.device:
        value = value.to(device=like.device, dtype=torch.float32).contiguous()
    else:
        return value
    state[key] = value
    return value


def _math_view(p: Tensor) -> Tensor:
    """The tensor the fallback computes on: p itself when fp32 / fp64, else an fp32 copy."""
    return p if p.dtype in (torch.float32, torch.float64) else p.float()


def _update_moments(state: dict[str, Any], g: Tensor, betas: tuple[float, float]) -> tuple[Tensor, Tensor]:
    """Adam's moment updates, as the Adam and Lamb kernels do them; returns (exp_avg, exp_avg_sq)."""
    beta1, beta2 = betas
    m, v = state["exp_avg"], state["exp_avg_sq"]
    m.mul_(beta1).add_(g, alpha=1.0 - beta1)
    v.mul_(beta2).addcmul_(g, g, value=1.0 - beta2)
    return m, v


class _FusedOptimizer(KernelOptimizer):
    """The step loop of the three optimizers: group, resolve the op, update.

    The kernel call is ``module.<kernel_fn>(grads, params, *state lists, *scalars)``, with one
    list per name in ``state_keys`` (and, with ``takes_grad_scale``, the group context's value for
    the bucket's device last); ``_launched`` sees what it returns.
    """

    backend: Backend | None
    op: ClassVar[GpuOp]
    kernel_fn: ClassVar[str]
    state_keys: ClassVar[tuple[str, ...]]
    takes_grad_scale: ClassVar[bool] = False

    @torch.no_grad()
    def step(self, closure: Callable[[], float] | None = None) -> float | None:  # type: ignore[override]
        loss = self._run_closure(closure)
        used: set[Backend] = set()
        for index, group in enumerate(self.param_groups):
            # One launch per (device, dtype, step): the kernel takes one dtype and one step.
            buckets: dict[tuple[torch.device, torch.dtype, int], list[Entry]] = {}
            stepped: list[Entry] = []
            for p in group["params"]:
                grad = self._grad_of(p)
                if grad is None:
                    continue
                self._check(p, grad)
                state = self.state[p]
                if "step" not in state:
                    state["step"] = torch.tensor(0.0, dtype=torch.float32)
                for key in self.state_keys:
                    _fp32_state(state, key, p)
                stepped.append((p, grad.contiguous(), state))
            steps = self._step_counts().advance(index, [state for _, _, state in stepped])
            for entry, step in zip(stepped, steps):
                buckets.setdefault((entry[0].device, entry[0].dtype, step), []).append(entry)
            context = self._group_context(group, stepped)
            for (_device, _dtype, step), entries in buckets.items():
                tensors = [t for p, g, _ in entries for t in (p, g)]
                module = self.op.resolve(tensors, self.use_kernel)
                if module is None:
                    for p, g, state in entries:
                        self._fallback(p, g, state, group, step, context)
                    used.add("fallback")
                else:
                    # The kernels update dense, contiguous memory in place; a non-contiguous
                    # param (transposed, channels_last, a strided slice) is updated through a
                    # contiguous copy written back after the launch. Its state is contiguous
                    # in the param's logical order, as the copy is.
                    work = [p if p.is_contiguous() else p.contiguous() for p, _, _ in entries]
                    lists = [[g for _, g, _ in entries], work]
                    lists += [[state[key] for _, _, state in entries] for key in self.state_keys]
                    self._launch(module, lists, entries, group, step, context)
                    for (p, _, _), w in zip(entries, work):
                        if w is not p:
                            p.copy_(w)
                    used.add("kernel")
        if used:
            self.backend = "mixed" if len(used) > 1 else next(iter(used))
        return loss

    def _step_counts(self) -> StepCounts:
        # Made on first use: torch pickles an optimizer's defaults, state and groups only.
        counts: StepCounts | None = self.__dict__.get("_counts")
        if counts is None:
            counts = self.__dict__["_counts"] = StepCounts()
        return counts

    def _grad_of(self, p: Tensor) -> Tensor | None:
        """The gradient this step applies to ``p`` (None: ``p`` is not stepped)."""
        return p.grad

    def _check(self, p: Tensor, grad: Tensor) -> None:
        name = type(self).__name__
        if grad.is_sparse:
            raise ValueError(f"{name}: sparse gradients are not supported")
        if not p.is_floating_point():
            raise TypeError(f"{name}: params must be floating point, got {p.dtype}")
        if grad.dtype != p.dtype:
            raise TypeError(f"{name}: a {p.dtype} param has a {grad.dtype} grad; they must match")

    def _group_context(self, group: dict[str, Any], stepped: list[Entry]) -> GroupContext:
        """Per-group values the updates need beyond the hyperparameters; none by default."""
        return None

    def _kernel_scalars(self, group: dict[str, Any], step: int) -> tuple[Scalar, ...]:
        """The kernel's arguments after the tensor lists."""
        raise NotImplementedError

    def _launch(
        self,
        module: Any,
        lists: list[list[Tensor]],
        entries: list[Entry],
        group: dict[str, Any],
        step: int,
        context: GroupContext,
    ) -> None:
        """One kernel call over a bucket's lists (``lists[1]`` are the params or their copies)."""
        # The grad scale positionally, as every other argument: wrappers of the kernel function
        # (the self-tests' breakages) take (grads, params, *rest).
        scale = (None if context is None else context[entries[0][0].device],) if self.takes_grad_scale else ()
        result = getattr(module, self.kernel_fn)(*lists, *self._kernel_scalars(group, step), *scale)
        self._launched(entries, result)

    def _launched(self, entries: list[Entry], result: Any) -> None:
        """What the kernel returned for a bucket's ``entries``; nothing to keep by default."""

    def _fallback(
        self,
        p: Tensor,
        grad: Tensor,
        state: dict[str, Any],
        group: dict[str, Any],
        step: int,
        context: GroupContext,
    ) -> None:
        """The PyTorch update of one param: computed on ``_math_view(p)``, written back to p."""
        work = _math_view(p)
        self._fallback_update(FallbackStep(p, work, grad.to(work.dtype), state, group, step, context))
        if work is not p:
            p.copy_(work)

    def _fallback_update(self, s: FallbackStep) -> None:
        """The rule's update of ``s.work`` (and of the state) by ``s.g``."""
        raise NotImplementedError


class FusedAdam(_FusedOptimizer):
    """Adam (``adamw_mode=False``: L2 penalty added to the grad) or AdamW (default:
    decoupled weight decay), matching ``torch.optim.Adam`` / ``AdamW`` without amsgrad.

    ``adam_w_mode=`` is a deprecated spelling of ``adamw_mode=`` (it warns); ``adamw_mode`` is
    what ``CPUAdam`` and DeepSpeed's CPU Adam call it.
    """

    hyper = AdamHyper
    op = GpuOp("fused_adam")
    kernel_fn = "adam"
    state_keys = ("exp_avg", "exp_avg_sq")

    @renamed_argument("adam_w_mode", "adamw_mode")
    def __init__(
        self,
        params: ParamsT,
        lr: float = AdamHyper.lr,
        betas: tuple[float, float] = AdamHyper.betas,
        eps: float = AdamHyper.eps,
        weight_decay: float = AdamHyper.weight_decay,
        adamw_mode: bool = AdamHyper.adamw_mode,
        bias_correction: bool = AdamHyper.bias_correction,
        use_kernel: bool | None = None,
    ) -> None:
        options = AdamHyper(lr, betas, eps, weight_decay, adamw_mode, bias_correction)
        super().__init__(params, options, use_kernel)

    def _kernel_scalars(self, group: dict[str, Any], step: int) -> tuple[Scalar, ...]:
        floats = hyperparams(group, "lr", "betas", "eps", "weight_decay")
        return (*floats, step, bool(group["adamw_mode"]), bool(group["bias_correction"]))

    def _fallback_update(self, s: FallbackStep) -> None:
        group, work, g = s.group, s.work, s.g
        lr, eps, decay = float(group["lr"]), float(group["eps"]), float(group["weight_decay"])
        beta1, beta2 = group["betas"]
        if decay != 0.0:
            if group["adamw_mode"]:
                work.mul_(1.0 - lr * decay)
            else:
                g = g.add(work, alpha=decay)
        m, v = _update_moments(s.state, g, group["betas"])
        correction1 = 1.0 - beta1**s.step if group["bias_correction"] else 1.0
        correction2_sqrt = math.sqrt(1.0 - beta2**s.step) if group["bias_correction"] else 1.0
        denom = (v.sqrt() / correction2_sqrt).add_(eps)
        work.addcdiv_(m, denom, value=-lr / correction1)


class FusedLion(_FusedOptimizer):
    """Lion: p = p * (1 - lr * wd) - lr * sign(beta1 * m + (1 - beta1) * g);
    then m = beta2 * m + (1 - beta2) * g."""

    hyper = LionHyper
    op = GpuOp("fused_lion")
    kernel_fn = "lion"
    state_keys = ("exp_avg",)

    def __init__(
        self,
        params: ParamsT,
        lr: float = LionHyper.lr,
        betas: tuple[float, float] = LionHyper.betas,
        weight_decay: float = LionHyper.weight_decay,
        use_kernel: bool | None = None,
    ) -> None:
        super().__init__(params, LionHyper(lr, betas, weight_decay), use_kernel)

    def _kernel_scalars(self, group: dict[str, Any], step: int) -> tuple[Scalar, ...]:
        return hyperparams(group, "lr", "betas", "weight_decay")

    def _fallback_update(self, s: FallbackStep) -> None:
        work, g = s.work, s.g
        lr, decay = float(s.group["lr"]), float(s.group["weight_decay"])
        beta1, beta2 = s.group["betas"]
        m = s.state["exp_avg"]
        # Each product rounded on its own, then the sum, as the kernel does: add_(g, alpha=...)
        # is one fused multiply-add in torch's vector code, and sign() turns the ulp that moves
        # near zero into a step of 2 * lr.
        direction = m.mul(beta1).add_(g.mul(1.0 - beta1)).sign_()
        if decay != 0.0:
            work.mul_(1.0 - lr * decay)
        work.add_(direction, alpha=-lr)  # lr * direction is exact
        m.mul_(beta2).add_(g.mul(1.0 - beta2))
