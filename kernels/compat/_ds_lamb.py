"""DeepSpeed's ``FusedLamb``: its LAMB rule, which differs from ours on purpose, on our kernel.

DeepSpeed's rule (deepspeed/ops/lamb, csrc/lamb/fused_lamb_cuda_kernel.cu), per param tensor::

    g = grad / combined_scale        # scale, times the clip factor when max_grad_norm > 0
    m = b1 * m + (1 - b1) * g
    v = b2 * v + (1 - b2) * g^2
    u = m / (sqrt(v) + eps) + weight_decay * p      # sqrt(v + eps) with eps_inside_sqrt
    coeff = clamp(||p|| / ||u||, min_coeff, max_coeff), or 1 when either norm is 0
    p -= lr * sqrt(1 - b2^t) / (1 - b1^t) * coeff * u   # lr alone without bias_correction

Ours (``kernels.optim.FusedLamb``, as in apex and the paper) bias-corrects m and v inside the
update, before the trust ratio. DeepSpeed's rule is ours with ``bias_correction=False``, the
step's lr scaled by ``sqrt(1 - b2^t) / (1 - b1^t)`` (the ratio does not depend on lr), the
grads multiplied by ``1 / combined_scale`` (our kernel's device-side grad scale) and the ratio
bounds and eps placement of our options; so this class is our optimizer with that translation,
and runs the fused_lamb kernel on a GPU (our PyTorch fallback elsewhere).
"""

from __future__ import annotations

import math
import types
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any

import torch
from torch import Tensor
from torch.optim.optimizer import ParamsT

from kernels.compat._ds_cpu import refuse_amsgrad
from kernels.optim._common import Hyper, KernelOptimizer, Scalar, check_betas, check_nonnegative
from kernels.optim.fused import Entry, FallbackStep, GroupContext
from kernels.optim.fused_lamb import FusedLamb as _NativeLamb

__all__ = ["DeepSpeedLambHyper", "FusedLamb"]

Closure = Callable[[], float] | None


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


class FusedLamb(_NativeLamb):
    """``deepspeed.ops.lamb.FusedLamb``: DeepSpeed's signature, step arguments and LAMB rule (see
    the module's docstring), ``lamb_coeffs`` / ``get_lamb_coeffs()`` after each step."""

    hyper = DeepSpeedLambHyper  # type: ignore[assignment]  # DeepSpeed's options and defaults

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
        # The base of our FusedLamb, not its constructor: the group options are DeepSpeed's
        # (their names are ours; bias_correction and max_grad_norm are translated per step).
        KernelOptimizer.__init__(self, params, options, use_kernel=None)
        self._last_ratios = []
        self._grads: dict[int, Tensor] = {}
        self._grad_scales: dict[int, float] = {}
        self.eps_mode = 0 if eps_inside_sqrt else 1  # DeepSpeed's attribute

    def __setstate__(self, state: dict[str, Any]) -> None:
        super().__setstate__(state)
        self.__dict__.setdefault("_grads", {})  # torch pickles only defaults, state, groups
        self.__dict__.setdefault("_grad_scales", {})

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
        loss = self._run_closure(closure)  # before the grads are read, as DeepSpeed does
        groups = len(self.param_groups)
        all_grads = _per_group(grads, groups, "grads")
        all_outputs = _per_group(output_params, groups, "output_params")
        all_norms = [None] * groups if grad_norms is None else list(grad_norms)
        if len(all_norms) != groups:
            raise ValueError(
                f"FusedLamb.step: grad_norms has {len(all_norms)} groups, the optimizer {groups}"
            )
        outputs: list[tuple[Tensor, Tensor]] = []
        self._grads, self._grad_scales = {}, {}
        for group, group_grads, group_outputs, norms in zip(
            self.param_groups, all_grads, all_outputs, all_norms, strict=True
        ):
            outputs += self._take_grads(group, group_grads, group_outputs, norms, float(scale))
        try:
            super().step()
        finally:
            self._grads, self._grad_scales = {}, {}
        for p, output in outputs:
            output.copy_(p.detach().reshape(output.shape))
        return loss

    @property
    def lamb_coeffs(self) -> list[Tensor]:
        """DeepSpeed's attribute: the ratio of each param the last step updated, in order (read
        from ``trust_ratios()`` when asked, not gathered on every step)."""
        return [ratio for ratio in self.trust_ratios() if ratio is not None]

    def get_lamb_coeffs(self) -> list[float]:
        """The trust ratio each param was updated with in the last step, in order."""
        return [float(coeff.item()) for coeff in self.lamb_coeffs]

    def _take_grads(
        self, group: dict[str, Any], grads: Any, outputs: Any, norms: Any, scale: float
    ) -> list[tuple[Tensor, Tensor]]:
        """Record the grads this step applies to the group's params and the group's grad scale;
        returns the (param, output copy) pairs to write after the step."""
        params = group["params"]
        grads = _per_param(grads, len(params), "grads")
        outputs = _per_param(outputs, len(params), "output_params")
        # DeepSpeed zips one number with the group's params, updating only the first: the
        # number is the group's norm, so it applies to every param here.
        if not isinstance(norms, (list, tuple)):
            norms = [norms] * len(params)
        norms = _per_param(norms, len(params), "grad_norms")
        taken: list[tuple[Tensor, Tensor, float]] = []
        written: list[tuple[Tensor, Tensor]] = []
        for p, grad, output, norm in zip(params, grads, outputs, norms, strict=True):
            grad = p.grad if grad is None else grad
            if grad is None:
                continue
            if grad.is_sparse:
                raise RuntimeError("FusedLamb does not support sparse gradients")
            taken.append((p, grad, self._combined_scale(group, scale, norm)))
            if output is not None:
                written.append((p, output))
        scales = {combined for _, _, combined in taken}
        uniform = len(scales) == 1
        if uniform:
            self._grad_scales[id(group)] = scales.pop()
        for p, grad, combined in taken:
            if not uniform:
                # One grad scale per kernel launch: per-param norms that clip differently are
                # applied here instead, in fp32 (fp64 for fp64 params), before the step.
                grad = grad.to(torch.float64 if p.dtype == torch.float64 else torch.float32) / combined
            # DeepSpeed takes fp16 grads for fp32 params: the kernel takes the param's dtype.
            self._grads[id(p)] = grad.to(p.dtype)
        return written

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

    # ------------------------------------------------ the translation to our rule

    def _grad_of(self, p: Tensor) -> Tensor | None:
        return self._grads.get(id(p))

    def _group_context(self, group: dict[str, Any], stepped: list[Entry]) -> GroupContext:
        combined = self._grad_scales.get(id(group), 1.0)
        if combined == 1.0 or not stepped:
            return None
        # 1 / combined in double, rounded once to fp32: the kernel multiplies where DeepSpeed
        # divides (within an ulp). Filled on the device: torch.tensor(..., device=cuda) copies
        # from pageable host memory, which waits for the stream, once per step.
        devices = {p.device for p, _, _ in stepped}
        return {d: torch.full((), 1.0 / combined, dtype=torch.float32, device=d) for d in devices}

    def _kernel_scalars(self, group: dict[str, Any], step: int) -> tuple[Scalar, ...]:
        return super()._kernel_scalars(_as_our_rule(group, step), step)

    def _fallback_update(self, s: FallbackStep) -> None:
        super()._fallback_update(replace(s, group=_as_our_rule(s.group, s.step)))


def _as_our_rule(group: dict[str, Any], step: int) -> dict[str, Any]:
    """A DeepSpeed group as our rule's options for one step: bias correction moved into lr, and
    no clipping of ours (DeepSpeed's clip is in the grad scale)."""
    lr = float(group["lr"])
    if group["bias_correction"]:
        beta1, beta2 = (float(b) for b in group["betas"])
        lr *= math.sqrt(1.0 - beta2**step) / (1.0 - beta1**step)
    return {**group, "lr": lr, "bias_correction": False, "max_grad_norm": 0.0}
