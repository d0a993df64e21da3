"""Optimizers backed by the compiled ops, each with a pure-PyTorch fallback.

CPU (``cpu_adam``, ``cpu_adagrad``, ``cpu_lion``): ``CPUAdam``, ``CPUAdagrad``, ``CPULion``.
GPU (``fused_adam``, ``fused_lamb``, ``fused_lion``): ``FusedAdam``, ``FusedLamb``, ``FusedLion``.
"""

from kernels.cpu_optim import CPUAdagrad, CPUAdam, CPULion
from kernels.fused_optim import FusedAdam, FusedLamb, FusedLion

__all__ = ["CPUAdagrad", "CPUAdam", "CPULion", "FusedAdam", "FusedLamb", "FusedLion"]
