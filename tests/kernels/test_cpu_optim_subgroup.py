"""step_subgroup / rollback_subgroup on the CPU optimizers (ZeRO-Offload's sub-group stepping).

References: torch.optim.AdamW / Adagrad (one per param group, stepped as often as that group)
and Lion written out below; a rollback is checked against copies of the params and the state
taken before the step it undoes, bit for bit.
"""

from __future__ import annotations

import copy
from typing import Any

import pytest
import torch
from torch import Tensor

from kernels.optim.cpu import CPUAdagrad, CPUAdam, CPULion

KINDS = ("adam", "adagrad", "lion")
SIZES = ((1, 1003), (7,))  # group 0, group 1
HYPER: dict[str, dict[str, Any]] = {
    "adam": {"lr": 1e-2, "eps": 1e-6, "weight_decay": 0.1},
    "adagrad": {"lr": 1e-2, "lr_decay": 0.01, "weight_decay": 0.1},
    "lion": {"lr": 1e-2, "weight_decay": 0.1},
}


def _groups(seed: int = 0) -> list[list[torch.nn.Parameter]]:
    gen = torch.Generator().manual_seed(seed)
    return [[torch.nn.Parameter(torch.randn(n, generator=gen)) for n in sizes] for sizes in SIZES]


def _ours(kind: str, groups: list[list[torch.nn.Parameter]], use_kernel: bool) -> Any:
    cls: Any = {"adam": CPUAdam, "adagrad": CPUAdagrad, "lion": CPULion}[kind]
    # Group 1 has its own lr: each sub-group step must use its own group's options.
    return cls(
        [{"params": groups[0]}, {"params": groups[1], "lr": 3e-2}], use_kernel=use_kernel, **HYPER[kind]
    )


class PlainLion(torch.optim.Optimizer):
    """Lion as published, each product and sum rounded on its own (as the kernel does)."""

    def __init__(self, params: list[torch.nn.Parameter], lr: float, weight_decay: float) -> None:
        super().__init__(params, {"lr": lr, "wd": weight_decay})

    @torch.no_grad()
    def step(self, closure: Any = None) -> None:  # type: ignore[override]
        for group in self.param_groups:
            lr, wd = group["lr"], group["wd"]
            for p in group["params"]:
                m = self.state[p].setdefault("m", torch.zeros_like(p))
                c = m * 0.9 + p.grad * (1 - 0.9)
                p.mul_(1 - lr * wd)
                p.sub_(torch.sign(c) * lr)
                m.copy_(m * 0.99 + p.grad * (1 - 0.99))


def _reference(kind: str, params: list[torch.nn.Parameter], lr: float) -> torch.optim.Optimizer:
    kw = {**HYPER[kind], "lr": lr}
    if kind == "adam":
        return torch.optim.AdamW(params, **kw)
    if kind == "adagrad":
        return torch.optim.Adagrad(params, **kw)
    return PlainLion(params, lr=lr, weight_decay=kw["weight_decay"])


def _set_grads(params: list[torch.nn.Parameter], gen: torch.Generator) -> list[Tensor]:
    grads = [torch.randn(p.shape, generator=gen) for p in params]
    for p, g in zip(params, grads, strict=True):
        p.grad = g.clone()
    return grads


def _snapshot(opt: torch.optim.Optimizer, params: list[torch.nn.Parameter]) -> tuple[list[Tensor], Any]:
    return [p.detach().clone() for p in params], copy.deepcopy(opt.state_dict()["state"])


def _assert_same(actual: Any, expected: Any) -> None:
    """Bit-for-bit equality of nested dicts / lists of tensors and numbers."""
    if isinstance(expected, Tensor):
        assert isinstance(actual, Tensor) and actual.dtype == expected.dtype
        bits = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}[expected.element_size()]
        assert torch.equal(actual.reshape(-1).view(bits), expected.reshape(-1).view(bits))
    elif isinstance(expected, dict):
        assert isinstance(actual, dict) and actual.keys() == expected.keys()
        for key in expected:
            _assert_same(actual[key], expected[key])
    elif isinstance(expected, list | tuple):
        assert isinstance(actual, list | tuple) and len(actual) == len(expected)
        for a, e in zip(actual, expected, strict=True):
            _assert_same(a, e)
    else:
        assert actual == expected


@pytest.fixture(params=[True, False], ids=["kernel", "fallback"])
def use_kernel(request: pytest.FixtureRequest) -> bool:
    value: bool = request.param
    return value


@pytest.mark.parametrize("kind", KINDS)
def test_groups_step_on_their_own_like_separate_torch_optimizers(kind: str, use_kernel: bool) -> None:
    """Group 0 steps 5 times, group 1 steps 3 times, interleaved; each matches a torch optimizer
    that holds that group alone and steps as often, and each param counts its own steps."""
    groups = _groups()
    refs_params = [[torch.nn.Parameter(p.detach().clone()) for p in g] for g in groups]
    opt = _ours(kind, groups, use_kernel)
    refs = [_reference(kind, refs_params[0], 1e-2), _reference(kind, refs_params[1], 3e-2)]
    gen = torch.Generator().manual_seed(1)
    for group_id in (0, 1, 0, 0, 1, 0, 1, 0):
        grads = _set_grads(groups[group_id], gen)
        for p, g in zip(refs_params[group_id], grads, strict=True):
            p.grad = g
        opt.step_subgroup(group_id)
        refs[group_id].step()
    exact = kind == "lion"
    for ours_group, ref_group in zip(groups, refs_params, strict=True):
        for p, q in zip(ours_group, ref_group, strict=True):
            tolerance = {"rtol": 0.0, "atol": 0.0} if exact else {"rtol": 1e-5, "atol": 1e-6}
            torch.testing.assert_close(p.detach(), q.detach(), **tolerance)
    if kind != "lion":  # Lion keeps no step count
        assert [float(opt.state[p]["step"]) for g in groups for p in g] == [5.0, 5.0, 3.0]


@pytest.mark.parametrize("kind", KINDS)
def test_rollback_restores_params_and_state_bit_for_bit(kind: str, use_kernel: bool) -> None:
    groups = _groups(2)
    flat = [p for g in groups for p in g]
    opt = _ours(kind, groups, use_kernel)
    gen = torch.Generator().manual_seed(3)
    for _ in range(3):
        _set_grads(flat, gen)
        opt.step()
    before = _snapshot(opt, flat)
    _set_grads(flat, gen)
    opt.step_subgroup(0)
    opt.step_subgroup(1)
    assert not torch.equal(groups[0][1].detach(), before[0][1])  # the step did change something
    opt.rollback_subgroup(0)
    after_params, after_state = _snapshot(opt, flat)
    _assert_same(after_params[:2], before[0][:2])  # group 0 is back
    _assert_same({i: after_state[i] for i in (0, 1)}, {i: before[1][i] for i in (0, 1)})
    assert not torch.equal(after_params[2], before[0][2])  # group 1 keeps its step
    opt.rollback_subgroup(1)
    _assert_same(_snapshot(opt, flat), before)  # and now group 1 too


@pytest.mark.parametrize("kind", KINDS)
def test_rollback_of_a_first_step_removes_the_state_it_created(kind: str, use_kernel: bool) -> None:
    groups = _groups(4)
    opt = _ours(kind, groups, use_kernel)
    initial = [p.detach().clone() for p in groups[0]]
    _set_grads(groups[0], torch.Generator().manual_seed(5))
    opt.step_subgroup(0)
    opt.rollback_subgroup(0)
    _assert_same([p.detach() for p in groups[0]], initial)
    assert all(p not in opt.state for p in groups[0])


@pytest.mark.parametrize("kind", KINDS)
def test_rollback_undoes_an_overflowed_step(kind: str, use_kernel: bool) -> None:
    """What ZeRO-Offload does on overflow: the step met an inf gradient, roll it back."""
    groups = _groups(6)
    opt = _ours(kind, groups, use_kernel)
    gen = torch.Generator().manual_seed(7)
    _set_grads(groups[0], gen)
    opt.step_subgroup(0)
    before = _snapshot(opt, groups[0])
    _set_grads(groups[0], gen)
    groups[0][1].grad[5] = float("inf")  # type: ignore[index]
    half = [torch.empty(1, dtype=torch.bfloat16), torch.empty(1003, dtype=torch.bfloat16)]
    opt.step_subgroup(0, half_params=half)
    assert not bool(opt.state[groups[0][1]][type(opt).state_keys[0]].isfinite().all())
    opt.rollback_subgroup(0, half_params=half)
    _assert_same(_snapshot(opt, groups[0]), before)
    for p, h in zip(groups[0], half, strict=True):
        assert torch.equal(h, p.detach().to(torch.bfloat16))


def test_rollback_errors(use_kernel: bool) -> None:
    groups = _groups()
    opt = _ours("adam", groups, use_kernel)
    _set_grads([p for g in groups for p in g], torch.Generator().manual_seed(8))
    with pytest.raises(ValueError, match=r"rollback_subgroup\(0\): param group 0 has no sub-group step"):
        opt.rollback_subgroup(0)  # before any step
    opt.step_subgroup(0)
    opt.step_subgroup(1)
    opt.step()
    with pytest.raises(ValueError, match="no sub-group step to roll back"):
        opt.rollback_subgroup(0)  # step() made it final
    opt.step_subgroup(0)
    opt.rollback_subgroup(0)
    with pytest.raises(ValueError, match="no sub-group step to roll back"):
        opt.rollback_subgroup(0)  # one step back only
    opt.step_subgroup(1)
    opt.load_state_dict(copy.deepcopy(opt.state_dict()))
    with pytest.raises(ValueError, match="no sub-group step to roll back"):
        opt.rollback_subgroup(1)
    with pytest.raises(IndexError, match="group_id 2 is out of range: the optimizer has 2 param groups"):
        opt.step_subgroup(2)
    with pytest.raises(ValueError, match="half_params has 1 entries but param group 0 has 2 params"):
        opt.step_subgroup(0, half_params=[None])


def test_subgroup_step_reuses_its_buffers() -> None:
    """Steady sub-group stepping copies into the buffers of the previous step."""
    groups = _groups()
    opt = _ours("adam", groups, True)
    gen = torch.Generator().manual_seed(9)
    _set_grads(groups[0], gen)
    opt.step_subgroup(0)  # creates the state: nothing to copy aside yet but the params
    _set_grads(groups[0], gen)
    opt.step_subgroup(0)
    saved = opt._rollback._saved[0]
    pointers = [(s.value.data_ptr(), s.state["exp_avg"].data_ptr()) for s in saved]
    _set_grads(groups[0], gen)
    opt.step_subgroup(0)
    assert [(s.value.data_ptr(), s.state["exp_avg"].data_ptr()) for s in opt._rollback._saved[0]] == pointers


@pytest.mark.parametrize("state_dtype", [torch.float32, torch.bfloat16], ids=["fp32_moments", "bf16_moments"])
def test_rollback_of_half_params_and_half_state(use_kernel: bool, state_dtype: torch.dtype) -> None:
    """bf16 params (and bf16 moments) come back bit for bit too."""
    gen = torch.Generator().manual_seed(10)
    params = [torch.nn.Parameter(torch.randn(n, generator=gen).bfloat16()) for n in (7, 1003)]
    opt = CPUAdam([{"params": params, "state_dtype": state_dtype}], lr=1e-2, use_kernel=use_kernel)
    for _ in range(2):
        for p in params:
            p.grad = torch.randn(p.shape, generator=gen).bfloat16()
        opt.step_subgroup(0)
    before = _snapshot(opt, params)
    for p in params:
        p.grad = torch.randn(p.shape, generator=gen).bfloat16()
    opt.step_subgroup(0)
    assert not torch.equal(params[1].detach(), before[0][1])
    opt.rollback_subgroup(0)
    _assert_same(_snapshot(opt, params), before)
    assert opt.state[params[0]]["exp_avg"].dtype == state_dtype
