"""bf16 / fp16 params updated directly by the CPU optimizers (fp32 arithmetic and fp32 state).

Reference: torch.optim.AdamW / Adam / Adagrad (and Lion written out) on fp32 copies of the
params, fed the same half-precision gradients widened to fp32, with the reference's params
rounded to the half dtype after every step: what an optimizer that keeps bf16 / fp16 params
must store. The state never passes through the half dtype, so it matches torch's as closely as
fp32 params do (rtol 1e-5). A param may land one ulp of its dtype away where the fp32 results
straddle a rounding boundary (the kernels' FMAs, or torch's own vector code, which differs between
AVX2 and AVX-512 CPUs, move them by an fp32 ulp), and keeps that offset as an absolute difference,
since the update barely depends on the param itself: hence a bound of two ulps of the half dtype
at the largest magnitude the element had along the way (tests/kernels/_half_bounds.py), not at its
final value. A wrong rule moves params by ~lr = 1e-2 a step, many bf16 ulps. Lion rounds like its
reference and is compared exactly.
"""

from __future__ import annotations

import copy
import sys
from collections.abc import Callable
from typing import Any

import pytest
import torch
from torch import Tensor

from kernels.optim.cpu import CPUAdagrad, CPUAdam, CPULion
from tests.kernels._half_bounds import assert_half_trajectory_close, start_reach, track_reach

# torch.optim.Adagrad's own sparse path builds COO tensors without opting in or out of checks.
pytestmark = pytest.mark.filterwarnings("ignore:Sparse invariant checks:UserWarning")

LEVELS = ("scalar", "avx2", "avx512")
SIZES = (1, 7, 1003)
STEPS = 20
DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16}
HYPER: dict[str, dict[str, Any]] = {
    "adamw": {"lr": 1e-2, "betas": (0.8, 0.95), "eps": 1e-6, "weight_decay": 0.1},
    "adam": {"lr": 1e-2, "betas": (0.8, 0.95), "eps": 1e-6, "weight_decay": 0.1},
    "adagrad": {"lr": 1e-2, "lr_decay": 0.01, "weight_decay": 0.1, "initial_accumulator_value": 0.1},
    "lion": {"lr": 1e-2, "weight_decay": 0.1},
}
STATE_KEYS = {"adamw": ("exp_avg", "exp_avg_sq"), "adam": ("exp_avg", "exp_avg_sq"), "adagrad": ("sum",)}


class PlainLion(torch.optim.Optimizer):
    """Lion as published, each product and sum rounded on its own (as the kernel does)."""

    def __init__(self, params: list[Tensor], lr: float, weight_decay: float) -> None:
        super().__init__(params, {"lr": lr, "wd": weight_decay})

    @torch.no_grad()
    def step(self, closure: Any = None) -> None:  # type: ignore[override]
        for group in self.param_groups:
            lr, wd = group["lr"], group["wd"]
            for p in group["params"]:
                m = self.state[p].setdefault("exp_avg", torch.zeros_like(p))
                c = m * 0.9 + p.grad * (1 - 0.9)
                p.mul_(1 - lr * wd)
                p.sub_(torch.sign(c) * lr)
                m.copy_(m * 0.99 + p.grad * (1 - 0.99))


def _pair(kind: str, ours: list[Tensor], ref: list[Tensor], use_kernel: bool) -> tuple[Any, Any]:
    kw = HYPER[kind]
    if kind == "adamw":
        return CPUAdam(ours, use_kernel=use_kernel, **kw), torch.optim.AdamW(ref, **kw)
    if kind == "adam":
        return CPUAdam(ours, adamw_mode=False, use_kernel=use_kernel, **kw), torch.optim.Adam(ref, **kw)
    if kind == "adagrad":
        return CPUAdagrad(ours, use_kernel=use_kernel, **kw), torch.optim.Adagrad(ref, **kw)
    return CPULion(ours, use_kernel=use_kernel, **kw), PlainLion(ref, **kw)


def run_against_fp32_reference(
    kind: str,
    dtype: torch.dtype,
    use_kernel: bool,
    sizes: tuple[int, ...] = SIZES,
    make_param: Callable[[Tensor], Tensor] = lambda t: t,
) -> tuple[Any, list[Tensor], Any, list[Tensor], list[Tensor]]:
    """Run ours on ``dtype`` params and the reference on fp32 copies rounded after each step;
    the last item is each reference element's largest magnitude along the way."""
    gen = torch.Generator().manual_seed(0)
    initial = [torch.randn(n, generator=gen).to(dtype) for n in sizes]
    ours = [torch.nn.Parameter(make_param(t.clone())) for t in initial]
    ref = [torch.nn.Parameter(make_param(t.clone()).float().contiguous()) for t in initial]
    opt, ref_opt = _pair(kind, ours, ref, use_kernel)
    reach = start_reach(ref)
    for _ in range(STEPS):
        for p, q in zip(ours, ref, strict=True):
            g = torch.randn(p.shape, generator=gen).to(dtype)
            p.grad, q.grad = g, g.float()
        opt.step()
        ref_opt.step()
        with torch.no_grad():
            for q in ref:
                q.copy_(q.to(dtype))  # the reference stores its params as ours does
        track_reach(reach, ref)
    for p in ours:
        assert p.dtype == dtype
    return opt, ours, ref_opt, ref, reach


@pytest.mark.parametrize("dtype", list(DTYPES.values()), ids=list(DTYPES))
@pytest.mark.parametrize("kind", ["adamw", "adam", "adagrad", "lion"])
def test_half_params_match_torch_on_fp32_copies(path: bool, kind: str, dtype: torch.dtype) -> None:
    opt, ours, ref_opt, ref, reach = run_against_fp32_reference(kind, dtype, path)
    assert opt.backend == ("kernel" if path else "fallback")
    for p, q, r in zip(ours, ref, reach, strict=True):
        if kind == "lion":
            assert torch.equal(p.detach(), q.detach().to(dtype))
        else:
            assert_half_trajectory_close(p, q, r, dtype)
        for key in STATE_KEYS.get(kind, ("exp_avg",)):
            assert opt.state[p][key].dtype == torch.float32
            expected = ref_opt.state[q][key]
            torch.testing.assert_close(opt.state[p][key], expected, rtol=1e-5, atol=1e-7)


@pytest.mark.parametrize("kind", ["adamw", "adagrad", "lion"])
def test_half_params_across_threads(kind: str) -> None:
    """A million bf16 elements split across threads, with a tail in the last block."""
    _, ours, _, ref, reach = run_against_fp32_reference(kind, torch.bfloat16, True, sizes=(1_000_003,))
    if kind == "lion":
        assert torch.equal(ours[0].detach(), ref[0].detach().bfloat16())
    else:
        assert_half_trajectory_close(ours[0], ref[0], reach[0], torch.bfloat16)


def test_transposed_half_param(path: bool) -> None:
    def transposed(t: Tensor) -> Tensor:
        return t.view(17, 59).t()  # 1003 elements

    _, ours, _, ref, reach = run_against_fp32_reference("adamw", torch.bfloat16, path, (1003,), transposed)
    assert not ours[0].is_contiguous()
    assert_half_trajectory_close(ours[0], ref[0], reach[0], torch.bfloat16)


def test_sparse_gradient_into_half_embedding(path: bool) -> None:
    """CPUAdagrad on a bf16 embedding with a sparse bf16 gradient: fp32 rows of torch's sparse
    Adagrad, rounded."""
    gen = torch.Generator().manual_seed(4)
    initial = torch.randn(40, 6, generator=gen).bfloat16()
    ours, ref = torch.nn.Parameter(initial.clone()), torch.nn.Parameter(initial.float())
    kw = {"lr": 1e-2, "lr_decay": 0.01}
    opt, ref_opt = CPUAdagrad([ours], use_kernel=path, **kw), torch.optim.Adagrad([ref], **kw)
    reach = start_reach([ref])
    for _ in range(5):
        indices = torch.randint(0, 40, (1, 9), generator=gen)
        values = torch.randn(9, 6, generator=gen).bfloat16()
        ours.grad = torch.sparse_coo_tensor(indices, values, (40, 6), check_invariants=True)
        ref.grad = torch.sparse_coo_tensor(indices, values.float(), (40, 6), check_invariants=True)
        opt.step()
        ref_opt.step()
        with torch.no_grad():
            ref.copy_(ref.bfloat16())
        track_reach(reach, [ref])
    assert_half_trajectory_close(ours, ref, reach[0], torch.bfloat16)


@pytest.mark.parametrize("use_kernel", [True, False], ids=["kernel", "fallback"])
def test_fp32_state_of_half_params_survives_a_state_dict(use_kernel: bool) -> None:
    """torch's load_state_dict casts state to the param dtype; ours keeps the saved fp32 state."""
    gen = torch.Generator().manual_seed(5)
    p = torch.nn.Parameter(torch.randn(100, generator=gen).bfloat16())
    opt = CPUAdam([p], use_kernel=use_kernel)
    for _ in range(3):
        p.grad = torch.randn(100, generator=gen).bfloat16()
        opt.step()
    saved = copy.deepcopy(opt.state_dict())
    fresh = CPUAdam([p], use_kernel=use_kernel)
    fresh.load_state_dict(saved)
    for key in ("exp_avg", "exp_avg_sq"):
        assert fresh.state[p][key].dtype == torch.float32
        assert torch.equal(fresh.state[p][key], saved["state"][0][key])
    # A state dict of torch's own AdamW on bf16 params (bf16 state) loads, widened to fp32.
    torch_opt = torch.optim.AdamW([p])
    p.grad = torch.randn(100, generator=gen).bfloat16()
    torch_opt.step()
    fresh.load_state_dict(torch_opt.state_dict())
    assert fresh.state[p]["exp_avg"].dtype == torch.float32
    assert torch.equal(fresh.state[p]["exp_avg"], torch_opt.state[p]["exp_avg"].float())


@pytest.mark.parametrize("use_kernel", [True, False], ids=["kernel", "fallback"])
def test_half_params_refuse_mismatched_grads_and_copies(use_kernel: bool) -> None:
    p = torch.nn.Parameter(torch.zeros(4, dtype=torch.bfloat16))
    p.grad = torch.zeros(4, dtype=torch.bfloat16)
    with pytest.raises(TypeError, match="half_params are copies of float32 params"):
        CPULion([p], use_kernel=use_kernel).step(half_params=[torch.zeros(4, dtype=torch.float16)])
    CPULion([p], use_kernel=use_kernel).step(half_params=[None])  # None for it is fine


@pytest.mark.parametrize("dtype", list(DTYPES.values()), ids=list(DTYPES))
def test_every_half_value_survives_the_widening_and_rounding(path: bool, dtype: torch.dtype) -> None:
    """All 65536 bit patterns as params of a step that changes nothing (Lion, lr 0): each comes
    back bit for bit (NaNs as NaNs), so widening on load and rounding on store are exact."""
    bits = torch.arange(-(2**15), 2**15, dtype=torch.int32).to(torch.int16)
    values = bits.view(dtype)
    p = torch.nn.Parameter(values.clone())
    p.grad = torch.zeros_like(values)
    CPULion([p], lr=0.0, use_kernel=path).step()
    nan = values.isnan()
    assert torch.equal(p.detach().isnan(), nan)
    assert torch.equal(p.detach()[~nan].view(torch.int16), bits[~nan])


@pytest.mark.parametrize(
    "wrong", [{"lr": 1.2e-2}, {"weight_decay": 0.0}, {"betas": (0.9, 0.95)}], ids=["lr", "decay", "beta1"]
)
def test_the_bound_catches_a_wrong_rule(monkeypatch: pytest.MonkeyPatch, wrong: dict[str, Any]) -> None:
    """The bound along the way is loose only by the roundings: a reference AdamW with one setting
    off (20% more lr, no decay, another beta1) fails it on hundreds of the 1003 elements."""
    kw = HYPER["adamw"]

    def wrong_pair(kind: str, ours: list[Tensor], ref: list[Tensor], use_kernel: bool) -> tuple[Any, Any]:
        return CPUAdam(ours, use_kernel=use_kernel, **kw), torch.optim.AdamW(ref, **{**kw, **wrong})

    monkeypatch.setattr(sys.modules[__name__], "_pair", wrong_pair)
    _, ours, _, ref, reach = run_against_fp32_reference("adamw", torch.bfloat16, True, (1003,))
    with pytest.raises(AssertionError, match=r"[0-9]{3} of 1003 elements off"):
        assert_half_trajectory_close(ours[0], ref[0], reach[0], torch.bfloat16)
