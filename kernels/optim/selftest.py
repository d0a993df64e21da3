"""Self-tests of the optimizer ops: cpu_adam, cpu_adagrad, cpu_lion (CPU) and fused_adam,
fused_lamb, fused_lion (GPU).

Each runs a few steps with weight decay through the public optimizer (``use_kernel=True``) and
the same steps through ``torch.optim.Adam`` / ``AdamW`` / ``Adagrad``, or through the update rule
written out below (Lion and Lamb, which torch lacks, and Adam on fp16 / bf16 params, where
torch would keep the state in the param dtype while ours is fp32), then compares the params
and the optimizer state. The state depends only on the gradients, so comparing it pins the
betas independently of how precisely a half-precision param can show the step.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

import torch
from torch import Tensor

from kernels.optim import cpu as cpu_optim
from kernels.optim.fused import FusedAdam, FusedLion
from kernels.optim.fused_lamb import FusedLamb
from op_builder.selftest.harness import SelfTestContext, Tolerance

STEPS = 3
# Below one vector, a vector tail, and (once per op) a million elements that split across
# threads with a tail in the last block.
CPU_SIZES = (1, 7, 1_000_003)
CPU_SMALL = (1, 7, 1003)
# The GPU kernels work in 64K-element chunks of 4-wide vectors: odd sizes, one just past a
# power of two, and (fp32 only) one spanning many chunks with a partial last one.
GPU_SIZES = (1, 7, 127, 4097)
GPU_LARGE = 1_000_003

# CPU (fp32): the kernels compute torch's formulas in fp32 but contract a*b+c into FMAs, so a
# step may differ from torch by a few ulp (~1e-7 relative). The updates are smooth in the
# state, so over a few steps that stays ~1e-7 on params of order 1, far below this bound,
# while a wrong formula (missing bias correction, decay applied twice, wrong beta) moves
# params by ~lr = 1e-2. eps is 1e-6, not 1e-8: where a gradient and its L2 term cancel to
# ~1e-8, an ulp there would change m / (sqrt(v) + eps) by percent, whatever computes it.
CPU_TOLERANCE = Tolerance(1e-5, 1e-6)
CPU_HYPER: dict[str, Any] = {"lr": 1e-2, "betas": (0.9, 0.99), "weight_decay": 0.1}
# GPU: a larger lr, so that three steps move fp16 / bf16 params by far more than their
# resolution (bf16 holds ~2.3 significant digits).
GPU_HYPER: dict[str, Any] = {"lr": 5e-2, "betas": (0.9, 0.99), "weight_decay": 0.1}
# The optimizer state is fp32 on every path; only summation order and FMAs differ.
STATE_TOLERANCE = Tolerance(1e-5, 1e-7)


def param_tolerance(dtype: torch.dtype) -> Tolerance:
    """fp32: as on the CPU, plus headroom for the GPU's FMAs; fp16 / bf16: the rule's fp32
    result is rounded to the param dtype after every step, and where the two fp32 results
    straddle a rounding boundary they land one ulp apart, so allow two ulps of the largest param."""
    if dtype == torch.float32:
        return Tolerance(1e-5, 1e-5)
    return Tolerance(2 * torch.finfo(dtype).eps, 1e-5)


# ------------------------------------------------------------------ inputs and driving


def _randn(n: int, seed: int, device: torch.device, dtype: torch.dtype = torch.float32) -> Tensor:
    gen = torch.Generator(device=device).manual_seed(seed)
    return torch.randn(n, generator=gen, device=device).to(dtype)


def _leaves(sizes: Sequence[int], device: torch.device, dtype: torch.dtype = torch.float32) -> list[Tensor]:
    return [_randn(n, 17 + i, device, dtype).requires_grad_(True) for i, n in enumerate(sizes)]


def _grads(params: Sequence[Tensor]) -> list[list[Tensor]]:
    """Gradients for every step, the same for the optimizer under test and its reference."""
    return [
        [_randn(p.numel(), 1000 * (step + 1) + i, p.device, p.dtype) for i, p in enumerate(params)]
        for step in range(STEPS)
    ]


def _clone(params: Sequence[Tensor]) -> list[Tensor]:
    return [p.detach().clone().requires_grad_(True) for p in params]


def _drive(opt: torch.optim.Optimizer, params: Sequence[Tensor], grads: list[list[Tensor]]) -> None:
    for step_grads in grads:
        for p, g in zip(params, step_grads):
            p.grad = g.clone()
        opt.step()


def _against_torch(
    ctx: SelfTestContext,
    label: str,
    ours: torch.optim.Optimizer,
    theirs: torch.optim.Optimizer,
    params: tuple[list[Tensor], list[Tensor]],
    state_keys: Sequence[str],
    tolerance: Tolerance,
) -> None:
    """Drive both optimizers with the same gradients; compare params and each state tensor."""
    grads = _grads(params[0])
    _drive(ours, params[0], grads)
    _drive(theirs, params[1], grads)
    for p, q in zip(*params):
        size = f"n={p.numel()}"
        ctx.compare(f"{label} param ({size})", p, q, tolerance)
        for key in state_keys:
            ctx.compare(f"{label} {key} ({size})", ours.state[p][key], theirs.state[q][key], STATE_TOLERANCE)


# ------------------------------------------------------------------ update rules written out


class Expected(NamedTuple):
    """A rule's result for one param: its value, its state by key, and where it is ambiguous."""

    param: Tensor
    state: dict[str, Tensor]
    ambiguous: Tensor | None = None


Rule = Callable[[Tensor, Sequence[Tensor]], Expected]


def adam_rule(hyper: dict[str, Any], eps: float) -> Rule:
    """AdamW (decoupled decay, bias correction) in fp32; the param is stored in its own dtype
    after every step, as the kernel stores it."""
    lr, (b1, b2), wd = hyper["lr"], hyper["betas"], hyper["weight_decay"]

    def run(p0: Tensor, grads: Sequence[Tensor]) -> Expected:
        p = p0.detach().float()
        m, v = torch.zeros_like(p), torch.zeros_like(p)
        for t, grad in enumerate(grads, start=1):
            g = grad.float()
            p = p * (1 - lr * wd)
            m = b1 * m + (1 - b1) * g
            v = b2 * v + (1 - b2) * g * g
            denom = (v / (1 - b2**t)).sqrt() + eps
            p = (p - lr * (m / (1 - b1**t)) / denom).to(p0.dtype).float()
        return Expected(p, {"exp_avg": m, "exp_avg_sq": v})

    return run


def lamb_rule(hyper: dict[str, Any], eps: float) -> Rule:
    """Lamb: u = m_hat / (sqrt(v_hat) + eps) + wd * p; p -= lr * (||p|| / ||u||) * u, with a
    trust ratio of 1 when either norm is zero."""
    lr, (b1, b2), wd = hyper["lr"], hyper["betas"], hyper["weight_decay"]

    def run(p0: Tensor, grads: Sequence[Tensor]) -> Expected:
        p = p0.detach().float()
        m, v = torch.zeros_like(p), torch.zeros_like(p)
        for t, grad in enumerate(grads, start=1):
            g = grad.float()
            m = b1 * m + (1 - b1) * g
            v = b2 * v + (1 - b2) * g * g
            u = (m / (1 - b1**t)) / ((v / (1 - b2**t)).sqrt() + eps) + wd * p
            p_norm, u_norm = float(p.norm()), float(u.norm())
            trust = p_norm / u_norm if p_norm > 0 and u_norm > 0 else 1.0
            p = (p - lr * trust * u).to(p0.dtype).float()
        return Expected(p, {"exp_avg": m, "exp_avg_sq": v})

    return run


def lion_rule(hyper: dict[str, Any]) -> Rule:
    """Lion as published: c = b1 * m + (1 - b1) * g; p = p * (1 - lr * wd) - lr * sign(c);
    m = b2 * m + (1 - b2) * g.

    ``ambiguous`` marks elements where c cancelled to within a few ulps of its terms at some
    step: there sign(c) is decided by rounding (an FMA, the order of two products), and the
    param may legitimately differ by 2 * lr. That is a property of the rule, so those params
    are left out of the comparison; the momentum, which does not depend on sign(c), is not.
    """
    lr, (b1, b2), wd = hyper["lr"], hyper["betas"], hyper["weight_decay"]
    ulps = 4 * torch.finfo(torch.float32).eps

    def run(p0: Tensor, grads: Sequence[Tensor]) -> Expected:
        p = p0.detach().float()
        m = torch.zeros_like(p)
        ambiguous = torch.zeros_like(p, dtype=torch.bool)
        for grad in grads:
            g = grad.float()
            left, right = m * b1, g * (1 - b1)
            c = left + right
            ambiguous |= c.abs() <= ulps * (left.abs() + right.abs())
            p = (p * (1 - lr * wd) - lr * torch.sign(c)).to(p0.dtype).float()
            m = m * b2 + g * (1 - b2)
        return Expected(p, {"exp_avg": m}, ambiguous)

    return run


def _against_rule(
    ctx: SelfTestContext,
    label: str,
    opt: torch.optim.Optimizer,
    params: list[Tensor],
    rule: Rule,
    tolerance: Tolerance,
) -> None:
    """Drive ``opt``; compare each param and its state with ``rule`` run on the same inputs."""
    initial = [p.detach().clone() for p in params]
    grads = _grads(params)
    _drive(opt, params, grads)
    for i, (p, p0) in enumerate(zip(params, initial)):
        expected = rule(p0, [step[i] for step in grads])
        size = f"n={p.numel()}"
        actual = p.detach().float()
        if expected.ambiguous is None:
            ctx.compare(f"{label} param ({size})", actual, expected.param, tolerance)
        else:
            keep = ~expected.ambiguous
            ctx.compare(f"{label} param ({size})", actual[keep], expected.param[keep], tolerance)
        for key, value in expected.state.items():
            ctx.compare(f"{label} {key} ({size})", opt.state[p][key], value, STATE_TOLERANCE)


# ------------------------------------------------------------------ CPU

ADAM_KEYS = ("exp_avg", "exp_avg_sq")


def run_cpu_adam(ctx: SelfTestContext) -> None:
    kw = {**CPU_HYPER, "eps": 1e-6}
    # AdamW (the default mode) over every size; Adam's L2 penalty over the small ones.
    for adamw, sizes in ((True, CPU_SIZES), (False, CPU_SMALL)):
        ours = _leaves(sizes, ctx.device)
        theirs = _clone(ours)
        reference = torch.optim.AdamW(theirs, **kw) if adamw else torch.optim.Adam(theirs, **kw)
        opt = cpu_optim.CPUAdam(ours, adamw_mode=adamw, use_kernel=True, **kw)
        label = "adamw" if adamw else "adam"
        _against_torch(ctx, label, opt, reference, (ours, theirs), ADAM_KEYS, CPU_TOLERANCE)


def run_cpu_adagrad(ctx: SelfTestContext) -> None:
    kw: dict[str, Any] = {"lr": 1e-2, "lr_decay": 0.01, "weight_decay": 0.1, "initial_accumulator_value": 0.1}
    ours = _leaves(CPU_SIZES, ctx.device)
    theirs = _clone(ours)
    opt = cpu_optim.CPUAdagrad(ours, use_kernel=True, **kw)
    reference = torch.optim.Adagrad(theirs, **kw)
    _against_torch(ctx, "adagrad", opt, reference, (ours, theirs), ("sum",), CPU_TOLERANCE)


def run_cpu_lion(ctx: SelfTestContext) -> None:
    params = _leaves(CPU_SIZES, ctx.device)
    opt = cpu_optim.CPULion(params, use_kernel=True, **CPU_HYPER)
    _against_rule(ctx, "lion", opt, params, lion_rule(CPU_HYPER), CPU_TOLERANCE)


# ------------------------------------------------------------------ GPU


def _dtype_runs(ctx: SelfTestContext) -> list[tuple[str, torch.dtype, list[Tensor]]]:
    """(name, dtype, params) per dtype the kernels take; the large size in fp32 only."""
    runs = []
    for dtype in ctx.dtypes:
        sizes = (*GPU_SIZES, GPU_LARGE) if dtype == torch.float32 else GPU_SIZES
        runs.append((str(dtype).removeprefix("torch."), dtype, _leaves(sizes, ctx.device, dtype)))
    return runs


def run_fused_adam(ctx: SelfTestContext) -> None:
    eps = 1e-6
    for name, dtype, params in _dtype_runs(ctx):
        opt = FusedAdam(params, eps=eps, use_kernel=True, **GPU_HYPER)
        tolerance = param_tolerance(dtype)
        if dtype != torch.float32:
            _against_rule(ctx, f"adamw {name}", opt, params, adam_rule(GPU_HYPER, eps), tolerance)
            continue
        # fp32 against torch itself: AdamW over every size, Adam's L2 penalty over the small ones.
        theirs = _clone(params)
        reference = torch.optim.AdamW(theirs, eps=eps, **GPU_HYPER)
        _against_torch(ctx, "adamw fp32", opt, reference, (params, theirs), ADAM_KEYS, tolerance)
        ours = _leaves(GPU_SIZES, ctx.device)
        theirs = _clone(ours)
        l2 = FusedAdam(ours, eps=eps, adamw_mode=False, use_kernel=True, **GPU_HYPER)
        adam = torch.optim.Adam(theirs, eps=eps, **GPU_HYPER)
        _against_torch(ctx, "adam fp32", l2, adam, (ours, theirs), ADAM_KEYS, tolerance)


def run_fused_lamb(ctx: SelfTestContext) -> None:
    eps = 1e-6
    for name, dtype, params in _dtype_runs(ctx):
        with torch.no_grad():
            params[1].zero_()  # ||p|| = 0 at the first step: the trust ratio is 1
        opt = FusedLamb(params, eps=eps, use_kernel=True, **GPU_HYPER)
        _against_rule(ctx, f"lamb {name}", opt, params, lamb_rule(GPU_HYPER, eps), param_tolerance(dtype))


def run_fused_lion(ctx: SelfTestContext) -> None:
    for name, dtype, params in _dtype_runs(ctx):
        opt = FusedLion(params, use_kernel=True, **GPU_HYPER)
        _against_rule(ctx, f"lion {name}", opt, params, lion_rule(GPU_HYPER), param_tolerance(dtype))
