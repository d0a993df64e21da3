"""DeepSpeed's CPU optimizers over ours: ``DeepSpeedCPUAdam``, ``DeepSpeedCPUAdagrad``, ``DeepSpeedCPULion``.

Each subclasses the native optimizer (``kernels.optim.CPUAdam`` ...) and adds DeepSpeed's
conventions: its constructor signature, ``fp32_optimizer_states``, ``step(closure,
fp16_param_groups)``, its sub-group API (state keyed by sub-group id) and its state dict keys.
The update rules are the native ones; docs/deepspeed.md lists where they differ from DeepSpeed's.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from typing import Any, ClassVar, cast

import torch
from torch import Tensor
from torch.optim.optimizer import ParamsT

from kernels.compat._ds_snapshots import Snapshots
from kernels.optim._cpu_base import CPUOptimizer
from kernels.optim.cpu import CPUAdagrad, CPUAdam, CPULion

__all__ = ["DeepSpeedCPUAdagrad", "DeepSpeedCPUAdam", "DeepSpeedCPULion", "refuse_amsgrad"]

Closure = Callable[[], float] | None
_HALF = (torch.bfloat16, torch.float16)


def refuse_amsgrad(owner: str, amsgrad: object) -> None:
    """AMSGrad is implemented by none of our optimizers. DeepSpeed's fused ones refuse it with a
    RuntimeError; its CPU ones accept it and run plain Adam, which we refuse to do silently."""
    if amsgrad:
        raise RuntimeError(f"{owner} does not support the AMSGrad variant (amsgrad=True); pass amsgrad=False")


class _DeepSpeedCPU(CPUOptimizer):
    """DeepSpeed's conventions over one of our CPU optimizers: the first base of each class below,
    the native optimizer the second."""

    fp32_optimizer_states: bool
    _snapshots: Snapshots
    # Whether the rule can keep bf16 state (CPUAdam's per-group "state_dtype").
    half_state: ClassVar[bool] = False
    # DeepSpeed's Adam and Adagrad groups carry "amsgrad" (its ZeRO code reads param_groups[0]).
    amsgrad_key: ClassVar[bool] = True
    # State keys DeepSpeed saves that we name otherwise (theirs -> ours) or do not keep (-> None).
    ds_state_keys: ClassVar[dict[str, str | None]] = {}

    def _prepare(self, fp32_optimizer_states: bool) -> None:
        # Before torch's __init__, which calls add_param_group, which reads these.
        self.fp32_optimizer_states = bool(fp32_optimizer_states)
        self._snapshots = Snapshots()
        self._fp32_only_state = False  # a half-precision group got fp32 state: warned once
        self._warned_state = False
        self._constructed = False

    def _finish_init(self) -> None:
        self._constructed = True
        self._warn_fp32_only_state(stacklevel=4)  # _finish_init, the constructor, its caller

    def __setstate__(self, state: dict[str, Any]) -> None:
        super().__setstate__(state)
        # torch pickles only defaults, state and param_groups.
        self.__dict__.setdefault("fp32_optimizer_states", True)
        self.__dict__.setdefault("_snapshots", Snapshots())
        self.__dict__.setdefault("_fp32_only_state", False)
        self.__dict__.setdefault("_warned_state", False)
        self.__dict__.setdefault("_constructed", True)

    def add_param_group(self, param_group: dict[str, Any]) -> None:
        name = type(self).__name__
        if self.amsgrad_key:
            refuse_amsgrad(name, param_group.get("amsgrad"))
        super().add_param_group(param_group)
        group = self.param_groups[-1]
        if self.amsgrad_key:
            group.setdefault("amsgrad", False)
        if self.fp32_optimizer_states or "state_dtype" in group:
            return
        # DeepSpeed keeps each param's state in the param's dtype. Ours is chosen per group, when
        # the group is added: bf16 (the only half state the kernels keep) for a group holding
        # half-precision params; a group of fp32 params keeps fp32 state, as in DeepSpeed.
        if not any(p.dtype in _HALF for p in group["params"]):
            return
        if self.half_state:
            group["state_dtype"] = torch.bfloat16
            return
        self._fp32_only_state = True
        if self._constructed:  # else the constructor warns, pointing at its caller
            self._warn_fp32_only_state(stacklevel=3)

    def _warn_fp32_only_state(self, stacklevel: int) -> None:
        """Warn once, at the caller of the constructor or of add_param_group."""
        if self._fp32_only_state and not self._warned_state:
            self._warned_state = True
            warnings.warn(
                f"{type(self).__name__}: fp32_optimizer_states=False keeps the state in float32 here "
                "(DeepSpeed keeps it in the params' dtype); only DeepSpeedCPUAdam keeps bf16 state",
                UserWarning,
                stacklevel=stacklevel,
            )

    @torch.no_grad()
    def step(  # type: ignore[override]  # DeepSpeed's signature, not the native one
        self, closure: Closure = None, fp16_param_groups: Any = None
    ) -> float | None:
        """Update every param that has a gradient.

        fp16_param_groups (DeepSpeed before 0.14.3): half-precision copies to receive the updated
        params, one list per param group (or one list, or one tensor, for a single group). Copies
        that are contiguous bf16 / fp16 CPU tensors of fp32 params are written in the update's
        pass; any other (DeepSpeed's were GPU tensors) is copied into after the step.
        """
        # The closure first: it may be what sets the gradients that decide which copies to write.
        loss = self._run_closure(closure)
        half_params, after = self._fp16_copies(fp16_param_groups)
        super().step(None, half_params)
        for p, copy in after:
            copy.copy_(p.detach().reshape(copy.shape))
        return loss

    def _fp16_copies(
        self, fp16_param_groups: Any
    ) -> tuple[list[Tensor | None] | None, list[tuple[Tensor, Tensor]]]:
        """DeepSpeed's fp16_param_groups as our half_params, and the copies to write after the step."""
        if fp16_param_groups is None:
            return None, []
        # DeepSpeed's normalisation: a tensor is one group of one, a flat list is one group.
        if isinstance(fp16_param_groups, Tensor):
            groups = [[fp16_param_groups]]
        elif len(fp16_param_groups) and not isinstance(fp16_param_groups[0], (list, tuple)):
            groups = [fp16_param_groups]
        else:
            groups = fp16_param_groups
        name = type(self).__name__
        direct: list[Tensor | None] = []
        after: list[tuple[Tensor, Tensor]] = []
        for gi, group in enumerate(self.param_groups):
            for pi, p in enumerate(group["params"]):
                if p.grad is None:
                    direct.append(None)
                    continue
                if gi >= len(groups) or pi >= len(groups[gi]):
                    raise ValueError(f"{name}: fp16_param_groups has no entry for param {pi} of group {gi}")
                copy = groups[gi][pi]
                if copy is None:  # no copy wanted for this one
                    direct.append(None)
                    continue
                if copy.numel() != p.numel():
                    raise ValueError(
                        f"{name}: fp16_param_groups[{gi}][{pi}] has {copy.numel()} elements, "
                        f"its param {p.numel()}"
                    )
                fits = (
                    p.dtype == torch.float32
                    and copy.dtype in _HALF
                    and copy.device.type == "cpu"
                    and copy.is_contiguous()
                )
                direct.append(copy if fits else None)
                if not fits:
                    after.append((p, copy))
        return direct, after

    # ------------------------------------------------------------------ sub-groups (ZeRO)

    @torch.no_grad()
    def step_subgroup(  # type: ignore[override]  # DeepSpeed's: keyed by sub-group id, not param group
        self, subgroup_id: int, closure: Closure = None
    ) -> float | None:
        """DeepSpeed's sub-group step: update the one param that has a gradient against the state
        kept under ``self.state[subgroup_id]``.

        ZeRO's sub-group workers hand the optimizer a fresh Parameter for every sub-group step, so
        the state lives under the sub-group's id, not the param, as in DeepSpeed. Exactly one
        param of the param groups may have a gradient (DeepSpeed would step each against the same
        state); with none, nothing happens. ``rollback_subgroup(subgroup_id)`` undoes the step.
        """
        loss = self._run_closure(closure)
        p = self._subgroup_param(subgroup_id, "step_subgroup")
        if p is None:
            return loss
        states = cast(dict[Any, dict[str, Any]], self.state)
        state = states[subgroup_id]
        for key in self.state_keys:
            held = state.get(key)
            if isinstance(held, Tensor) and held.numel() != p.numel():
                raise RuntimeError(
                    f"{type(self).__name__}.step_subgroup({subgroup_id}): the sub-group's state holds "
                    f"{held.numel()} elements but the param with a gradient has {p.numel()}"
                )
        self._snapshots.save(subgroup_id, p, state)
        own = states.pop(p, None)  # the param's own state (from step()), set aside meanwhile
        states[p] = state
        try:
            super().step()  # only p has a gradient: it alone steps, on the sub-group's state
        finally:
            del states[p]
            if own is not None:
                states[p] = own
        return loss

    @torch.no_grad()
    def rollback_subgroup(  # type: ignore[override]  # DeepSpeed's signature
        self, sub_group_id: int, closure: Closure = None
    ) -> float | None:
        """Undo the last ``step_subgroup(sub_group_id)``: the param that has a gradient (the
        sub-group's, which DeepSpeed's rollback also needs) and the sub-group's state become, bit
        for bit, what they were before that step.

        Raises RuntimeError, as DeepSpeed does, when the sub-group has no step to undo: never
        stepped, already rolled back (one level only), or a state dict was loaded since.
        """
        loss = self._run_closure(closure)
        name = f"{type(self).__name__}.rollback_subgroup({sub_group_id})"
        if not self._snapshots.has(sub_group_id):
            raise RuntimeError(
                f"{name}: the sub-group has no step to roll back (not stepped with step_subgroup since "
                "it was created, last rolled back, or a state dict was loaded)"
            )
        p = self._subgroup_param(sub_group_id, "rollback_subgroup")
        if p is None:
            raise RuntimeError(
                f"{name}: no param has a gradient; put the sub-group's param, with it, in a group"
            )
        snapshot = self._snapshots.pop(sub_group_id)
        if snapshot.value.numel() != p.numel():
            raise RuntimeError(
                f"{name}: the step updated {snapshot.value.numel()} elements, this param has {p.numel()}"
            )
        p.copy_(snapshot.value.reshape(p.shape))
        states = cast(dict[Any, dict[str, Any]], self.state)
        if snapshot.state is None:
            states.pop(sub_group_id, None)  # the step created it
        else:
            states[sub_group_id] = snapshot.state
        return loss

    def _subgroup_param(self, subgroup_id: int, method: str) -> Tensor | None:
        with_grad = [p for group in self.param_groups for p in group["params"] if p.grad is not None]
        if len(with_grad) > 1:
            raise RuntimeError(
                f"{type(self).__name__}.{method}({subgroup_id}): {len(with_grad)} params have a gradient; "
                "a sub-group has one state, for one param (its flat partition), as in DeepSpeed"
            )
        return with_grad[0] if with_grad else None

    # ------------------------------------------------------------------ state dicts

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Load ours, or DeepSpeed's (its key names and int step counts)."""
        self._snapshots.clear()  # their values belong to the state being replaced
        if self.ds_state_keys:
            renamed = {key: self._from_deepspeed(entry) for key, entry in state_dict["state"].items()}
            state_dict = {**state_dict, "state": renamed}
        super().load_state_dict(state_dict)

    def _from_deepspeed(self, entry: dict[str, Any]) -> dict[str, Any]:
        entry = dict(entry)
        for theirs, ours in self.ds_state_keys.items():
            if theirs in entry:
                value = entry.pop(theirs)
                if ours is not None:
                    entry.setdefault(ours, value)
        return entry


class DeepSpeedCPUAdam(_DeepSpeedCPU, CPUAdam):
    """``deepspeed.ops.adam.DeepSpeedCPUAdam`` over ``kernels.optim.CPUAdam``: Adam, or AdamW by
    default, matching torch's. ``fp32_optimizer_states=False`` keeps a half-precision group's
    moments in bf16."""

    half_state = True

    def __init__(
        self,
        model_params: ParamsT,
        lr: float = 1e-3,
        bias_correction: bool = True,
        betas: tuple[float, float] = (0.9, 0.999),
        eps: float = 1e-8,
        weight_decay: float = 0,
        amsgrad: bool = False,
        adamw_mode: bool = True,
        fp32_optimizer_states: bool = True,
    ) -> None:
        refuse_amsgrad("DeepSpeedCPUAdam", amsgrad)
        self._prepare(fp32_optimizer_states)
        super().__init__(
            model_params, lr, betas, eps, weight_decay, adamw_mode=adamw_mode, bias_correction=bias_correction
        )
        self.adam_w_mode = adamw_mode  # DeepSpeed's attribute
        self._finish_init()


class DeepSpeedCPUAdagrad(_DeepSpeedCPU, CPUAdagrad):
    """``deepspeed.ops.adagrad.DeepSpeedCPUAdagrad`` over ``kernels.optim.CPUAdagrad``:
    ``torch.optim.Adagrad`` with lr_decay and initial_accumulator_value 0 (DeepSpeed has neither).
    Loads DeepSpeed's state dicts (its accumulator is ``exp_avg_sq``, ours ``sum``, as torch's)."""

    ds_state_keys: ClassVar[dict[str, str | None]] = {"exp_avg_sq": "sum"}

    def __init__(
        self,
        model_params: ParamsT,
        lr: float = 1e-2,
        eps: float = 1e-10,
        weight_decay: float = 0,
        amsgrad: bool = False,
        fp32_optimizer_states: bool = True,
    ) -> None:
        refuse_amsgrad("DeepSpeedCPUAdagrad", amsgrad)
        self._prepare(fp32_optimizer_states)
        super().__init__(model_params, lr=lr, weight_decay=weight_decay, eps=eps)
        self._finish_init()


class DeepSpeedCPULion(_DeepSpeedCPU, CPULion):
    """``deepspeed.ops.lion.DeepSpeedCPULion`` over ``kernels.optim.CPULion``, with DeepSpeed's
    defaults (lr 1e-3, betas (0.9, 0.999); ours are the paper's 1e-4, (0.9, 0.99))."""

    amsgrad_key = False
    # DeepSpeed allocates and saves an exp_avg_sq that Lion never reads.
    ds_state_keys: ClassVar[dict[str, str | None]] = {"exp_avg_sq": None}

    def __init__(
        self,
        model_params: ParamsT,
        lr: float = 1e-3,
        betas: tuple[float, float] = (0.9, 0.999),
        weight_decay: float = 0,
        fp32_optimizer_states: bool = True,
    ) -> None:
        self._prepare(fp32_optimizer_states)
        super().__init__(model_params, lr, betas, weight_decay)
        self._finish_init()
