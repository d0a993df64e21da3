"""fused_lamb's options (grad-norm clipping, eps inside the root, trust-ratio bounds) and the
trust ratios it writes out: the kernel against the rule written out in tests/_lamb_reference.py
(float64, on the same GPU), and a step that never waits for the GPU."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from torch import Tensor

from kernels.optim.fused_lamb import FusedLamb
from tests._lamb_reference import LambOptions, lamb_reference
from tests.gpu._tolerances import DTYPES
from tests.gpu.test_gpu_optim import MANY, SIZES, _assert_same

STEPS = 3
# Param i is scaled by SCALES[i]: first-step ratios ||p|| / ||u|| near 1, 0.05, 20 (u is about
# sign(g) at step 1), and the 4097-element param starts at zero norm (ratio 1).
SCALES = (1.0, 0.05, 20.0, 0.0, 1.0)
# The grads' global norm is about sqrt(sum(SIZES)) = 450: 1.0 clips every step, 1e4 none.
CASES = {
    "clip_active": LambOptions(max_grad_norm=1.0),
    "clip_inactive": LambOptions(max_grad_norm=1e4),
    "eps_inside_sqrt": LambOptions(eps=1e-2, eps_inside_sqrt=True),
    "clamp_both": LambOptions(min_coeff=0.2, max_coeff=5.0),
    "all_without_bias_correction": LambOptions(
        bias_correction=False,
        weight_decay=0.1,
        eps=1e-3,
        eps_inside_sqrt=True,
        max_grad_norm=1.0,
        min_coeff=0.2,
        max_coeff=5.0,
    ),
}
# Ratios: fp32 norms against float64 ones; half params may differ by an ulp here and there.
RATIO_REL = {torch.float32: 1e-4, torch.float16: 1e-3, torch.bfloat16: 1e-3}

Ratios = list[list[float | None]]


def _make(
    device: torch.device,
    dtypes: list[torch.dtype],
    sizes: tuple[int, ...] = SIZES,
    scales: tuple[float, ...] = SCALES,
) -> list[Tensor]:
    gen = torch.Generator(device=device).manual_seed(0)
    return [
        torch.nn.Parameter((torch.randn(n, device=device, generator=gen) * s).to(dtype))
        for n, s, dtype in zip(sizes, scales, dtypes, strict=True)
    ]


def _clone(params: list[Tensor]) -> list[Tensor]:
    return [torch.nn.Parameter(p.detach().clone()) for p in params]


def _grads(params: list[Tensor], step: int) -> list[Tensor]:
    gen = torch.Generator(device=params[0].device).manual_seed(10 + step)
    return [torch.randn(p.shape, device=p.device, generator=gen).to(p.dtype) for p in params]


def _drive(
    opt: FusedLamb, params: list[Tensor], steps: int
) -> tuple[list[list[Tensor]], Ratios, list[Tensor]]:
    """Run ``steps`` steps; return each step's grads, the ratios read after each step, and
    per param the largest magnitude each element had along the way (see _assert_same)."""
    grads, ratios = [], []
    reach = [p.detach().abs().float() for p in params]
    for step in range(steps):
        step_grads = _grads(params, step)
        for p, g in zip(params, step_grads):
            p.grad = g.clone()
        opt.step()
        grads.append(step_grads)
        ratios.append([None if r is None else float(r) for r in opt.trust_ratios()])
        for r, p in zip(reach, params):
            torch.maximum(r, p.detach().abs().float(), out=r)
    return grads, ratios, reach


def _assert_ratios(ours: Ratios, expected: Ratios, rel: float) -> None:
    for step, (a, b) in enumerate(zip(ours, expected, strict=True)):
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            assert (x is None) == (y is None), (step, i, x, y)
            if y is not None:
                assert x == pytest.approx(y, rel=rel), (step, i, x, y)


@pytest.mark.parametrize("name", list(CASES))
@pytest.mark.parametrize("dtype", DTYPES)
def test_kernel_matches_reference(device: torch.device, dtype: torch.dtype, name: str) -> None:
    options = CASES[name]
    params = _make(device, [dtype] * len(SIZES))
    start = _clone(params)
    opt = FusedLamb(params, use_kernel=True, **options.kwargs())
    grads, ratios, reach = _drive(opt, params, STEPS)
    assert opt.backend == "kernel"
    ref = lamb_reference(start, grads, options)
    _assert_same(params, ref.params, dtype, reach)
    _assert_ratios(ratios, ref.ratios, RATIO_REL[dtype])
    assert ratios[0][3] == 1.0  # zero norm: ratio 1, never clamped
    if name == "clamp_both":  # both bounds were hit
        assert options.min_coeff is not None and options.max_coeff is not None
        raw = [r for step in ref.raw_ratios for r in step if r is not None]
        assert any(r < options.min_coeff for r in raw) and any(r > options.max_coeff for r in raw)


def test_many_tensors_with_every_option(device: torch.device) -> None:
    """201 tensors (the norms kernel takes 128 a launch, stage 1 66): each tensor's ratio
    lands in its own slot, and the clip norm spans every launch."""
    options = CASES["all_without_bias_correction"]
    scales = tuple(0.05 if i % 3 == 0 else 20.0 if i % 3 == 1 else 1.0 for i in range(len(MANY)))
    params = _make(device, [torch.float32] * len(MANY), MANY, scales)
    start = _clone(params)
    opt = FusedLamb(params, use_kernel=True, **options.kwargs())
    grads, ratios, reach = _drive(opt, params, 2)
    ref = lamb_reference(start, grads, options)
    _assert_same(params, ref.params, torch.float32, reach)
    _assert_ratios(ratios, ref.ratios, RATIO_REL[torch.float32])
    for p, m in zip(params, ref.exp_avg):
        torch.testing.assert_close(opt.state[p]["exp_avg"].double(), m, rtol=1e-5, atol=1e-8)


def test_clip_norm_spans_the_dtypes_of_a_group(device: torch.device) -> None:
    """fp32, bf16 and fp16 params in one group: one launch per dtype, one clip factor."""
    dtypes = [torch.float32, torch.bfloat16, torch.float16, torch.float32, torch.bfloat16]
    params = _make(device, dtypes)
    start = _clone(params)
    options = LambOptions(max_grad_norm=1.0, min_coeff=0.2, max_coeff=5.0)
    opt = FusedLamb(params, use_kernel=True, **options.kwargs())
    grads, ratios, reach = _drive(opt, params, STEPS)
    ref = lamb_reference(start, grads, options)
    for p, expected, r, dtype in zip(params, ref.params, reach, dtypes):
        _assert_same([p], [expected], dtype, [r])
    _assert_ratios(ratios, ref.ratios, 1e-3)


@pytest.mark.parametrize("sizes", [(0, 5, 0, 4097, 0), (0,)])
def test_zero_element_params_get_ratio_one(device: torch.device, sizes: tuple[int, ...]) -> None:
    options = LambOptions(max_grad_norm=1.0, min_coeff=0.2, max_coeff=5.0)
    params = _make(device, [torch.float32] * len(sizes), sizes, (1.0,) * len(sizes))
    start = _clone(params)
    opt = FusedLamb(params, use_kernel=True, **options.kwargs())
    grads, ratios, reach = _drive(opt, params, 2)
    ref = lamb_reference(start, grads, options)
    _assert_same(params, ref.params, torch.float32, reach)
    _assert_ratios(ratios, ref.ratios, RATIO_REL[torch.float32])
    assert all(r == 1.0 for step in ratios for r, n in zip(step, sizes) if n == 0)


def test_non_contiguous_params_report_their_ratios(device: torch.device) -> None:
    """Updated through contiguous copies: the ratios still land on the params they belong to."""
    gen = torch.Generator(device=device).manual_seed(3)
    data = [
        torch.randn(29, 37, device=device, generator=gen).t() * 0.05,
        torch.randn(3, 7, 5, 11, device=device, generator=gen).to(memory_format=torch.channels_last) * 20,
        torch.randn(31, 66, device=device, generator=gen)[:, ::2],
    ]
    params: list[Tensor] = [torch.nn.Parameter(t) for t in data]
    start = [torch.nn.Parameter(t.clone()) for t in data]
    options = CASES["all_without_bias_correction"]
    opt = FusedLamb(params, use_kernel=True, **options.kwargs())
    grads, ratios, reach = _drive(opt, params, STEPS)
    ref = lamb_reference(start, grads, options)
    _assert_same(params, ref.params, torch.float32, reach)
    _assert_ratios(ratios, ref.ratios, RATIO_REL[torch.float32])


@pytest.mark.parametrize(
    "inactive",
    [{"min_coeff": 0.0, "max_coeff": 1e30}, {"max_grad_norm": 1e30}],
    ids=["bounds", "clipping"],
)
def test_options_that_do_not_bite_change_no_bit(device: torch.device, inactive: dict[str, Any]) -> None:
    """Bounds no ratio reaches, and clipping by a factor of exactly 1, give the bits of the
    step without them (the grads times 1.0 are the grads; a comparison that fails leaves the
    ratio as it is)."""
    plain = _make(device, [torch.float32] * len(SIZES))
    other = _clone(plain)
    opts = [FusedLamb(plain, use_kernel=True), FusedLamb(other, use_kernel=True, **inactive)]
    for step in range(STEPS):
        for params, opt in zip((plain, other), opts):
            for p, g in zip(params, _grads(params, step)):
                p.grad = g
            opt.step()
    assert all(torch.equal(a, b) for a, b in zip(plain, other))
    assert all(torch.equal(a, b) for a, b in zip(opts[0].trust_ratios(), opts[1].trust_ratios()))  # type: ignore[arg-type]


def test_step_does_not_wait_for_the_gpu(device: torch.device) -> None:
    """With every option on, a step (clip norm included) and reading the ratios as tensors
    make no synchronizing CUDA call: torch's sync debug mode raises on any."""
    dtypes = [torch.float32, torch.bfloat16, torch.float32, torch.float16, torch.float32]
    params = _make(device, dtypes)
    opt = FusedLamb(
        params, use_kernel=True, max_grad_norm=1.0, eps_inside_sqrt=True, min_coeff=0.2, max_coeff=5.0
    )
    _drive(opt, params, 1)  # loads the op and creates the state before the check
    for p, g in zip(params, _grads(params, 1)):
        p.grad = g
    torch.cuda.synchronize(device)
    previous = torch.cuda.get_sync_debug_mode()
    torch.cuda.set_sync_debug_mode("error")
    try:
        opt.step()
        ratios = opt.trust_ratios()
    finally:
        torch.cuda.set_sync_debug_mode(previous)
    assert all(r is not None and r.is_cuda and r.dtype == torch.float32 and r.dim() == 0 for r in ratios)


def test_deepspeed_compat_step_does_not_wait_for_the_gpu(device: torch.device) -> None:
    """DeepSpeed's FusedLamb with a loss scale: its grad scale (1 / scale) reaches the kernel as
    a device value made on the device, not copied from the host (a pageable copy syncs)."""
    from kernels.compat import deepspeed as ds

    params = _make(device, [torch.float32] * len(SIZES))
    opt = ds.FusedLamb(params, lr=1e-2, max_coeff=2.0, min_coeff=0.1)
    for step in range(2):
        for p, g in zip(params, _grads(params, step)):
            p.grad = g * 4.0
        if step == 0:
            opt.step(scale=4.0)  # loads the op and creates the state before the check
            torch.cuda.synchronize(device)
            continue
        previous = torch.cuda.get_sync_debug_mode()
        torch.cuda.set_sync_debug_mode("error")
        try:
            opt.step(scale=4.0)
        finally:
            torch.cuda.set_sync_debug_mode(previous)
    assert opt.backend == "kernel"


def test_sync_debug_mode_catches_a_sync(device: torch.device) -> None:
    """The check above can fail: a host read of a device value under the same mode raises."""
    value = torch.ones((), device=device)
    previous = torch.cuda.get_sync_debug_mode()
    torch.cuda.set_sync_debug_mode("error")
    try:
        with pytest.raises(RuntimeError):
            float(value)
    finally:
        torch.cuda.set_sync_debug_mode(previous)


def test_deepspeed_compat_lamb_runs_on_the_kernel(device: torch.device) -> None:
    """kernels.compat.deepspeed.FusedLamb is our kernel with DeepSpeed's rule translated (bias
    correction in lr, its clip and loss scale as the grad scale): DeepSpeed's rule, from the
    float64 transcription, with the clamp hit on both sides and the grads clipped."""
    from kernels.compat import deepspeed as ds
    from tests._lamb_reference import deepspeed_lamb

    hyper = {"lr": 1e-2, "betas": (0.9, 0.99), "eps": 1e-2, "weight_decay": 0.01, "max_coeff": 2.0,
             "min_coeff": 0.1, "bias_correction": True, "eps_inside_sqrt": False, "scale": 4.0,
             "max_grad_norm": 1.0}  # fmt: skip
    params = _make(device, [torch.float32] * len(SIZES))
    start = [p.detach().clone() for p in params]
    grads = [[g * 4.0 for g in _grads(params, step)] for step in range(STEPS)]
    norms = [float(torch.cat([g.flatten() for g in step]).norm()) for step in grads]
    expected, expected_coeffs = deepspeed_lamb(start, grads, hyper, norms)
    opt = ds.FusedLamb(params, lr=1e-2, betas=(0.9, 0.99), eps=1e-2, weight_decay=0.01,
                       max_grad_norm=1.0, max_coeff=2.0, min_coeff=0.1)  # fmt: skip
    for step_grads, norm, coeffs in zip(grads, norms, expected_coeffs, strict=True):
        for p, g in zip(params, step_grads, strict=True):
            p.grad = g.clone()
        opt.step(scale=4.0, grad_norms=[norm])
        assert opt.backend == "kernel"
        assert opt.get_lamb_coeffs() == pytest.approx(coeffs, rel=1e-4)
    assert {2.0, 0.1} <= {c for step in expected_coeffs for c in step}
    for p, e in zip(params, expected, strict=True):
        torch.testing.assert_close(p.detach(), e.float(), rtol=1e-5, atol=1e-6)
