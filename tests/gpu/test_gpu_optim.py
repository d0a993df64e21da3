"""fused_adam / fused_lamb / fused_lion kernels against torch and the PyTorch rule on the same GPU."""

from __future__ import annotations

import math
from typing import Any

import pytest
import torch

from kernels.optim.fused import FusedAdam, FusedLion
from kernels.optim.fused_lamb import FusedLamb
from tests.gpu._inputs import offset_view, on_side_stream
from tests.gpu._tolerances import DTYPES

# Awkward sizes: 1, odd, a vector-friendly one, and one spanning several 64K-element chunks.
SIZES = (1, 127, 768, 4097, 3 * 65536 + 5)


def _params(device: torch.device, dtype: torch.dtype, sizes: tuple[int, ...] = SIZES) -> list[torch.Tensor]:
    gen = torch.Generator(device=device).manual_seed(0)
    return [torch.randn(n, device=device, generator=gen).to(dtype).requires_grad_(True) for n in sizes]


def _clone(params: list[torch.Tensor]) -> list[torch.Tensor]:
    return [p.detach().clone().requires_grad_(True) for p in params]


def _steps(
    opts: list[torch.optim.Optimizer], groups: list[list[torch.Tensor]], steps: int
) -> list[torch.Tensor]:
    """Run ``steps`` steps of every optimizer on the same grads; return, per param of the last
    group (the reference), the largest magnitude each element had along the way."""
    reach = [p.detach().abs().float() for p in groups[-1]]
    for step in range(steps):
        gen = torch.Generator(device=groups[0][0].device).manual_seed(10 + step)
        grads = [torch.randn(p.shape, device=p.device, generator=gen).to(p.dtype) for p in groups[0]]
        for params in groups:
            for p, g in zip(params, grads):
                p.grad = g.clone()
        for opt in opts:
            opt.step()
        for r, p in zip(reach, groups[-1]):
            torch.maximum(r, p.detach().abs().float(), out=r)
    return reach


def _assert_same(
    a: list[torch.Tensor], b: list[torch.Tensor], dtype: torch.dtype, reach: list[torch.Tensor] | None = None
) -> None:
    """Both sides do fp32 math, so they differ by fp32 rounding, and then, where that tips a
    rounding to the param dtype the other way, by one step of that dtype at the magnitude the
    element had then. That step persists, so it is bounded by the largest magnitude along
    the way (``reach``, from ``_steps``), not by the final value's."""
    rtol = max(2 * torch.finfo(dtype).eps, 1e-5)
    for i, (x, y) in enumerate(zip(a, b)):
        ours, ref = x.detach().float().reshape(-1), y.detach().float().reshape(-1)
        scale = ref.abs() if reach is None else reach[i].reshape(-1)
        diff = (ours - ref).abs()
        bound = rtol * torch.maximum(scale, ref.abs()) + 1e-5
        bad = (diff > bound).nonzero()
        if bad.numel():
            k = int(bad[0])
            raise AssertionError(
                f"param {i}: {bad.numel()} of {ref.numel()} elements off; element {k}: ours "
                f"{ours[k].item()}, reference {ref[k].item()}, bound {bound[k].item():.3g}"
            )


@pytest.mark.parametrize("adamw_mode", [True, False])
def test_fused_adam_fp32_matches_torch(device: torch.device, adamw_mode: bool) -> None:
    ours = _params(device, torch.float32)
    theirs = _clone(ours)
    kwargs = {"lr": 1e-2, "betas": (0.9, 0.99), "eps": 1e-8, "weight_decay": 0.1}
    reference = torch.optim.AdamW if adamw_mode else torch.optim.Adam
    opt = FusedAdam(ours, adamw_mode=adamw_mode, use_kernel=True, **kwargs)  # type: ignore[arg-type]
    reach = _steps([opt, reference(theirs, fused=True, **kwargs)], [ours, theirs], 5)
    assert opt.backend == "kernel"
    _assert_same(ours, theirs, torch.float32, reach)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("bias_correction", [True, False])
def test_fused_adam_matches_rule(device: torch.device, dtype: torch.dtype, bias_correction: bool) -> None:
    ours = _params(device, dtype)
    theirs = _clone(ours)
    kwargs = {"lr": 1e-3, "weight_decay": 0.01, "bias_correction": bias_correction}
    opts = [FusedAdam(ours, use_kernel=True, **kwargs), FusedAdam(theirs, use_kernel=False, **kwargs)]  # type: ignore[arg-type]
    reach = _steps(opts, [ours, theirs], 4)
    _assert_same(ours, theirs, dtype, reach)
    for p, q in zip(ours, theirs):
        torch.testing.assert_close(
            opts[0].state[p]["exp_avg_sq"], opts[1].state[q]["exp_avg_sq"], rtol=1e-5, atol=1e-8
        )


@pytest.mark.parametrize("dtype", DTYPES)
def test_fused_lamb_matches_rule(device: torch.device, dtype: torch.dtype) -> None:
    ours = _params(device, dtype)
    with torch.no_grad():
        ours[1].zero_()  # trust ratio 1 for a zero tensor
    theirs = _clone(ours)
    kwargs = {"lr": 1e-2, "weight_decay": 0.01}
    opts = [FusedLamb(ours, use_kernel=True, **kwargs), FusedLamb(theirs, use_kernel=False, **kwargs)]  # type: ignore[arg-type]
    reach = _steps(opts, [ours, theirs], 4)
    _assert_same(ours, theirs, dtype, reach)


@pytest.mark.parametrize("dtype", DTYPES)
def test_fused_lion_matches_rule(device: torch.device, dtype: torch.dtype) -> None:
    ours = _params(device, dtype)
    theirs = _clone(ours)
    kwargs = {"lr": 1e-3, "weight_decay": 0.1}
    opts = [FusedLion(ours, use_kernel=True, **kwargs), FusedLion(theirs, use_kernel=False, **kwargs)]  # type: ignore[arg-type]
    reach = _steps(opts, [ours, theirs], 4)
    _assert_same(ours, theirs, dtype, reach)


def test_many_tensors_and_chunks_span_launches(device: torch.device) -> None:
    """More tensors than one launch's table holds (76 for Adam), one of them with 331 chunks:
    the host splits the work over several launches."""
    sizes = (*([33] * 100), 330 * 65536 + 1, *([5] * 10))
    ours = _params(device, torch.float32, sizes)
    theirs = _clone(ours)
    opts = [FusedAdam(ours, use_kernel=True), FusedAdam(theirs, use_kernel=False)]
    reach = _steps(opts, [ours, theirs], 2)
    _assert_same(ours, theirs, torch.float32, reach)


def test_misaligned_params_take_the_scalar_path(device: torch.device) -> None:
    base = torch.randn(4097 + 1, device=device)
    ours = [base[1:].clone().requires_grad_(True)]  # clone is aligned: keep a misaligned view
    view = torch.nn.Parameter(base[1:])  # storage offset 1: not 16-byte aligned
    theirs = _clone(ours)
    opts = [FusedLion([view], use_kernel=True), FusedLion(theirs, use_kernel=False)]
    reach = _steps(opts, [[view], theirs], 3)
    _assert_same([view], theirs, torch.float32, reach)


# ----------------------------------------------------------------------------- awkward inputs

OPTIMIZERS: dict[str, tuple[type[torch.optim.Optimizer], dict[str, Any]]] = {
    "adam": (FusedAdam, {"lr": 1e-2, "weight_decay": 0.01}),
    "lamb": (FusedLamb, {"lr": 1e-2, "weight_decay": 0.01}),
    "lion": (FusedLion, {"lr": 1e-3, "weight_decay": 0.1}),
}


# Steps to compare over. Lion's kernel rounds every product and sum as the PyTorch rule does
# (no fused multiply-add, denormals kept), so sign(beta1 * m + (1 - beta1) * g) agrees near 0 too
# and later steps compare as well as the first (test_fused_lion_near_zero_is_the_rules_bits).
STEPS = {"adam": 3, "lamb": 3, "lion": 3}


def _pair(name: str, ours: list[torch.Tensor], theirs: list[torch.Tensor]) -> list[torch.optim.Optimizer]:
    """The kernel on ``ours``, the PyTorch rule (the fallback) on ``theirs``."""
    cls, kwargs = OPTIMIZERS[name]
    return [cls(ours, use_kernel=True, **kwargs), cls(theirs, use_kernel=False, **kwargs)]


@pytest.mark.parametrize("name", list(OPTIMIZERS))
@pytest.mark.parametrize("dtype", DTYPES)
def test_misaligned_params(device: torch.device, name: str, dtype: torch.dtype) -> None:
    """Params (and so their grads' copies) at storage offset 1: the kernels fall back to
    scalar accesses for them, and must not fault."""
    aligned = _params(device, dtype, (4097, 65536 + 3, 8))
    ours = [torch.nn.Parameter(offset_view(p.detach(), 1)) for p in aligned]
    theirs = _clone(aligned)
    opts = _pair(name, ours, theirs)
    reach = _steps(opts, [ours, theirs], STEPS[name])
    torch.cuda.synchronize(device)
    _assert_same(ours, theirs, dtype, reach)


@pytest.mark.parametrize("name", list(OPTIMIZERS))
@pytest.mark.parametrize("sizes", [(0, 5, 0, 4097, 0), (0,), (0, 0, 0)])
def test_zero_element_params(device: torch.device, name: str, sizes: tuple[int, ...]) -> None:
    ours = _params(device, torch.float32, sizes)
    theirs = _clone(ours)
    opts = _pair(name, ours, theirs)
    reach = _steps(opts, [ours, theirs], STEPS[name])
    assert opts[0].backend == "kernel"  # type: ignore[attr-defined]
    _assert_same(ours, theirs, torch.float32, reach)


# Lamb's first kernel takes 66 tensors per launch (any number of 64K-element chunks), its
# second 110, Lion's 90, Lamb's norms 128 tensors: 201 tensors of mixed sizes, one of 331
# chunks, spread each over several launches.
MANY = (*[1 + (37 * i) % 5000 for i in range(120)], 330 * 65536 + 1, *[3 * 65536 - 1, 7] * 40)


@pytest.mark.parametrize("name", ["lamb", "lion"])
def test_many_tensors_and_chunks(device: torch.device, name: str) -> None:
    ours = _params(device, torch.float32, MANY)
    theirs = _clone(ours)
    opts = _pair(name, ours, theirs)
    reach = _steps(opts, [ours, theirs], STEPS[name])
    _assert_same(ours, theirs, torch.float32, reach)
    for p, q in zip(ours, theirs):  # every chunk's state updated once
        torch.testing.assert_close(
            opts[0].state[p]["exp_avg"], opts[1].state[q]["exp_avg"], rtol=1e-5, atol=1e-7
        )


def test_fused_lamb_is_bitwise_reproducible(device: torch.device) -> None:
    """The per-tensor norms add every chunk's partial sums in a fixed order: two runs of the
    same steps give the same bits (a float atomicAdd per block would not)."""
    sizes = (*[4097] * 40, 200 * 65536 + 3, 65536)
    first = _params(device, torch.float32, sizes)
    second = _clone(first)
    opts = [FusedLamb(first, use_kernel=True), FusedLamb(second, use_kernel=True)]
    _steps(opts, [first, second], 3)
    for a, b in zip(first, second):
        assert torch.equal(a, b)
        for key in ("exp_avg", "exp_avg_sq"):
            assert torch.equal(opts[0].state[a][key], opts[1].state[b][key])


def _layouts(device: torch.device, dtype: torch.dtype) -> list[torch.Tensor]:
    gen = torch.Generator(device=device).manual_seed(3)
    return [
        torch.randn(29, 37, device=device, generator=gen).to(dtype).t(),
        torch.randn(3, 7, 5, 11, device=device, generator=gen)
        .to(dtype)
        .to(memory_format=torch.channels_last),
        torch.randn(31, 66, device=device, generator=gen).to(dtype)[:, ::2],
        torch.randn(64, 130, 3, 3, device=device, generator=gen)
        .to(dtype)
        .to(memory_format=torch.channels_last),
    ]


@pytest.mark.parametrize("name", list(OPTIMIZERS))
@pytest.mark.parametrize("dtype", DTYPES)
def test_non_contiguous_params(device: torch.device, name: str, dtype: torch.dtype) -> None:
    """Transposed, channels_last and strided params: updated in place (same storage, same
    strides), as the PyTorch rule updates the same layouts."""
    data = _layouts(device, dtype)
    ours = [torch.nn.Parameter(t) for t in data]
    theirs = [torch.nn.Parameter(t.clone(memory_format=torch.preserve_format)) for t in data]
    pointers = [(p.data_ptr(), p.stride()) for p in ours]
    assert not any(p.is_contiguous() for p in ours)
    opts = _pair(name, ours, theirs)
    reach = _steps(opts, [ours, theirs], STEPS[name])
    assert opts[0].backend == "kernel"  # type: ignore[attr-defined]
    assert [(p.data_ptr(), p.stride()) for p in ours] == pointers
    _assert_same(ours, theirs, dtype, reach)


def test_adam_channels_last_matches_torch(device: torch.device) -> None:
    data = _layouts(device, torch.float32)[3]
    ours = [torch.nn.Parameter(data)]
    theirs = [torch.nn.Parameter(data.clone(memory_format=torch.preserve_format))]
    kwargs: dict[str, Any] = {"lr": 1e-2, "betas": (0.9, 0.99), "eps": 1e-8, "weight_decay": 0.1}
    opts = [FusedAdam(ours, use_kernel=True, **kwargs), torch.optim.AdamW(theirs, **kwargs)]
    reach = _steps(opts, [ours, theirs], 4)
    _assert_same(ours, theirs, torch.float32, reach)


@pytest.mark.parametrize("name", list(OPTIMIZERS))
def test_optimizers_use_the_current_stream(device: torch.device, name: str) -> None:
    ours = _params(device, torch.float32, (4097, 3 * 65536 + 5))
    theirs = _clone(ours)
    cls, kwargs = OPTIMIZERS[name]
    gen = torch.Generator(device=device).manual_seed(5)
    for p, q in zip(ours, theirs):
        q.grad = torch.randn(q.shape, device=device, generator=gen)
        p.grad = q.grad.clone()
    opt = cls(ours, use_kernel=True, **kwargs)
    cls(theirs, use_kernel=False, **kwargs).step()
    on_side_stream(device, [p.grad for p in ours if p.grad is not None], opt.step)
    _assert_same(ours, theirs, torch.float32)


# ----------------------------------------------------------------------------- Lion near zero


@pytest.mark.parametrize("dtype", DTYPES)
def test_fused_lion_near_zero_is_the_rules_bits(device: torch.device, dtype: torch.dtype) -> None:
    """Momenta and grads with beta1 * m + (1 - beta1) * g at or within a few ulps of 0 (a quarter
    of them with denormal products), then two steps of ordinary grads: the kernel's params and
    momenta equal the PyTorch rule's bit for bit. A fused multiply-add, or fast math's flush of a
    denormal product, gives some of these the other direction (a step 2 * lr away)."""
    n = 3 * 65536 + 5
    gen = torch.Generator(device=device).manual_seed(21)
    m0 = torch.randn(n, device=device, generator=gen)
    m0[: n // 4] *= 1e-38
    grads = [(-m0.double() * 0.9 / (1 - 0.9)).float().to(dtype)]
    grads += [torch.randn(n, device=device, generator=gen).to(dtype) for _ in range(2)]
    start = torch.randn(n, device=device, generator=gen).to(dtype)
    ours, theirs = [torch.nn.Parameter(start.clone())], [torch.nn.Parameter(start.clone())]
    opts = [
        FusedLion(ours, lr=1e-3, betas=(0.9, 0.99), weight_decay=0.1, use_kernel=True),
        FusedLion(theirs, lr=1e-3, betas=(0.9, 0.99), weight_decay=0.1, use_kernel=False),
    ]
    for opt, params in zip(opts, (ours, theirs)):
        opt.state[params[0]]["exp_avg"] = m0.clone()
    for g in grads:
        ours[0].grad, theirs[0].grad = g.clone(), g.clone()
        for opt in opts:
            opt.step()
    assert opts[0].backend == "kernel" and opts[1].backend == "fallback"  # type: ignore[attr-defined]
    assert torch.equal(ours[0], theirs[0])
    assert torch.equal(opts[0].state[ours[0]]["exp_avg"], opts[1].state[theirs[0]]["exp_avg"])


# ----------------------------------------------------------------------------- NaN and inf grads


def _with_nonfinite(g: torch.Tensor, step: int) -> torch.Tensor:
    """g with NaN, +inf and -inf at a few places (other places each step)."""
    g = g.clone()
    flat = g.view(-1)
    for k, value in enumerate((math.nan, math.inf, -math.inf)):
        flat[(step * 7 + k * 3) % flat.numel() :: 997] = value
    return g


def _assert_same_with_nonfinite(
    a: list[torch.Tensor], b: list[torch.Tensor], dtype: torch.dtype, reach: list[torch.Tensor], exact: bool
) -> None:
    """NaN and infinities at the same places (the same infinities); the finite values as
    _assert_same compares them, or bit for bit (``exact``)."""
    for i, (x, y) in enumerate(zip(a, b)):
        ours, ref = x.detach().float().reshape(-1), y.detach().float().reshape(-1)
        assert torch.equal(ours.isnan(), ref.isnan()), f"param {i}: NaN at other places"
        inf = ref.isinf()
        assert torch.equal(ours.isinf(), inf) and torch.equal(ours[inf], ref[inf]), f"param {i}: inf differs"
        finite = ref.isfinite()
        if exact:
            assert torch.equal(ours[finite], ref[finite]), f"param {i}"
        else:
            _assert_same([ours[finite]], [ref[finite]], dtype, [reach[i].reshape(-1)[finite]])


@pytest.mark.parametrize("name", list(OPTIMIZERS))
@pytest.mark.parametrize("dtype", DTYPES)
def test_nan_and_inf_grads_as_the_rule(device: torch.device, name: str, dtype: torch.dtype) -> None:
    """Grads with NaN, +inf and -inf in some tensors (one tensor stays finite), three steps: the
    kernel's params and state are non-finite exactly where the PyTorch rule's are, and agree
    elsewhere (Lion bit for bit: a NaN momentum gives direction 0, as torch.sign(NaN) is 0). Lamb:
    a tensor whose update norm is NaN takes ratio 1 in both."""
    sizes = (7, 4097, 65536 + 3, 129)
    ours = _params(device, dtype, sizes)
    theirs = _clone(ours)
    opts = _pair(name, ours, theirs)
    reach = [p.detach().abs().float() for p in theirs]
    for step in range(3):
        gen = torch.Generator(device=device).manual_seed(40 + step)
        grads = [torch.randn(n, device=device, generator=gen).to(dtype) for n in sizes]
        grads[:3] = [_with_nonfinite(g, step) for g in grads[:3]]
        for params in (ours, theirs):
            for p, g in zip(params, grads):
                p.grad = g.clone()
        for opt in opts:
            opt.step()
        for r, p in zip(reach, theirs):
            torch.maximum(r, p.detach().abs().float().nan_to_num(0.0, 0.0, 0.0), out=r)
    assert opts[0].backend == "kernel"  # type: ignore[attr-defined]
    # The case is about them (Lion's params stay finite: sign(NaN) is 0, as torch.sign gives).
    state = [opts[1].state[p]["exp_avg"] for p in theirs]
    assert any(bool(t.detach().isnan().any()) for t in (*theirs, *state))
    _assert_same_with_nonfinite(ours, theirs, dtype, reach, exact=name == "lion")
    for key in ("exp_avg", "exp_avg_sq") if name != "lion" else ("exp_avg",):
        states = [[opt.state[p][key] for p in params] for opt, params in zip(opts, (ours, theirs))]
        state_reach = [t.abs().nan_to_num(0.0, 0.0, 0.0) for t in states[1]]
        _assert_same_with_nonfinite(states[0], states[1], torch.float32, state_reach, exact=name == "lion")
