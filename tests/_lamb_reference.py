"""Lamb with apex's / DeepSpeed's options, written out for the tests: float64, one param at a time.

Independent of kernels.fused_optim (no code shared with its fallback): the rule as its
documentation states it, with the norms and the clamp taken as Python floats.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import torch
from torch import Tensor


@dataclass(frozen=True)
class LambOptions:
    lr: float = 1e-2
    betas: tuple[float, float] = (0.9, 0.999)
    eps: float = 1e-6
    weight_decay: float = 0.01
    bias_correction: bool = True
    max_grad_norm: float = 0.0
    eps_inside_sqrt: bool = False
    min_coeff: float | None = None
    max_coeff: float | None = None

    def kwargs(self) -> dict[str, Any]:
        """The optimizer's keyword arguments for these options."""
        return asdict(self)


@dataclass
class LambRun:
    """The reference's result: the params after every step (as ``dtype``), the trust ratio each
    param took at each step (None where it had no grad), and each step's unclamped ratios."""

    params: list[Tensor]
    ratios: list[list[float | None]] = field(default_factory=list)
    raw_ratios: list[list[float | None]] = field(default_factory=list)
    exp_avg: list[Tensor] = field(default_factory=list)


def lamb_reference(
    params: Sequence[Tensor], grads: Sequence[Sequence[Tensor | None]], options: LambOptions
) -> LambRun:
    """``grads[step][i]``: param i's grad at that step (None: not updated). Params are stored
    back in their own dtype after every step, as an optimizer over them stores them; the math
    and the state are float64. The clip norm spans every grad of the step (one param group)."""
    b1, b2 = options.betas
    p = [x.detach().double().clone() for x in params]
    m = [torch.zeros_like(x) for x in p]
    v = [torch.zeros_like(x) for x in p]
    steps = [0] * len(p)
    run = LambRun(params=[])
    for step_grads in grads:
        g = [None if x is None else x.detach().double() for x in step_grads]
        if options.max_grad_norm > 0:
            total = math.sqrt(sum(float((x * x).sum()) for x in g if x is not None))
            factor = options.max_grad_norm / max(total, options.max_grad_norm)
            g = [None if x is None else x * factor for x in g]
        ratios: list[float | None] = []
        raw: list[float | None] = []
        for i, gi in enumerate(g):
            if gi is None:
                ratios.append(None)
                raw.append(None)
                continue
            steps[i] += 1
            t = steps[i]
            m[i] = b1 * m[i] + (1 - b1) * gi
            v[i] = b2 * v[i] + (1 - b2) * gi * gi
            c1 = 1 - b1**t if options.bias_correction else 1.0
            c2 = 1 - b2**t if options.bias_correction else 1.0
            m_hat, v_hat = m[i] / c1, v[i] / c2
            if options.eps_inside_sqrt:
                denom = torch.sqrt(v_hat + options.eps)
            else:
                denom = torch.sqrt(v_hat) + options.eps
            u = m_hat / denom + options.weight_decay * p[i]
            p_norm, u_norm = float(p[i].norm()), float(u.norm())
            if p_norm > 0 and u_norm > 0:
                ratio = p_norm / u_norm
                raw.append(ratio)
                if options.max_coeff is not None:
                    ratio = min(ratio, options.max_coeff)
                if options.min_coeff is not None:
                    ratio = max(ratio, options.min_coeff)
            else:
                ratio = 1.0
                raw.append(None)
            ratios.append(ratio)
            p[i] = (p[i] - options.lr * ratio * u).to(params[i].dtype).double()
        run.ratios.append(ratios)
        run.raw_ratios.append(raw)
    run.params = [x.to(params[i].dtype) for i, x in enumerate(p)]
    run.exp_avg = m
    return run


def deepspeed_lamb(
    p0: list[Tensor], grads: list[list[Tensor]], hyper: dict[str, Any], norms: list[float] | None = None
) -> tuple[list[Tensor], list[list[float]]]:
    """DeepSpeed's FusedLamb, from its documented formula, in float64, one param at a time:
    params after every step's grads, and each step's trust ratios."""
    lr, (b1, b2), eps, wd = hyper["lr"], hyper["betas"], hyper["eps"], hyper["weight_decay"]
    scale, max_norm = hyper.get("scale", 1.0), hyper.get("max_grad_norm", 0.0)
    ps = [p.double().clone() for p in p0]
    ms = [torch.zeros_like(p) for p in ps]
    vs = [torch.zeros_like(p) for p in ps]
    coeffs = []
    for t, step_grads in enumerate(grads, start=1):
        combined = scale
        if max_norm > 0:
            assert norms is not None
            clip = (norms[t - 1] / scale + 1e-6) / max_norm
            combined = clip * scale if clip > 1 else scale
        step_coeffs = []
        for i, grad in enumerate(step_grads):
            g = grad.double() / combined
            ms[i] = b1 * ms[i] + (1 - b1) * g
            vs[i] = b2 * vs[i] + (1 - b2) * g * g
            denom = (vs[i] + eps).sqrt() if hyper["eps_inside_sqrt"] else vs[i].sqrt() + eps
            u = ms[i] / denom + wd * ps[i]
            w_norm, u_norm = math.sqrt(float((ps[i] * ps[i]).sum())), math.sqrt(float((u * u).sum()))
            coeff = 1.0
            if w_norm != 0 and u_norm != 0:
                coeff = max(min(w_norm / u_norm, hyper["max_coeff"]), hyper["min_coeff"])
            step_size = lr * math.sqrt(1 - b2**t) / (1 - b1**t) if hyper["bias_correction"] else lr
            ps[i] = ps[i] - step_size * coeff * u
            step_coeffs.append(coeff)
        coeffs.append(step_coeffs)
    return ps, coeffs
