"""The CPU optimizers' list form: a param group's tensors stepped in one call, on all threads.

The list form (adam_steps, adagrad_steps, lion_steps: what the fronts call for a group's plain
tensors) checks every tensor, then steps them all in one parallel run that splits the group's
elements across threads as if they were one tensor, cutting a tensor where a thread's share
ends. The sizes below put cuts inside tensors for 2 and 3 threads (the group holds ~180K
elements; a thread takes at least 32K), next to empty, one-element and tail-only tensors.

References: torch.optim.AdamW / Adagrad (tolerances as in test_cpu_optim.py) and a plain Lion
(exactly), run on copies of the same params.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from types import ModuleType
from typing import Any

import pytest
import torch
from torch import Tensor

from kernels.optim import cpu as cpu_optim
from kernels.optim.cpu import CPUAdagrad, CPUAdam, CPULion

# Empty, one element, under a vector, a tail, then tensors a thread's share ends inside.
SIZES = (0, 1, 31, 33, 1000, 40_000, 70_001, 5, 65_553)
STEPS = 5
RTOL, ATOL = 1e-5, 1e-6


@pytest.fixture(params=[1, 2, 3], ids=lambda n: f"{n}-threads")
def threads(request: pytest.FixtureRequest) -> Iterator[int]:
    before = torch.get_num_threads()
    torch.set_num_threads(request.param)
    yield request.param
    torch.set_num_threads(before)


def plain_lion(
    params: list[Tensor],
    lr: float,
    betas: tuple[float, float],
    weight_decay: float,
    state: list[Tensor] | None = None,
) -> Callable[[], None]:
    """Lion as published, one tensor at a time; `state` (the momenta) starts at zeros."""
    state = state if state is not None else [torch.zeros_like(p) for p in params]
    b1, b2 = betas

    def step() -> None:
        with torch.no_grad():
            for p, m in zip(params, state, strict=True):
                assert p.grad is not None
                g = p.grad
                c = m * b1 + g * (1 - b1)
                p.mul_(1 - lr * weight_decay)
                p.sub_(torch.sign(c) * lr)
                m.copy_(m * b2 + g * (1 - b2))

    return step


def run(make_step: Callable[[list[Tensor]], Callable[[], Any]]) -> list[Tensor]:
    gen = torch.Generator().manual_seed(0)
    params = [torch.randn(n, generator=gen).requires_grad_() for n in SIZES]
    step = make_step(params)
    for k in range(STEPS):
        grad_gen = torch.Generator().manual_seed(100 + k)
        for p in params:
            p.grad = torch.randn(p.numel(), generator=grad_gen)
        step()
    return [p.detach() for p in params]


def stepped_by_list(kind: str, opt: torch.optim.Optimizer) -> Callable[[], Any]:
    """opt.step, asserting that the group went through the list form of the kernel."""
    module = cpu_optim._OPS[f"cpu_{kind}"].load()
    calls: list[int] = []
    list_fn_name = type(opt).kernel_list_fn  # type: ignore[attr-defined]

    def step() -> None:
        real = getattr(module, list_fn_name)

        def counted(*args: Any) -> Any:
            calls.append(len(args[0]))
            return real(*args)

        setattr(module, list_fn_name, counted)
        try:
            opt.step()
        finally:
            setattr(module, list_fn_name, real)
        assert calls and calls[-1] == len(SIZES), f"{kind}: not one list call per group: {calls}"

    return step


@pytest.mark.parametrize("kind", ["adam", "adagrad", "lion"])
def test_a_group_of_many_sizes_matches_the_reference(threads: int, kind: str) -> None:
    if kind == "adam":
        kw: dict[str, Any] = {"lr": 1e-2, "betas": (0.8, 0.95), "eps": 1e-6, "weight_decay": 0.1}
        expected = run(lambda ps: torch.optim.AdamW(ps, **kw).step)
        actual = run(lambda ps: stepped_by_list(kind, CPUAdam(ps, use_kernel=True, **kw)))
    elif kind == "adagrad":
        kw = {
            "lr": 1e-2,
            "lr_decay": 0.01,
            "weight_decay": 0.1,
            "initial_accumulator_value": 0.1,
            "eps": 1e-10,
        }
        expected = run(lambda ps: torch.optim.Adagrad(ps, **kw).step)
        actual = run(lambda ps: stepped_by_list(kind, CPUAdagrad(ps, use_kernel=True, **kw)))
    else:
        kw = {"lr": 1e-2, "betas": (0.9, 0.99), "weight_decay": 0.1}
        expected = run(lambda ps: plain_lion(ps, **kw))
        actual = run(lambda ps: stepped_by_list(kind, CPULion(ps, use_kernel=True, **kw)))
    exact = kind == "lion"
    for size, a, e in zip(SIZES, actual, expected, strict=True):
        torch.testing.assert_close(
            a, e, rtol=0 if exact else RTOL, atol=0 if exact else ATOL, msg=f"size {size}"
        )


@pytest.fixture(scope="module")
def lion() -> ModuleType:
    return cpu_optim._OPS["cpu_lion"].load()


def test_a_bad_tensor_in_a_list_steps_none_of_them(lion: ModuleType, threads: int) -> None:
    """Every tensor is checked before any is stepped: a refused call leaves the group as it was."""
    params = [torch.ones(40_000) for _ in range(3)]
    grads = [torch.ones(40_000), torch.ones(40_000), torch.ones(40_000, dtype=torch.float64)]
    state = [torch.zeros(40_000) for _ in range(3)]
    with pytest.raises(RuntimeError, match="cpu_lion: grads must be float32, got float64"):
        lion.lion_steps(params, grads, state, 1e-2, 0.9, 0.99, 0.0)
    assert all(torch.equal(p, torch.ones(40_000)) for p in params)
    assert all(torch.equal(m, torch.zeros(40_000)) for m in state)


def test_a_list_of_mixed_storage_matches_the_reference(lion: ModuleType, threads: int) -> None:
    """fp32, bf16 and fp16 params in one list, each run by its own kernel copy. Reference: the
    plain Lion on the params in fp32, rounded back to their dtype (the kernels' arithmetic is
    fp32 for every storage type)."""
    gen = torch.Generator().manual_seed(3)
    dtypes = (torch.float32, torch.bfloat16, torch.float16, torch.float32)
    sizes = (50_001, 33, 40_000, 20_000)
    params = [torch.randn(n, generator=gen).to(d) for n, d in zip(sizes, dtypes, strict=True)]
    grads = [torch.randn(n, generator=gen).to(d) for n, d in zip(sizes, dtypes, strict=True)]
    state = [torch.randn(n, generator=gen) for n in sizes]
    wide = [p.float().requires_grad_() for p in params]
    for w, g in zip(wide, grads, strict=True):
        w.grad = g.float()
    plain_lion(wide, lr=1e-2, betas=(0.9, 0.99), weight_decay=0.1, state=[m.clone() for m in state])()
    lion.lion_steps(params, grads, state, 1e-2, 0.9, 0.99, 0.1)
    for size, p, w in zip(sizes, params, wide, strict=True):
        torch.testing.assert_close(p, w.detach().to(p.dtype), rtol=0, atol=0, msg=f"{p.dtype} x {size}")
