"""Every op's self-test: its compiled kernel, through its public front, against an independent
reference; the harness op packages write theirs with (``SelfTestContext``, ``Tolerance``).

    from op_builder.selftest import SelfTestContext, Tolerance, run_selftests

``harness``: tolerances, the comparison record, running one op's test (imports torch).
``runner``: ``run_selftests`` / ``selftest_for``, each op's test named by its builder.
``isa``: forcing the CPU kernels' instruction set (``selftest --isa``).

The names are imported on first use (PEP 562): importing op_builder, or this package, never
imports torch.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from op_builder.selftest.harness import (
        EXACT,
        GPU_TOLERANCE,
        Device,
        SelfTest,
        SelfTestContext,
        Tolerance,
        gpu_visible,
        no_gpu_reason,
        resolve_device,
        run_all,
        run_one,
        skip_all,
    )
    from op_builder.selftest.isa import ISA_LEVELS, UnsupportedIsa, force_isa, isa_problem
    from op_builder.selftest.runner import run_selftests, selftest_for

__all__ = [
    "EXACT",
    "GPU_TOLERANCE",
    "ISA_LEVELS",
    "Device",
    "SelfTest",
    "SelfTestContext",
    "Tolerance",
    "UnsupportedIsa",
    "force_isa",
    "gpu_visible",
    "isa_problem",
    "no_gpu_reason",
    "resolve_device",
    "run_all",
    "run_one",
    "run_selftests",
    "selftest_for",
    "skip_all",
]

_MODULE_OF = {
    **dict.fromkeys(("ISA_LEVELS", "UnsupportedIsa", "force_isa", "isa_problem"), "isa"),
    **dict.fromkeys(("run_selftests", "selftest_for"), "runner"),
}


def __getattr__(name: str) -> Any:
    if name not in __all__:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{_MODULE_OF.get(name, 'harness')}"), name)
    globals()[name] = value
    return value
