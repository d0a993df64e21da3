"""Per-dtype tolerances shared by the GPU tests."""

from __future__ import annotations

import torch

# (rtol, atol) for comparing a kernel's output in `dtype` with an fp32 reference.
TOLERANCE: dict[torch.dtype, tuple[float, float]] = {
    torch.float32: (1e-4, 1e-5),
    torch.float16: (5e-3, 2e-3),
    torch.bfloat16: (3e-2, 2e-2),
}

DTYPES = (torch.float32, torch.float16, torch.bfloat16)
