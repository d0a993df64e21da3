"""What DeepSpeed-style ``step_subgroup`` keeps so that ``rollback_subgroup`` can undo it exactly.

DeepSpeed keeps one optimizer state per sub-group id and rolls a sub-group's step back by
inverting the update with the gradient still in place: inexact in floating point (and lossy
for bf16 state). Here the sub-group's param values and state are copied aside before the step
and handed back on rollback, bit for bit. The native ``RollbackPoints`` cannot serve: it is
keyed by param group and restores into the param object it saw, while ZeRO's sub-group workers
hand the optimizer a fresh Parameter for every step and every rollback.

Memory: one more copy of each sub-group's param and state, kept until that sub-group is rolled
back; a sub-group's next step reuses its buffers, so steady stepping allocates nothing.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from torch import Tensor

from kernels.optim._cpu_subgroup import copy_into


@dataclass
class Snapshot:
    """A sub-group as it was before its last step: the param's values and the state (None: the
    step created the state)."""

    value: Tensor
    state: dict[str, Any] | None


class Snapshots:
    """Per sub-group id, the snapshot of its last step while that step can be undone."""

    def __init__(self) -> None:
        self._saved: dict[Any, Snapshot] = {}

    def save(self, key: Any, param: Tensor, state: dict[str, Any] | None) -> None:
        old = self._saved.get(key)
        value = copy_into(old.value if old else None, param.detach())
        copied = None
        if state:
            buffers = old.state if old and old.state else {}
            copied = {name: copy_into(buffers.get(name), v) for name, v in state.items()}
        self._saved[key] = Snapshot(value, copied)

    def has(self, key: Any) -> bool:
        return key in self._saved

    def pop(self, key: Any) -> Snapshot:
        """The snapshot of ``key``, no longer kept: its tensors become the restored state."""
        return self._saved.pop(key)

    def clear(self) -> None:
        self._saved.clear()
