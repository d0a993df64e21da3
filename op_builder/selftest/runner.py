"""Running ops' self-tests: each op's builder names its test (``selftest = "module:function"``),
ours and op packages' alike.

    from op_builder.selftest import run_selftests
    report = run_selftests(["cpu_adam", "async_io"], device="cpu")   # a SelfTestReport
    report.ok, report.to_json()

A test forces the compiled path (``use_kernel=True``, ``backend="kernel"``: a missing kernel is a
failure, never a quiet fallback), runs deterministic inputs of awkward sizes, and compares with
torch's own op or with a plain loop written in the test (never the front's fallback code).
``python -m op_builder selftest`` is the command around this; image builds run the CPU ops'
tests, and image verification every installed op's.
"""

from __future__ import annotations

import importlib
import os
from collections.abc import Callable, Mapping, Sequence

from op_builder.registry import get_builder
from op_builder.report import SelfTestReport
from op_builder.selftest.harness import (
    Device,
    SelfTest,
    SelfTestContext,
    gpu_visible,
    no_gpu_reason,
    run_all,
    skip_all,
)


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
    """Op ``name``'s self-test, from its builder's ``selftest = "module:function"``. An op without
    one gets a test that fails saying so: verification proves every op it passes."""
    builder = get_builder(name)
    return SelfTest(name, builder.target, _named_selftest(name, builder.selftest))


def _named_selftest(name: str, reference: str | None) -> Callable[[SelfTestContext], None]:
    def run(ctx: SelfTestContext) -> None:
        if reference is None:
            raise LookupError(
                f"{name} declares no self-test (set selftest = 'module:function' in its builder)"
            )
        # Imported at run time, so that a self-test that does not import fails its op only.
        module_name, _, function = reference.partition(":")
        getattr(importlib.import_module(module_name), function)(ctx)

    return run
