"""What the grouped quantization fronts share: how the input is cut into groups, the division
the kernels do, and the one load state of the ``fp_quantizer`` op (``kernels.quantization``'s
FP8 functions and ``kernels.quantization.fp_quantizer`` both use it, so it loads and warns once)."""

from __future__ import annotations

import torch
from torch import Tensor

from kernels._gpu_load import GpuOp

FP_OP = GpuOp("fp_quantizer")


def groups_of(x: Tensor, group_size: int | None) -> tuple[int, int]:
    """(groups, group_size) of ``x``; the default group is one row of the last dimension."""
    size = group_size if group_size is not None else (x.shape[-1] if x.dim() else 1)
    if size <= 0:
        raise ValueError(f"group_size must be positive, got {size}")
    if x.numel() % size != 0:
        raise ValueError(f"the input has {x.numel()} elements, not a multiple of group_size {size}")
    return x.numel() // size, size


def safe_divisor(scale: Tensor) -> Tensor:
    return torch.where(scale > 0, scale, torch.ones_like(scale))


def div(t: Tensor, divisor: float) -> Tensor:
    """``t / divisor`` correctly rounded on every device. On CUDA, torch divides by a Python
    number as ``t * (1 / divisor)``, which can be one ulp off the division the kernels do;
    dividing by a tensor of divisors takes the true division."""
    return t / torch.full_like(t, divisor)
