"""What the CPU (``cpu_optim``) and GPU (``fused_optim``) optimizer fronts share.

The base class keeps ``use_kernel`` / ``backend`` and accepts state dicts saved by torch's
optimizers; the helpers read step counters and hyperparameters the way the kernels take them.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch import Tensor
from torch.optim.optimizer import ParamsT

# A kernel argument after the tensors: a hyperparameter, a step count or a switch.
Scalar = float | int | bool


class KernelOptimizer(torch.optim.Optimizer):
    """An optimizer whose step runs a compiled op or its PyTorch fallback.

    use_kernel: None falls back (warning once) when the op cannot run, False always falls
    back, True makes that an error. ``backend`` says which path the last step took.
    """

    backend: str | None

    def __init__(self, params: ParamsT, defaults: dict[str, Any], use_kernel: bool | None) -> None:
        super().__init__(params, defaults)
        self.use_kernel = use_kernel
        self.backend = None  # set by the first step

    def __setstate__(self, state: dict[str, Any]) -> None:
        super().__setstate__(state)
        # A state dict saved by torch's optimizer lacks our options: take the defaults.
        for group in self.param_groups:
            for key, value in self.defaults.items():
                group.setdefault(key, value)

    @staticmethod
    def _run_closure(closure: Callable[[], float] | None) -> float | None:
        if closure is None:
            return None
        with torch.enable_grad():
            return closure()


def check_betas(betas: tuple[float, float]) -> None:
    for i, beta in enumerate(betas):
        if not 0.0 <= beta < 1.0:
            raise ValueError(f"Invalid beta parameter at index {i}: {beta} (betas must be in [0, 1))")


def check_nonnegative(**values: float) -> None:
    """Raise for a negative (or NaN) hyperparameter, named as torch's optimizers name it."""
    for name, value in values.items():
        if not value >= 0.0:
            raise ValueError(f"Invalid {name.replace('_', ' ')} value: {value}")


def advance_step(state: dict[str, Any]) -> int:
    """Count this step in ``state['step']`` (a float32 scalar tensor, as torch keeps it)."""
    step = state["step"]
    if isinstance(step, Tensor):
        step += 1
        return int(step.item())
    state["step"] = torch.tensor(float(step) + 1.0, dtype=torch.float32)
    return int(step) + 1


def hyperparams(group: dict[str, Any], *names: str) -> tuple[float, ...]:
    """The group's options ``names`` as Python floats, in order; ``"betas"`` gives beta1, beta2.

    The kernels take their scalars as floats: a state dict may hold ints or tensors.
    """
    values: list[float] = []
    for name in names:
        if name == "betas":
            beta1, beta2 = group["betas"]
            values += (float(beta1), float(beta2))
        else:
            values.append(float(group[name]))
    return tuple(values)
