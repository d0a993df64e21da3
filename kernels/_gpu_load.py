"""Choosing between a GPU op's compiled kernels and the front's PyTorch fallback.

Each GPU front (``fused_optim``, ``transformer``, ``quantization``) owns one ``GpuOp``.
``GpuOp.resolve(tensors)`` returns the compiled module when it can run on those
tensors, else None after warning once per op and reason: the op does not load
(``OpLoadError``), the tensors are not on a CUDA / ROCm device, their dtype has no
kernel, or the build has no bf16 kernels. Nothing is probed or loaded at import.
"""

from __future__ import annotations

from collections.abc import Iterable
from types import ModuleType

import torch
from torch import Tensor

from kernels._op_load import LazyOp
from op_builder.errors import OpLoadError

KERNEL_DTYPES = (torch.float32, torch.float16, torch.bfloat16)


class GpuOp(LazyOp):
    """One GPU op's load state, and the choice between its kernels and the fallback."""

    def resolve(
        self,
        tensors: Iterable[Tensor],
        use_kernel: bool | None = None,
        dtypes: tuple[torch.dtype, ...] = KERNEL_DTYPES,
    ) -> ModuleType | None:
        """The module to run ``tensors`` with, or None for the fallback.

        use_kernel: None (default) falls back with a warning; False always falls back,
        silently; True raises instead of falling back.
        """
        if use_kernel is False:
            return None
        listed = list(tensors)
        reason = _unsupported(listed, dtypes)
        module = None
        if reason is None:
            try:
                module = self.load()
            except (OpLoadError, ImportError) as exc:
                message = getattr(exc, "message", None) or str(exc)
                reason = f"the compiled kernels are unavailable ({message})"
        if module is not None and any(t.dtype == torch.bfloat16 for t in listed) and not module.has_bf16():
            reason = "this build has no bf16 kernels (its CUDA arch list includes an arch below sm_80)"
            module = None
        if module is not None:
            return module
        assert reason is not None
        if use_kernel:
            raise RuntimeError(f"{self.name}: {reason}")
        # stacklevel 3: the caller of the front function that called us.
        self.warn_once(reason, f"{self.name}: {reason}; using the PyTorch fallback", stacklevel=3)
        return None


def _unsupported(tensors: list[Tensor], dtypes: tuple[torch.dtype, ...]) -> str | None:
    for t in tensors:
        if not t.is_cuda:
            return f"tensors are on {t.device.type}, the kernels need a CUDA or ROCm device"
    for t in tensors:
        if t.is_floating_point() and t.dtype not in dtypes:
            names = ", ".join(str(d).removeprefix("torch.") for d in dtypes)
            return f"{str(t.dtype).removeprefix('torch.')} has no kernel (supported: {names})"
    return None
