"""DeepSpeed's ``FusedAdam`` and ``FusedLion`` over ours (``kernels.optim.FusedAdam`` / ``FusedLion``).

DeepSpeed's signatures (``adam_w_mode``, ``set_grad_none``), its ``zero_grad()`` and its ``step()``
that refuses apex's old arguments; the update rules and the kernels are the native ones.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, ClassVar

import torch
from torch.optim.optimizer import ParamsT

from kernels.compat._ds_cpu import refuse_amsgrad
from kernels.optim import fused as fused_optim

__all__ = ["FusedAdam", "FusedLion"]

Closure = Callable[[], float] | None


def refuse_step_arguments(message: str, **given: Any) -> None:
    """apex's FusedAdam took grads / output_params / scale / grad_norms in step(); DeepSpeed's
    FusedAdam and FusedLion keep them only to raise this (grad_scaler is accepted and ignored)."""
    if any(value is not None for value in given.values()):
        raise RuntimeError(message)


class _FusedConventions(torch.optim.Optimizer):
    """What DeepSpeed's fused optimizers share: ``set_grad_none`` and the ``step`` signature."""

    set_grad_none: bool
    _old_step_message: ClassVar[str]

    def zero_grad(self, set_to_none: bool | None = None) -> None:
        """Grads become None when ``set_grad_none`` (the default), else zeros in place.

        DeepSpeed's set_grad_none=False calls torch's zero_grad(), which sets None too since torch
        2.0; here it keeps the meaning DeepSpeed documents. ``set_to_none`` overrides it for one call.
        """
        if set_to_none is None:
            set_to_none = getattr(self, "set_grad_none", True)  # torch does not pickle it
        super().zero_grad(set_to_none)

    def step(  # type: ignore[override]  # DeepSpeed's signature
        self,
        closure: Closure = None,
        grads: Any = None,
        output_params: Any = None,
        scale: Any = None,
        grad_norms: Any = None,
        grad_scaler: Any = None,
    ) -> float | None:
        """DeepSpeed's step: apex's old arguments are refused with DeepSpeed's own message."""
        refuse_step_arguments(
            self._old_step_message,
            grads=grads,
            output_params=output_params,
            scale=scale,
            grad_norms=grad_norms,
        )
        return super().step(closure)


class FusedAdam(_FusedConventions, fused_optim.FusedAdam):
    """``deepspeed.ops.adam.FusedAdam`` over ``kernels.optim.FusedAdam``: AdamW by default,
    Adam with an L2 penalty with ``adam_w_mode=False``; fp32 state whatever the params' dtype."""

    def __init__(
        self,
        params: ParamsT,
        lr: float = 1e-3,
        bias_correction: bool = True,
        betas: tuple[float, float] = (0.9, 0.999),
        eps: float = 1e-8,
        adam_w_mode: bool = True,
        weight_decay: float = 0.0,
        amsgrad: bool = False,
        set_grad_none: bool = True,
    ) -> None:
        refuse_amsgrad("FusedAdam", amsgrad)
        self.set_grad_none = set_grad_none
        super().__init__(
            params, lr, betas, eps, weight_decay, adamw_mode=adam_w_mode, bias_correction=bias_correction
        )
        self.adam_w_mode = 1 if adam_w_mode else 0  # DeepSpeed's attribute

    # What DeepSpeed says to a caller still passing apex's step arguments.
    _old_step_message = (
        "FusedAdam has been updated. Simply initialize it identically to torch.optim.Adam, and "
        "call step() with no arguments."
    )


class FusedLion(_FusedConventions, fused_optim.FusedLion):
    """``deepspeed.ops.lion.FusedLion`` over ``kernels.optim.FusedLion``, with DeepSpeed's
    defaults (lr 1e-3, betas (0.9, 0.999))."""

    def __init__(
        self,
        params: ParamsT,
        lr: float = 1e-3,
        betas: tuple[float, float] = (0.9, 0.999),
        weight_decay: float = 0.0,
        set_grad_none: bool = True,
    ) -> None:
        self.set_grad_none = set_grad_none
        super().__init__(params, lr, betas, weight_decay)

    _old_step_message = "FusedLion has been updated: call step() with no arguments."
