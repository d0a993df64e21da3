"""Optimizers backed by the compiled ops, each with a pure-PyTorch fallback.

CPU (``cpu_adam``, ``cpu_adagrad``, ``cpu_lion``): ``CPUAdam``, ``CPUAdagrad``, ``CPULion``
(``kernels.optim.cpu``). GPU (``fused_adam``, ``fused_lamb``, ``fused_lion``): ``FusedAdam``,
``FusedLamb``, ``FusedLion`` (``kernels.optim.fused``).

An op package: ``builders.py`` (the six ops), ``csrc/`` and ``includes/`` (their sources), the
fronts, and ``selftest.py``. The names above are imported on first use, so that importing the
package (op_builder does, for its builders) imports neither torch nor the fronts.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from kernels._lazy import LazyExports

if TYPE_CHECKING:
    from kernels.optim.cpu import CPUAdagrad, CPUAdam, CPULion
    from kernels.optim.fused import FusedAdam, FusedLion
    from kernels.optim.fused_lamb import FusedLamb

__all__ = ["CPUAdagrad", "CPUAdam", "CPULion", "FusedAdam", "FusedLamb", "FusedLion"]

_EXPORTS = LazyExports(
    __name__,
    {
        "cpu": ("CPUAdagrad", "CPUAdam", "CPULion"),
        "fused": ("FusedAdam", "FusedLion"),
        "fused_lamb": ("FusedLamb",),
    },
)


def __getattr__(name: str) -> Any:
    return _EXPORTS.get(name)
