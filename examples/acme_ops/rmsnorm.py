"""RMSNorm over the last dimension: ``y = x / sqrt(mean(x^2) + eps) * weight``.

    from acme_ops.rmsnorm import rms_norm
    y = rms_norm(x, weight)            # weight: shape [x.shape[-1]]

CPU tensors run the ``acme_rmsnorm`` kernel (fp32, fp64, fp16, bf16), CUDA tensors
``acme_rmsnorm_cuda`` (fp32, fp16, and bf16 where the build has it); the math is fp32 (fp64
for fp64) and y has x's dtype. Where no kernel fits (another device or dtype, a weight of
another dtype, autograd needing a gradient: the kernels are forward-only, or the op does not
load) the same formula runs in PyTorch, after one warning per reason saying why.

``use_kernel``: None (default) falls back with that warning; False always uses PyTorch,
silently; True raises instead of falling back (the self-tests use it).
"""

from __future__ import annotations

import threading
import warnings
from types import ModuleType

import torch
from torch import Tensor

from acme_ops.builders import RMSNormBuilder, RMSNormCUDABuilder
from op_builder import OpBuilder, OpLoadError

__all__ = ["rms_norm"]

# Each kernel's dtypes, by the device type of the tensors it takes.
_DTYPES = {
    "cpu": (torch.float32, torch.float64, torch.float16, torch.bfloat16),
    "cuda": (torch.float32, torch.float16, torch.bfloat16),
}


class _Kernel:
    """One op's compiled module, loaded on first use (never at import), or why it cannot load."""

    def __init__(self, builder: OpBuilder) -> None:
        self.builder = builder
        self.name = builder.name
        self._module: ModuleType | None = None
        self._failure: Exception | None = None
        self._lock = threading.Lock()  # two threads' first calls must not build the op twice

    def load(self) -> ModuleType:
        """The module; the first failure is raised again on later calls, without retrying."""
        with self._lock:
            if self._module is None and self._failure is None:
                try:
                    # The module installed ahead of time (DS_BUILD_ACME_RMSNORM=1 pip wheel ...),
                    # else a JIT build, cached. Through our own builder rather than
                    # op_builder.get_builder(name): that works however acme_ops was found
                    # (DS_OP_SOURCES, an entry point, or just imported from sys.path).
                    self._module = self.builder.load()
                except (OpLoadError, ImportError) as exc:
                    self._failure = exc
            if self._failure is not None:
                raise self._failure
            assert self._module is not None
            return self._module


_KERNELS = {"cpu": _Kernel(RMSNormBuilder()), "cuda": _Kernel(RMSNormCUDABuilder())}
_warned: set[str] = set()


def rms_norm(x: Tensor, weight: Tensor, eps: float = 1e-6, use_kernel: bool | None = None) -> Tensor:
    """RMSNorm of ``x`` over its last dimension, scaled by ``weight``."""
    # Checked here, before any kernel: a stable-ABI module's own check of the weight would reach
    # Python through torch.ops as a RuntimeError, and this function promises a ValueError.
    if x.dim() == 0 or tuple(weight.shape) != (x.shape[-1],):
        raise ValueError(
            f"rms_norm: weight has shape {tuple(weight.shape)}, x {tuple(x.shape)}: "
            "weight must have x's last dimension"
        )
    if use_kernel is not False:
        module, reason = _kernel_for(x, weight)
        if module is not None:
            y: Tensor = module.rms_norm(x.contiguous(), weight.contiguous(), eps)
            return y
        if use_kernel:
            raise RuntimeError(f"acme_ops.rms_norm: {reason}")
        _warn_once(reason)
    return _rms_norm_torch(x, weight, eps)


def _kernel_for(x: Tensor, weight: Tensor) -> tuple[ModuleType | None, str]:
    """The module to run with, or None and why not."""
    if torch.is_grad_enabled() and (x.requires_grad or weight.requires_grad):
        return None, "the kernels are forward-only, and autograd needs a gradient here"
    kind = x.device.type
    dtypes = _DTYPES.get(kind)
    if dtypes is None:
        return None, f"tensors on {kind} have no kernel (cpu and cuda do)"
    if x.dtype not in dtypes:
        return None, f"{x.dtype} has no {kind} kernel"
    if weight.dtype != x.dtype or weight.device != x.device:
        given = f"weight is {weight.dtype} on {weight.device}, x {x.dtype} on {x.device}"
        return None, f"{given}: the kernels take both in one dtype and device"
    kernel = _KERNELS[kind]
    try:
        module = kernel.load()
    except (OpLoadError, ImportError) as exc:
        message = getattr(exc, "message", None) or str(exc)
        return None, f"the {kernel.name} op is unavailable ({message})"
    has_bf16 = getattr(module, "has_bf16", None)
    if x.dtype == torch.bfloat16 and has_bf16 is not None and not has_bf16():
        return None, f"this build of {kernel.name} has no bf16 kernels (an arch below sm_80 in its list)"
    return module, ""


def _warn_once(reason: str) -> None:
    if reason in _warned:
        return
    _warned.add(reason)
    # stacklevel 3: the caller of rms_norm.
    warnings.warn(f"acme_ops.rms_norm: {reason}; using the PyTorch fallback", RuntimeWarning, stacklevel=3)


def _rms_norm_torch(x: Tensor, weight: Tensor, eps: float) -> Tensor:
    """The same formula in PyTorch, differentiable: fp32 math (fp64 for fp64), y in x's dtype."""
    math = torch.float64 if x.dtype == torch.float64 else torch.float32
    xf = x.to(math)
    y = xf * torch.rsqrt(xf.square().mean(-1, keepdim=True) + eps) * weight.to(math)
    return y.to(x.dtype)
