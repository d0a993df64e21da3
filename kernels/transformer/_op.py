"""What the transformer fronts share: the op's load state and two small helpers."""

from __future__ import annotations

import torch
from torch import Tensor

from kernels._gpu_load import GpuOp
from kernels.transformer._fakes import on_load

# A stable build's ops get their fake kernels when the op loads, for torch.compile.
OP = GpuOp("transformer", on_load=on_load)


def math_dtype(t: Tensor) -> torch.dtype:
    """fp32 math like the kernels; fp64 stays fp64 (gradcheck, reference runs)."""
    return torch.float64 if t.dtype == torch.float64 else torch.float32


def grad_or_none(needed: bool, value: Tensor | None) -> Tensor | None:
    return value if needed else None
