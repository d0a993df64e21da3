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
