"""What ``step_subgroup`` keeps so that ``rollback_subgroup`` can undo it exactly.

ZeRO-Offload steps one group of parameters at a time and, when it finds an overflow after some
groups have stepped, undoes their steps in place. DeepSpeed undoes a step by inverting the
update rule, which floating point does not invert exactly (and Lion's sign() not at all). Here
the values the step overwrites are copied aside before it runs: the params and every state
entry of the group's params that have a gradient. A rollback copies them back, bit for bit.

The copies cost one more copy of the group's params and state while a rollback is possible.
Their buffers are kept per group and reused by the group's next sub-group step, so steady
stepping allocates nothing.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor


@dataclass
class _Saved:
    """One param as it was before a sub-group step: its values and its state (None: it had none)."""

    param: Tensor
    value: Tensor
    state: dict[str, Any] | None


def copy_into(buffer: object, source: object) -> Any:
    """``source``'s value, in ``buffer`` when it is a tensor of the same layout, else a new copy
    (also for the DeepSpeed-style snapshots of ``kernels.compat``)."""
    if not isinstance(source, Tensor):
        return source  # a plain number (a step count saved by an older version, or kept as one)
    if (
        isinstance(buffer, Tensor)
        and buffer.dtype == source.dtype
        and buffer.shape == source.shape
        and buffer.stride() == source.stride()
    ):
        return buffer.copy_(source)
    return source.clone(memory_format=torch.preserve_format)


class RollbackPoints:
    """Per param group: the saved values of its last sub-group step, if that step can still be undone."""

    def __init__(self) -> None:
        self._saved: dict[int, list[_Saved]] = {}
        self._armed: set[int] = set()

    def save(self, group_id: int, params: list[Tensor], state: dict[Tensor, dict[str, Any]]) -> None:
        """Copy aside ``params`` and their ``state`` entries (reusing this group's buffers)."""
        old = {id(saved.param): saved for saved in self._saved.get(group_id, ())}
        saved_now = []
        for p in params:
            previous = old.get(id(p))
            value = copy_into(previous.value if previous else None, p)
            current = state.get(p)
            entries = None
            if current:
                buffers = previous.state if previous and previous.state else {}
                entries = {key: copy_into(buffers.get(key), v) for key, v in current.items()}
            saved_now.append(_Saved(p, value, entries))
        self._saved[group_id] = saved_now
        self._armed.add(group_id)

    def restore(self, group_id: int, state: dict[Tensor, dict[str, Any]], owner: str) -> list[Tensor]:
        """Put back what ``save`` copied aside for ``group_id``; return the params restored.

        Raises ValueError when the group has no sub-group step to undo.
        """
        if group_id not in self._armed:
            raise ValueError(
                f"{owner}: rollback_subgroup({group_id}): param group {group_id} has no sub-group "
                "step to roll back (it has not been stepped with step_subgroup since the last "
                "step(), load_state_dict() or rollback)"
            )
        self._armed.discard(group_id)
        restored = []
        for saved in self._saved[group_id]:
            saved.param.copy_(saved.value)
            if saved.state is None:
                state.pop(saved.param, None)  # the step created it
            else:
                current = state[saved.param]
                for key in set(current) - set(saved.state):
                    del current[key]
                for key, value in saved.state.items():
                    current[key] = copy_into(current.get(key), value)
            restored.append(saved.param)
        return restored

    def disarm(self) -> None:
        """Make every sub-group step final (a full step or a loaded state dict overwrote them)."""
        self._armed.clear()
