"""Every op's self-test: its compiled kernel, through the public front, against an independent reference.

    from kernels.selftests import run_selftests
    report = run_selftests(["cpu_adam", "async_io"], device="cpu")   # an op_builder SelfTestReport
    report.ok, report.to_json()

One module per front (``optimizers``, ``aio``, ``transformer``, ``quantization``) declares its
ops' tests; ``SELFTESTS`` maps every op name to its test. Each test forces the compiled path
(``use_kernel=True``, ``backend="kernel"``: a missing kernel is a failure, never a quiet
fallback), runs deterministic inputs of awkward sizes, and compares with torch's own op or
optimizer or with a plain loop written in the test (never the front's fallback code).

``python -m op_builder selftest`` is the command around this; image builds run the CPU ops'
tests, and image verification every installed op's.
"""

from __future__ import annotations

import importlib
import os
from collections.abc import Callable, Iterable, Mapping, Sequence
from types import MappingProxyType

from kernels import cpu_optim
from kernels.selftests import aio, optimizers, quantization, transformer
from kernels.selftests._harness import (
    ISA_LEVELS,
    Device,
    SelfTest,
    SelfTestContext,
    Tolerance,
    UnsupportedIsa,
    gpu_visible,
    isa_problem,
    no_gpu_reason,
    resolve_device,
    run_all,
    skip_all,
)
from op_builder.errors import OpLoadError
from op_builder.registry import get_builder
from op_builder.report import SelfTestReport

__all__ = [
    "ISA_LEVELS",
    "SELFTESTS",
    "SelfTest",
    "SelfTestContext",
    "Tolerance",
    "UnsupportedIsa",
    "force_isa",
    "gpu_visible",
    "isa_problem",
    "no_gpu_reason",
    "resolve_device",
    "run_selftests",
    "selftest_for",
]

SELFTESTS: Mapping[str, SelfTest] = MappingProxyType(
    {test.op: test for module in (optimizers, aio, transformer, quantization) for test in module.SELFTESTS}
)

_SIMD_OPS = ("cpu_adam", "cpu_adagrad", "cpu_lion")


def run_selftests(
    names: Sequence[str],
    device: Device,
    env: Mapping[str, str] | None = None,
    *,
    gpu_required: bool = False,
) -> SelfTestReport:
    """Run the named ops' self-tests (GPU ops only with ``device="cuda"``); never raises for an op.

    Names must be known (``op_builder.registry.check_op_names``); ``env`` decides how ops load.
    ``gpu_required``: where no GPU is visible every op is reported skipped, the CPU ops too (a
    run asked for on a GPU must not pass on the CPU alone).
    """
    tests = [selftest_for(name) for name in names]
    if gpu_required and not gpu_visible():
        return skip_all(tests, device, f"--device cuda was asked for, and there is no GPU: {no_gpu_reason()}")
    return run_all(tests, device, os.environ if env is None else env)


def selftest_for(name: str) -> SelfTest:
    """Op ``name``'s self-test: ours from ``SELFTESTS``, an op package's from its builder's
    ``selftest = "module:function"``. A package op without one gets a test that fails saying so:
    verification proves every op it passes."""
    known = SELFTESTS.get(name)
    if known is not None:
        return known
    builder = get_builder(name)
    return SelfTest(name, builder.target, _package_selftest(name, builder.selftest))


def _package_selftest(name: str, reference: str | None) -> Callable[[SelfTestContext], None]:
    def run(ctx: SelfTestContext) -> None:
        if reference is None:
            raise LookupError(
                f"{name} declares no self-test (set selftest = 'module:function' in its builder)"
            )
        # Imported at run time, so that a self-test that does not import fails its op only.
        module_name, _, function = reference.partition(":")
        getattr(importlib.import_module(module_name), function)(ctx)

    return run


def force_isa(level: cpu_optim.SimdLevel, ops: Iterable[str] = _SIMD_OPS) -> None:
    """Make the CPU optimizers run ``level``'s code path (``kernels.cpu_optim.set_simd_level``).

    Raises UnsupportedIsa when this CPU cannot run it. The CPU's best level is read from the
    first of ``ops`` that loads; when none does there is nothing to force, and their
    self-tests report the load failure.
    """
    for op in ops:
        if op not in _SIMD_OPS:
            continue
        try:
            supported = cpu_optim.supported_simd_level(op)
        except (OpLoadError, ImportError):
            continue
        problem = isa_problem(level, supported)
        if problem is not None:
            raise UnsupportedIsa(problem, supported)
        break
    cpu_optim.set_simd_level(level)
