"""DeepSpeed's ``FusedLamb``: its LAMB rule, which differs from ours on purpose, in PyTorch.

DeepSpeed's rule (deepspeed/ops/lamb, csrc/lamb/fused_lamb_cuda_kernel.cu), per param tensor::

    g = grad / combined_scale        # scale, times the clip factor when max_grad_norm > 0
    m = b1 * m + (1 - b1) * g
    v = b2 * v + (1 - b2) * g^2
    u = m / (sqrt(v) + eps) + weight_decay * p      # sqrt(v + eps) with eps_inside_sqrt
    coeff = clamp(||p|| / ||u||, min_coeff, max_coeff), or 1 when either norm is 0
    p -= lr * sqrt(1 - b2^t) / (1 - b1^t) * coeff * u   # lr alone without bias_correction

Ours (``kernels.optim.FusedLamb``, as in apex and the paper) bias-corrects m and v inside the
update, before the trust ratio, and does not clamp the ratio. No kernel here computes DeepSpeed's
rule, so this class runs it in PyTorch, on whatever device the params are on (a chain of torch
ops per param on a GPU: correct, slower than a fused kernel; it says so once).
"""

from __future__ import annotations

import math
import types
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor
from torch.optim.optimizer import ParamsT

from kernels._optim_common import Hyper, KernelOptimizer, advance_step, check_betas, check_nonnegative
from kernels.compat._ds_cpu import refuse_amsgrad

__all__ = ["DeepSpeedLambHyper", "FusedLamb"]

Closure = Callable[[], float] | None

_warned_device = False


@dataclass(frozen=True)
class DeepSpeedLambHyper(Hyper):
    """DeepSpeed's FusedLamb options, its defaults and order; checked as torch checks its own."""

    lr: float = 1e-3
    bias_correction: bool = True
    betas: tuple[float, float] = (0.9, 0.999)
    eps: float = 1e-8
    eps_inside_sqrt: bool = False
    weight_decay: float = 0.0
    max_grad_norm: float = 0.0
    max_coeff: float = 10.0
    min_coeff: float = 0.01

    def __post_init__(self) -> None:
        check_nonnegative(
            learning_rate=self.lr,
            epsilon=self.eps,
            weight_decay=self.weight_decay,
            max_grad_norm=self.max_grad_norm,
            max_coeff=self.max_coeff,
            min_coeff=self.min_coeff,
        )
        check_betas(self.betas)


def _per_group(value: Any, groups: int, what: str) -> list[Any]:
    """DeepSpeed's step arguments, one entry per param group: None for each group when not given;
    a generator or a flat list is the first group's."""
    if value is None:
        return [None] * groups
    if isinstance(value, types.GeneratorType):
        value = [list(value)]
    elif not isinstance(value[0], list):
        value = [value]
    if len(value) != groups:  # DeepSpeed's zip would skip the groups left over
        raise ValueError(f"FusedLamb.step: {what} has {len(value)} groups, the optimizer {groups}")
    return list(value)


def _per_param(value: Any, params: int, what: str) -> Sequence[Any]:
    if value is None:
        return [None] * params
    entries = list(value)
    if len(entries) != params:
        raise ValueError(f"FusedLamb.step: {what} has {len(entries)} entries for a group of {params} params")
    return entries


class FusedLamb(KernelOptimizer):
    """``deepspeed.ops.lamb.FusedLamb``: DeepSpeed's signature, step arguments and LAMB rule (see
    the module's docstring), ``lamb_coeffs`` / ``get_lamb_coeffs()`` after each step."""

    hyper = DeepSpeedLambHyper
    lamb_coeffs: list[Tensor]

    def __init__(
        self,
        params: ParamsT,
        lr: float = 1e-3,
        bias_correction: bool = True,
        betas: tuple[float, float] = (0.9, 0.999),
        eps: float = 1e-8,
        eps_inside_sqrt: bool = False,
        weight_decay: float = 0.0,
        max_grad_norm: float = 0.0,
        max_coeff: float = 10.0,
        min_coeff: float = 0.01,
        amsgrad: bool = False,
    ) -> None:
        refuse_amsgrad("FusedLamb", amsgrad)
        options = DeepSpeedLambHyper(
            lr,
            bias_correction,
            betas,
            eps,
            eps_inside_sqrt,
            weight_decay,
            max_grad_norm,
            max_coeff,
            min_coeff,
        )
        super().__init__(params, options, use_kernel=False)
        self.eps_mode = 0 if eps_inside_sqrt else 1  # DeepSpeed's attribute
        self.lamb_coeffs = []

    def __setstate__(self, state: dict[str, Any]) -> None:
        super().__setstate__(state)
        self.__dict__.setdefault("lamb_coeffs", [])  # torch pickles only defaults, state, groups
        self.__dict__.setdefault("use_kernel", False)
        self.__dict__.setdefault("backend", None)

    @torch.no_grad()
    def step(  # type: ignore[override]  # DeepSpeed's signature
        self,
        closure: Closure = None,
        grads: Any = None,
        output_params: Any = None,
        scale: float = 1.0,
        grad_norms: Any = None,
    ) -> float | None:
        """One update of every param that has a gradient (or an entry in ``grads``).

        grads: gradients to use instead of ``p.grad`` (fp16 ones for fp32 params, say), one list
        per param group or one list for one group. output_params: reduced-precision copies that
        receive the updated params, laid out as grads. scale: the gradients are divided by it.
        grad_norms: per group, the gradients' norm (one number, or one per param); needed when
        max_grad_norm > 0, to clip as DeepSpeed does.
        """
        loss = self._run_closure(closure)
        groups = len(self.param_groups)
        all_grads = _per_group(grads, groups, "grads")
        all_outputs = _per_group(output_params, groups, "output_params")
        all_norms = [None] * groups if grad_norms is None else list(grad_norms)
        if len(all_norms) != groups:
            raise ValueError(
                f"FusedLamb.step: grad_norms has {len(all_norms)} groups, the optimizer {groups}"
            )
        self.lamb_coeffs.clear()
        for group, group_grads, outputs, norms in zip(
            self.param_groups, all_grads, all_outputs, all_norms, strict=True
        ):
            params = group["params"]
            group_grads = _per_param(group_grads, len(params), "grads")
            outputs = _per_param(outputs, len(params), "output_params")
            # DeepSpeed zips one number with the group's params, updating only the first: the
            # number is the group's norm, so it applies to every param here.
            if not isinstance(norms, (list, tuple)):
                norms = [norms] * len(params)
            norms = _per_param(norms, len(params), "grad_norms")
            for p, grad, output, norm in zip(params, group_grads, outputs, norms, strict=True):
                if grad is None:
                    grad = p.grad
                if grad is None:
                    continue
                if grad.is_sparse:
                    raise RuntimeError("FusedLamb does not support sparse gradients")
                self._update(p, grad, output, group, self._combined_scale(group, float(scale), norm))
        return loss

    def get_lamb_coeffs(self) -> list[float]:
        """The trust ratio each param was updated with in the last step, in order."""
        return [float(coeff.item()) for coeff in self.lamb_coeffs]

    @staticmethod
    def _combined_scale(group: dict[str, Any], scale: float, norm: Any) -> float:
        max_grad_norm = float(group["max_grad_norm"])
        if max_grad_norm <= 0:
            return scale
        if norm is None:
            raise ValueError(
                "FusedLamb: max_grad_norm > 0 clips by the gradients' norm, which step() takes as "
                "grad_norms= (as in DeepSpeed); pass it, or max_grad_norm=0"
            )
        clip = ((float(norm) / scale) + 1e-6) / max_grad_norm
        return clip * scale if clip > 1 else scale

    def _update(
        self, p: Tensor, grad: Tensor, output: Tensor | None, group: dict[str, Any], combined_scale: float
    ) -> None:
        global _warned_device
        if p.device.type != "cpu" and not _warned_device:
            _warned_device = True
            warnings.warn(
                "kernels.compat.deepspeed.FusedLamb runs DeepSpeed's LAMB rule in PyTorch: the "
                "fused_lamb kernel computes kernels.optim.FusedLamb's rule (see docs/deepspeed.md)",
                RuntimeWarning,
                stacklevel=4,
            )
        self.backend = "fallback"
        # fp32 math (fp64 for fp64 params) and state, whatever the params' dtype.
        work = p if p.dtype in (torch.float32, torch.float64) else p.float()
        state = self.state[p]
        if "step" not in state:
            state["step"] = torch.tensor(0.0, dtype=torch.float32)
        for key in ("exp_avg", "exp_avg_sq"):
            held = state.get(key)
            if held is None:
                state[key] = torch.zeros_like(work, memory_format=torch.contiguous_format)
            elif held.dtype != work.dtype or held.device != work.device:
                state[key] = held.to(device=work.device, dtype=work.dtype)  # load_state_dict casts
        step = advance_step(state)
        lr, eps, decay = float(group["lr"]), float(group["eps"]), float(group["weight_decay"])
        beta1, beta2 = (float(b) for b in group["betas"])
        g = grad.to(work.dtype) / combined_scale
        m, v = state["exp_avg"], state["exp_avg_sq"]
        m.mul_(beta1).add_(g, alpha=1.0 - beta1)
        v.mul_(beta2).addcmul_(g, g, value=1.0 - beta2)
        denom = (v + eps).sqrt_() if group["eps_inside_sqrt"] else v.sqrt().add_(eps)
        update = (m / denom).add_(work, alpha=decay)
        param_norm, update_norm = work.norm(), update.norm()
        # min after max, as DeepSpeed's kernel clamps: min_coeff wins if the two cross.
        ratio = (
            (param_norm / update_norm)
            .clamp(max=float(group["max_coeff"]))
            .clamp(min=float(group["min_coeff"]))
        )
        # Stay on the device: a tensor ratio avoids a host sync per param.
        coeff = torch.where((param_norm != 0) & (update_norm != 0), ratio, torch.ones_like(ratio))
        step_size = lr
        if group["bias_correction"]:
            step_size = lr * math.sqrt(1.0 - beta2**step) / (1.0 - beta1**step)
        work.sub_(update.mul_(coeff * step_size))
        if work is not p:
            p.copy_(work)
        if output is not None:
            output.copy_(work.reshape(output.shape))
        self.lamb_coeffs.append(coeff)
