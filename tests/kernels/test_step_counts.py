"""The fused optimizers' per-param step counts, counted for all params in one tensor operation.

Each count is checked against a plain Python tally of the steps its param took; the counts
are views into one block, so a wrong mapping from block to param shows as a wrong count.
"""

from __future__ import annotations

import copy
import io
import warnings

import pytest
import torch

from kernels.optim.fused import FusedAdam, FusedLion
from kernels.optim.fused_lamb import FusedLamb

OPTIMIZERS = [FusedAdam, FusedLamb, FusedLion]


def _params(n: int) -> list[torch.nn.Parameter]:
    return [torch.nn.Parameter(torch.randn(3 + i)) for i in range(n)]


def _step(opt: torch.optim.Optimizer, params: list[torch.nn.Parameter], with_grad: list[bool]) -> None:
    for p, has in zip(params, with_grad):
        p.grad = torch.randn_like(p) if has else None
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the fallback's once-per-reason warning
        opt.step()


def _counts(opt: torch.optim.Optimizer, params: list[torch.nn.Parameter]) -> list[float | None]:
    return [float(opt.state[p]["step"]) if "step" in opt.state[p] else None for p in params]


@pytest.mark.parametrize("cls", OPTIMIZERS, ids=lambda c: c.__name__)
def test_each_count_is_the_number_of_steps_its_param_took(cls: type) -> None:
    params = _params(7)
    opt = cls(params, use_kernel=False)
    tally = [0] * len(params)
    gen = torch.Generator().manual_seed(3)
    for _ in range(12):
        with_grad = (torch.rand(len(params), generator=gen) < 0.7).tolist()
        _step(opt, params, with_grad)
        tally = [t + int(has) for t, has in zip(tally, with_grad)]
        assert _counts(opt, params) == [float(t) if t else None for t in tally]
    for p in params:
        count = opt.state[p].get("step")
        assert count is None or (
            count.dtype == torch.float32 and count.dim() == 0 and count.device.type == "cpu"
        )


def test_stepping_the_first_params_only_counts_only_them() -> None:
    params = _params(5)
    opt = FusedAdam(params, use_kernel=False)
    _step(opt, params, [True] * 5)
    _step(opt, params, [True, True, False, False, False])
    assert _counts(opt, params) == [2.0, 2.0, 1.0, 1.0, 1.0]
    _step(opt, params, [True] * 5)
    assert _counts(opt, params) == [3.0, 3.0, 2.0, 2.0, 2.0]


def _twin(opt: torch.optim.Optimizer, params: list[torch.nn.Parameter]) -> tuple[torch.optim.Optimizer, list]:
    """A copy of ``opt`` and its params through a saved state dict (counts not shared)."""
    buffer = io.BytesIO()
    torch.save(opt.state_dict(), buffer)
    buffer.seek(0)
    twin_params = [torch.nn.Parameter(p.detach().clone()) for p in params]
    twin = type(opt)(twin_params, use_kernel=False)
    twin.load_state_dict(torch.load(buffer))
    return twin, twin_params


def _step_both(pairs: list[tuple[torch.optim.Optimizer, list[torch.nn.Parameter]]]) -> None:
    grads = [torch.randn_like(p) for p in pairs[0][1]]
    for opt, params in pairs:
        for p, g in zip(params, grads):
            p.grad = g.clone()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            opt.step()


@pytest.mark.parametrize("cls", OPTIMIZERS, ids=lambda c: c.__name__)
def test_reordered_params_with_different_counts_step_with_their_own(cls: type) -> None:
    # Bias correction uses the count: an update with another param's count differs. The
    # reference steps each param by an optimizer of its own, where no order can be mixed up.
    params = _params(5)
    opt = cls(params, use_kernel=False, weight_decay=0.1)
    _step(opt, params, [True] * 5)
    for i, p in enumerate(params):
        opt.state[p]["step"] += i  # in place, into the shared block: counts 1..5
    singles = []
    for p in params:
        q = torch.nn.Parameter(p.detach().clone())
        single = cls([q], use_kernel=False, weight_decay=0.1)
        single.state[q] = {key: value.clone() for key, value in opt.state[p].items()}
        singles.append((single, [q]))
    opt.param_groups[0]["params"].reverse()
    _step_both([(opt, params)])
    for p, (single, q) in zip(params, singles):
        p_grad = p.grad
        assert p_grad is not None
        q[0].grad = p_grad.clone()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            single.step()
    assert (
        _counts(opt, params) == [_counts(single, q)[0] for single, q in singles] == [2.0, 3.0, 4.0, 5.0, 6.0]
    )
    for p, (_, q) in zip(params, singles):
        torch.testing.assert_close(p, q[0], rtol=0, atol=0)


def test_a_count_replaced_by_hand_is_taken() -> None:
    params = _params(4)
    opt = FusedLion(params, use_kernel=False)
    _step(opt, params, [True] * 4)
    opt.state[params[2]]["step"] = torch.tensor(41.0)
    _step(opt, params, [True] * 4)
    assert _counts(opt, params) == [2.0, 2.0, 42.0, 2.0]
    opt.state[params[0]]["step"] += 5  # in place, into the shared block
    _step(opt, params, [True] * 4)
    assert _counts(opt, params) == [8.0, 3.0, 43.0, 3.0]


def test_each_group_counts_its_own_steps() -> None:
    params = _params(6)
    opt = FusedLamb([{"params": params[:3]}, {"params": params[3:], "lr": 1e-4}], use_kernel=False)
    _step(opt, params, [True] * 6)
    _step(opt, params, [True, True, True, False, False, False])
    assert _counts(opt, params) == [2.0, 2.0, 2.0, 1.0, 1.0, 1.0]


def test_saved_and_loaded_counts_go_on_counting_on_their_own() -> None:
    params = _params(5)
    opt = FusedAdam(params, use_kernel=False)
    for _ in range(3):
        _step(opt, params, [True] * 5)
    twin, twin_params = _twin(opt, params)
    _step(twin, twin_params, [True] * 5)
    assert _counts(twin, twin_params) == [4.0] * 5
    assert _counts(opt, params) == [3.0] * 5  # the original is untouched


def test_a_deep_copy_counts_on_its_own() -> None:
    params = _params(4)
    opt = FusedLamb(params, use_kernel=False)
    _step(opt, params, [True] * 4)
    twin = copy.deepcopy(opt)
    twin_params = twin.param_groups[0]["params"]
    _step(twin, twin_params, [True] * 4)
    _step(twin, twin_params, [True, False, True, False])
    assert _counts(twin, twin_params) == [3.0, 2.0, 3.0, 2.0]
    assert _counts(opt, params) == [1.0] * 4
