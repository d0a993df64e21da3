"""``FusedLamb``: the ``fused_lamb`` op's optimizer, on the shared machinery of
``kernels.optim.fused`` (see there for dtypes, layouts and the fallback)."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import torch
from torch import Tensor
from torch.optim.optimizer import ParamsT

from kernels._gpu_load import GpuOp
from kernels.optim._common import LambHyper, Scalar, hyperparams
from kernels.optim.fused import Entry, FallbackStep, GroupContext, _FusedOptimizer, _update_moments

__all__ = ["FusedLamb"]


def _coeff_bounds(group: dict[str, Any]) -> tuple[float, float]:
    """The group's trust-ratio bounds as the kernel takes them: 0 and +inf where unbounded,
    which leave every ratio as it is (a ratio is > 0 when both norms are)."""
    low, high = group["min_coeff"], group["max_coeff"]
    return (0.0 if low is None else float(low), math.inf if high is None else float(high))


def _clip_factors(grads: list[Tensor], max_norm: float) -> dict[torch.device, Tensor]:
    """apex FusedLAMB's clip factor ``max_norm / max(N, max_norm)``, N the L2 norm of all of
    ``grads`` together, as a 0-d fp32 tensor on each of their devices; exactly 1 when
    N <= max_norm, so clipping that does not bite changes no bit of the step.

    Device ops only (per-tensor norms, then the norm of those): a GPU step does not wait for
    the GPU. Half grads are reduced in fp32 (a norm in fp16 overflows past 65504)."""
    by_device: dict[torch.device, list[Tensor]] = {}
    for g in grads:
        by_device.setdefault(g.device, []).append(g)
    totals: list[Tensor] = []
    for listed in by_device.values():
        narrow = [g for g in listed if g.dtype != torch.float64]
        wide = [g for g in listed if g.dtype == torch.float64]
        # _foreach_norm refuses to narrow fp64 to an fp32 result: those are reduced in fp64.
        norms = list(torch._foreach_norm(narrow, 2, dtype=torch.float32)) if narrow else []
        norms += [n.float() for n in torch._foreach_norm(wide)] if wide else []
        totals.append(torch.linalg.vector_norm(torch.stack(norms)))
    total = totals[0]
    if len(totals) > 1:
        total = torch.linalg.vector_norm(torch.stack([t.to(total.device) for t in totals]))
    limit = torch.full_like(total, max_norm)
    factor = limit / torch.maximum(total, limit)
    return {device: factor.to(device) for device in by_device}


class FusedLamb(_FusedOptimizer):
    """Lamb, per param tensor, with fp32 state and math::

        g = grad * c                                   # c = 1 unless max_grad_norm > 0
        m = b1 * m + (1 - b1) * g
        v = b2 * v + (1 - b2) * g^2
        m_hat = m / (1 - b1^t), v_hat = v / (1 - b2^t)    # m, v without bias_correction
        u = m_hat / (sqrt(v_hat) + eps) + weight_decay * p   # sqrt(v_hat + eps): eps_inside_sqrt
        r = clamp(||p|| / ||u||, min_coeff, max_coeff), or 1 when either norm is 0
        p -= lr * r * u

    The options are keyword-only, and off by default; off, this is the update of the paper and
    of apex's FusedLAMB (adam_w_mode=True, grad_averaging=True) without its clipping.

    max_grad_norm: 0 (default) does not clip. Above 0, apex's global grad-norm clipping:
        c = max_grad_norm / max(N, max_grad_norm), N the L2 norm of this step's grads of every
        param of the group (before anything else touches them), so the clipped grads' norm is
        at most max_grad_norm. apex divides by max(N / max_grad_norm, 1), the same up to
        rounding; apex takes N over all groups and the optimizer's max_grad_norm, here each
        group is clipped by its own grads and its own max_grad_norm (the same with one group).
        c is a device value: computing it does not wait for the GPU.
    eps_inside_sqrt: eps under the square root, as DeepSpeed's Lamb and Adam offer it.
    min_coeff, max_coeff: None (default) leaves that side of the trust ratio unbounded. When
        both are given the ratio is clamped to max_coeff first, then to min_coeff, as DeepSpeed
        does; the constructor refuses min_coeff > max_coeff, so the order shows only in a group
        edited afterwards (min_coeff then wins). The 1 taken when a norm is 0 is not clamped.

    ``trust_ratios()`` reads the ratio r each param was updated with in the last step.

    DeepSpeed places bias correction outside the trust ratio (m, v uncorrected in u, then
    p -= lr * sqrt(1 - b2^t) / (1 - b1^t) * r * u): that is this rule with bias_correction=False
    and lr scaled by sqrt(1 - b2^t) / (1 - b1^t) for the step, since r does not depend on lr.
    """

    hyper = LambHyper
    op = GpuOp("fused_lamb")
    kernel_fn = "lamb"
    state_keys = ("exp_avg", "exp_avg_sq")
    takes_grad_scale = True  # the clip factor (GroupContext) of the bucket's device
    # Per bucket of the last step: its params, and a 1-D fp32 tensor of their trust ratios.
    _last_ratios: list[tuple[list[Tensor], Tensor]]

    def __init__(
        self,
        params: ParamsT,
        lr: float = LambHyper.lr,
        betas: tuple[float, float] = LambHyper.betas,
        eps: float = LambHyper.eps,
        weight_decay: float = LambHyper.weight_decay,
        bias_correction: bool = LambHyper.bias_correction,
        use_kernel: bool | None = None,
        *,
        max_grad_norm: float = LambHyper.max_grad_norm,
        eps_inside_sqrt: bool = LambHyper.eps_inside_sqrt,
        min_coeff: float | None = LambHyper.min_coeff,
        max_coeff: float | None = LambHyper.max_coeff,
    ) -> None:
        options = LambHyper(
            lr,
            betas,
            eps,
            weight_decay,
            bias_correction,
            max_grad_norm,
            eps_inside_sqrt,
            min_coeff,
            max_coeff,
        )
        super().__init__(params, options, use_kernel)
        self._last_ratios = []

    def __setstate__(self, state: dict[str, Any]) -> None:
        super().__setstate__(state)
        self.__dict__.setdefault("_last_ratios", [])  # torch pickles only defaults, state, groups

    @torch.no_grad()
    def step(self, closure: Callable[[], float] | None = None) -> float | None:  # type: ignore[override]
        self._last_ratios = []
        return super().step(closure)

    def trust_ratios(self) -> list[Tensor | None]:
        """The trust ratio r each param was updated with in the last ``step()``.

        One entry per param of ``param_groups``, in their order (``[p for g in opt.param_groups
        for p in g["params"]]``): a 0-d fp32 tensor on the param's device, or None for a param
        the last step did not update (it had no grad). The values stay on the device, so that a
        step never waits for the GPU; ``float(r)`` waits for that step only when asked. They
        are not optimizer state: not in ``state_dict()``, and gone after unpickling.
        """
        found: dict[int, Tensor] = {}
        for params, ratios in self._last_ratios:
            for p, ratio in zip(params, ratios.unbind()):
                found[id(p)] = ratio
        return [found.get(id(p)) for group in self.param_groups for p in group["params"]]

    def _group_context(self, group: dict[str, Any], stepped: list[Entry]) -> GroupContext:
        max_norm = float(group["max_grad_norm"])
        if max_norm <= 0.0 or not stepped:
            return None
        return _clip_factors([g for _, g, _ in stepped], max_norm)

    def _kernel_scalars(self, group: dict[str, Any], step: int) -> tuple[Scalar, ...]:
        floats = hyperparams(group, "lr", "betas", "eps", "weight_decay")
        switches = (bool(group["bias_correction"]), bool(group["eps_inside_sqrt"]))
        return (*floats, step, *switches, *_coeff_bounds(group))

    def _launched(self, entries: list[Entry], result: Any) -> None:
        self._last_ratios.append(([p for p, _, _ in entries], result))  # the trust ratios

    def _fallback_update(self, s: FallbackStep) -> None:
        group, work, g = s.group, s.work, s.g
        lr, eps, decay = float(group["lr"]), float(group["eps"]), float(group["weight_decay"])
        beta1, beta2 = group["betas"]
        if s.context is not None:
            g = g * s.context[s.p.device]  # a new tensor: the caller's grad is left as it was
        m, v = _update_moments(s.state, g, group["betas"])
        correction1 = 1.0 - beta1**s.step if group["bias_correction"] else 1.0
        correction2 = 1.0 - beta2**s.step if group["bias_correction"] else 1.0
        v_hat = v / correction2
        denom = v_hat.add_(eps).sqrt_() if group["eps_inside_sqrt"] else v_hat.sqrt_().add_(eps)
        update = (m / correction1) / denom
        if decay != 0.0:
            update.add_(work, alpha=decay)
        param_norm = work.norm()
        update_norm = update.norm()
        ratio = param_norm / update_norm
        # max first, then min, as the kernel (and DeepSpeed) clamp.
        if group["max_coeff"] is not None:
            ratio = ratio.clamp(max=float(group["max_coeff"]))
        if group["min_coeff"] is not None:
            ratio = ratio.clamp(min=float(group["min_coeff"]))
        # Stay on the device: a tensor trust ratio avoids a host sync per parameter.
        trust = torch.where((param_norm > 0) & (update_norm > 0), ratio, torch.ones_like(param_norm))
        work.sub_(update.mul_(trust * lr))
        self._last_ratios.append(([s.p], trust.float().reshape(1)))
