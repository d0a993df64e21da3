"""kernels.compat.deepspeed's optimizers against DeepSpeed's own (its CPU accelerator's ops).

The compat classes promise DeepSpeed's behaviour; DeepSpeed itself (0.19.8, JIT-building its
``cpu_adam``, ``cpu_adagrad``, ``cpu_lion`` and CPU ``fused_adam`` ops once) is the reference:
the same params, grads and settings are stepped by both, and params and state compared. Also
compared: the constructors' signatures, DeepSpeed's state dicts loaded by ours mid-run, and
ZeRO's sub-group step / rollback.

Tolerances are rounding, not rule: both compute in fp32 but in different orders (and with or
without fused multiply-adds), so fp32 results drift apart by ulps per step. One constant
differs too: DeepSpeed's Adam forms ``1 - beta2`` in fp32 (``1 - 0.999f`` = 0.00099998713,
1.3e-5 below 0.001), ours rounds it from double as torch does, so the second moment differs by
1.3e-5 relative: fp32 is held to 3e-5 relative (1e-5 absolute, 1% of one step's update at
lr 1e-3); half-precision params round once per step, so a
tie broken differently costs one ulp of the half type at the magnitude the value had then, an
offset that stays as the value shrinks, and later steps may move a value to the next one: 2 ulps
at the largest magnitude along the way (tests/kernels/_half_bounds.py), or one update, lr, near
zero.
"""

from __future__ import annotations

import inspect
import io
from collections.abc import Callable
from typing import Any

import pytest
import torch
from torch import Tensor

from kernels.compat import deepspeed as ours
from tests.kernels._deepspeed import import_deepspeed
from tests.kernels._half_bounds import assert_half_trajectory_close, start_reach, track_reach


def _deepspeed_optimizers() -> dict[str, Any]:
    """DeepSpeed's optimizer classes by name (the test module skips without DeepSpeed)."""
    compared = "the compat optimizers"
    adam = import_deepspeed("ops.adam", compared)
    adagrad = import_deepspeed("ops.adagrad", compared)
    lion = import_deepspeed("ops.lion", compared)
    lamb = import_deepspeed("ops.lamb", compared)
    return {
        "DeepSpeedCPUAdam": adam.DeepSpeedCPUAdam,
        "DeepSpeedCPUAdagrad": adagrad.DeepSpeedCPUAdagrad,
        "DeepSpeedCPULion": lion.DeepSpeedCPULion,
        "FusedAdam": adam.FusedAdam,
        "FusedLion": lion.FusedLion,
        "FusedLamb": lamb.FusedLamb,
    }


THEIRS = _deepspeed_optimizers()
STEPS = 20
SIZES = (1, 7, 64, 1031, 4101)  # SIMD tails and more than one vector block
# Which of DeepSpeed's state entries is which of ours (Adagrad's accumulator is "sum", as torch's).
STATE_KEYS = {
    "DeepSpeedCPUAdam": {"exp_avg": "exp_avg", "exp_avg_sq": "exp_avg_sq"},
    "DeepSpeedCPUAdagrad": {"exp_avg_sq": "sum"},
    "DeepSpeedCPULion": {"exp_avg": "exp_avg"},
    "FusedAdam": {"exp_avg": "exp_avg", "exp_avg_sq": "exp_avg_sq"},
}
SETTINGS: dict[str, list[dict[str, Any]]] = {
    "DeepSpeedCPUAdam": [
        {},
        {"lr": 1e-2, "weight_decay": 0.1},
        {"adamw_mode": False, "weight_decay": 0.1},
        {"bias_correction": False},
    ],
    "DeepSpeedCPUAdagrad": [{}, {"lr": 1e-1, "weight_decay": 0.1}],
    "DeepSpeedCPULion": [{}, {"lr": 1e-2, "weight_decay": 0.1}],
}
CASES = [(name, settings) for name, options in SETTINGS.items() for settings in options]


def assert_rounding_close(mine: Tensor, theirs: Tensor, lr: float, what: str) -> None:
    """Equal up to the rounding the module docstring accounts for."""
    if theirs.dtype == torch.float32:
        rtol, atol = 3e-5, 1e-5
    else:
        rtol, atol = 2 * torch.finfo(theirs.dtype).eps, lr
    torch.testing.assert_close(
        mine.float(), theirs.float(), rtol=rtol, atol=atol, msg=lambda message: f"{what}: {message}"
    )


def make_model(dtype: torch.dtype, seed: int = 0) -> tuple[list[Tensor], list[Tensor]]:
    generator = torch.Generator().manual_seed(seed)
    params = [torch.randn(n, generator=generator).to(dtype) for n in SIZES]
    grads = [torch.randn(n, generator=generator) for n in SIZES]
    return params, grads


def groups_of(params: list[Tensor], settings: dict[str, Any]) -> list[dict[str, Any]]:
    # Two groups, the second with its own lr: group settings must reach the update.
    lr = settings.get("lr", 1e-3)
    return [{"params": params[:2]}, {"params": params[2:], "lr": lr / 2}]


def run_steps(
    opt: torch.optim.Optimizer,
    params: list[Tensor],
    grads: list[Tensor],
    steps: range,
    reach: list[Tensor] | None = None,
) -> None:
    """Step ``opt``; ``reach``, where given, follows each element's largest magnitude."""
    for step in steps:
        for p, g in zip(params, grads):
            p.grad = (g * (1 + 0.3 * step)).to(p.dtype)  # grads that change from step to step
        opt.step()
        if reach is not None:
            track_reach(reach, params)


def stepped(
    make: Callable[..., torch.optim.Optimizer], dtype: torch.dtype, settings: dict[str, Any]
) -> tuple[list[Tensor], torch.optim.Optimizer, list[Tensor]]:
    """The params and optimizer after STEPS steps, and each element's largest magnitude."""
    start, grads = make_model(dtype)
    params = [torch.nn.Parameter(p.clone()) for p in start]
    opt = make(groups_of(params, settings), **settings)
    reach = start_reach(params)
    run_steps(opt, params, grads, range(STEPS), reach)
    return params, opt, reach


def assert_same_run(
    name: str,
    mine: tuple[list[Tensor], Any],
    theirs: tuple[list[Tensor], Any],
    lr: float,
    reach: list[Tensor] | None = None,
) -> None:
    """Params and state equal up to rounding; half params bounded along their way (``reach``:
    the reference's largest magnitudes, where the run tracked them)."""
    (my_params, my_opt), (their_params, their_opt) = mine, theirs
    for i, (a, b) in enumerate(zip(my_params, their_params)):
        assert a.dtype == b.dtype
        if reach is not None and b.dtype != torch.float32:
            assert_half_trajectory_close(a, b, reach[i], b.dtype, atol=lr)
        else:
            assert_rounding_close(a.detach(), b.detach(), lr, f"param {i}")
        for their_key, my_key in STATE_KEYS[name].items():
            assert_rounding_close(
                my_opt.state[a][my_key], their_opt.state[b][their_key], lr, f"param {i} {their_key}"
            )


# Slow tier (`make parity`): DeepSpeed JIT-builds each of its CPU ops on first use, about a minute
# apiece on 2 cores; the constructor signatures below need no build and run in every `make test`.
@pytest.mark.slow
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16], ids=str)
@pytest.mark.parametrize(("name", "settings"), CASES, ids=[f"{n}-{s}" for n, s in CASES])
def test_cpu_optimizer_steps_as_deepspeeds(name: str, settings: dict[str, Any], dtype: torch.dtype) -> None:
    lr = settings.get("lr", 1e-3)
    mine = stepped(getattr(ours, name), dtype, settings)
    theirs = stepped(THEIRS[name], dtype, settings)
    assert_same_run(name, mine[:2], theirs[:2], lr, theirs[2])


@pytest.mark.slow
def test_bf16_state_as_deepspeeds() -> None:
    # fp32_optimizer_states=False: both keep Adam's moments in the bf16 params' dtype.
    settings = {"fp32_optimizer_states": False}
    mine = stepped(ours.DeepSpeedCPUAdam, torch.bfloat16, settings)
    theirs = stepped(THEIRS["DeepSpeedCPUAdam"], torch.bfloat16, settings)
    for p in mine[0]:
        assert mine[1].state[p]["exp_avg"].dtype == torch.bfloat16
    assert_same_run("DeepSpeedCPUAdam", mine[:2], theirs[:2], 1e-3, theirs[2])


@pytest.mark.slow
def test_fused_adam_steps_as_deepspeeds() -> None:
    # DeepSpeed's CPU FusedAdam (its cpu fused_adam op) against ours (the PyTorch fallback on a CPU).
    settings = {"lr": 1e-2, "weight_decay": 0.1}
    mine = stepped(ours.FusedAdam, torch.float32, settings)
    assert mine[1].backend == "fallback"  # its warning comes once per process, so not asserted
    theirs = stepped(THEIRS["FusedAdam"], torch.float32, settings)
    assert_same_run("FusedAdam", mine[:2], theirs[:2], 1e-2)


@pytest.mark.slow
@pytest.mark.parametrize("name", ["DeepSpeedCPUAdam", "DeepSpeedCPUAdagrad", "DeepSpeedCPULion"])
def test_loads_deepspeeds_state_dict_mid_run(name: str) -> None:
    """DeepSpeed steps 10 times and saves; ours loads that and goes on, as DeepSpeed goes on."""
    start, grads = make_model(torch.float32, seed=1)
    theirs = [torch.nn.Parameter(p.clone()) for p in start]
    their_opt = THEIRS[name](groups_of(theirs, {}))
    run_steps(their_opt, theirs, grads, range(10))
    # Through a checkpoint file's bytes: in one process a loaded state dict shares its tensors.
    buffer = io.BytesIO()
    torch.save(their_opt.state_dict(), buffer)
    buffer.seek(0)
    saved = torch.load(buffer)
    mine = [torch.nn.Parameter(p.detach().clone()) for p in theirs]
    my_opt = getattr(ours, name)(groups_of(mine, {}))
    my_opt.load_state_dict(saved)
    run_steps(their_opt, theirs, grads, range(10, 20))
    run_steps(my_opt, mine, grads, range(10, 20))
    assert_same_run(name, (mine, my_opt), (theirs, their_opt), 1e-3)


@pytest.mark.slow
def test_subgroup_step_and_rollback_as_deepspeeds() -> None:
    """ZeRO-Offload's pattern: one flat param per sub-group, only the current one with a grad."""
    start, grads = make_model(torch.float32, seed=2)
    runs = []
    for make in (ours.DeepSpeedCPUAdam, THEIRS["DeepSpeedCPUAdam"]):
        flat = [torch.nn.Parameter(p.clone()) for p in start[3:]]
        opt = make(flat, lr=1e-2)
        for step in range(3):
            for sub_group, (p, g) in enumerate(zip(flat, grads[3:])):
                for other in flat:
                    other.grad = None
                p.grad = g * (1 + step)
                opt.step_subgroup(sub_group)
        opt.rollback_subgroup(1)  # flat[1] still holds its grad, as ZeRO's overflow path leaves it
        runs.append((flat, opt))
    (mine, my_opt), (theirs, their_opt) = runs
    for sub_group, (a, b) in enumerate(zip(mine, theirs)):
        assert_rounding_close(a.detach(), b.detach(), 1e-2, f"sub-group {sub_group}")
        for key in ("exp_avg", "exp_avg_sq"):
            assert_rounding_close(
                my_opt.state[sub_group][key], their_opt.state[sub_group][key], 1e-2, f"{sub_group} {key}"
            )
        assert int(my_opt.state[sub_group]["step"]) == their_opt.state[sub_group]["step"]
    for opt in (my_opt, their_opt):
        with pytest.raises(RuntimeError):
            opt.rollback_subgroup(7)  # never stepped: both refuse


@pytest.mark.parametrize("name", sorted(THEIRS))
def test_constructor_signature_is_deepspeeds(name: str) -> None:
    def parameters(cls: type) -> list[tuple[str, Any]]:
        signature = inspect.signature(cls.__init__)
        return [(p.name, p.default) for p in list(signature.parameters.values())[1:]]  # not self

    assert parameters(getattr(ours, name)) == parameters(THEIRS[name])
