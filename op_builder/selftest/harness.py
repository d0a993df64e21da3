"""What every self-test shares: tolerances, the comparison record, and running one op's test.

Imports torch: ``op_builder.selftest`` imports this module only when one of its names is used.

A self-test is a function of a ``SelfTestContext``: it runs the op's kernel through the public
front (the compiled path forced, never the fallback), computes the same result with an
independent reference (torch's own op or optimizer, or a plain loop written in the self-test),
and hands both to ``ctx.compare``. The op's result keeps its worst comparison, the one with the
largest error relative to its tolerance.

Errors are compared norm-wise: ``max |actual - expected|`` against ``atol + rtol * max |expected|``.
One number per check is what the report carries, and a scale taken from the whole reference
keeps that number meaningful for values near zero (a softmax tail, a LayerNorm gradient),
where an element-wise relative bound would be noise.
"""

from __future__ import annotations

import math
import sys
import time
import traceback
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal

import torch
from torch import Tensor

from op_builder import settings
from op_builder.devices import no_gpu_reason as no_gpu_reason  # re-exported: the self-tests use it
from op_builder.errors import OpLoadError
from op_builder.registry import get_builder
from op_builder.report import SelfTestReport, SelfTestResult

Device = Literal["cpu", "cuda"]
Target = Literal["cpu", "gpu"]


@dataclass(frozen=True)
class Tolerance:
    """A check passes when ``max |actual - expected| <= atol + rtol * max |expected|``."""

    rtol: float
    atol: float

    def bound(self, expected: Tensor, scale: float = 1.0) -> float:
        """The allowed error for ``expected``; ``scale`` widens atol (sums over many rows).

        The scale comes from the finite values only: NaN and infinities are compared by equality
        (``SelfTestContext.compare``), and one of them here would make the bound NaN (nothing
        passes, and the report cannot say it in JSON) or infinite (everything passes)."""
        magnitudes = expected.detach().abs()
        finite = magnitudes[torch.isfinite(magnitudes)]
        peak = float(finite.max()) if finite.numel() else 0.0
        return self.atol * scale + self.rtol * peak


EXACT = Tolerance(0.0, 0.0)


class NotCheckableHere(Exception):
    """Raised by a self-test that cannot run where it is (``async_io`` under qemu-user, which has
    no Linux AIO): the op is reported skipped with this reason, never passed or failed by it."""


# Kernel output in a GPU dtype against an fp32 reference computed from the same (rounded)
# inputs: fp32 math on both sides, then one rounding to the output dtype, which is a few
# units of that dtype's epsilon (fp16 2^-10, bf16 2^-7) at most. The same values as the GPU
# tests; norm-wise they leave a margin of several ulps, while a wrong formula, a wrong index
# or a missed row is off by far more.
GPU_TOLERANCE: dict[torch.dtype, Tolerance] = {
    torch.float32: Tolerance(1e-4, 1e-5),
    torch.float16: Tolerance(5e-3, 2e-3),
    torch.bfloat16: Tolerance(3e-2, 2e-2),
}


@dataclass(frozen=True)
class Check:
    label: str
    max_abs_err: float | None  # None: the kernel produced NaN / inf where the reference did not
    tolerance: float

    @property
    def ratio(self) -> float:
        if self.max_abs_err is None or not math.isfinite(self.tolerance):
            return math.inf  # a check that cannot pass (or cannot be judged) is the worst
        if self.tolerance > 0:
            return self.max_abs_err / self.tolerance
        return 0.0 if self.max_abs_err == 0 else math.inf


@dataclass
class SelfTestContext:
    """What a self-test gets: where to run, which float dtypes the op's kernels take here,
    and ``compare`` to record each result against its reference."""

    device: torch.device
    dtypes: tuple[torch.dtype, ...] = (torch.float32,)
    checks: list[Check] = field(default_factory=list)

    def compare(
        self, label: str, actual: Tensor, expected: Tensor, tolerance: Tolerance, scale: float = 1.0
    ) -> None:
        """Record ``actual`` (the kernel's) against ``expected`` (the reference's)."""
        if actual.shape != expected.shape:
            raise AssertionError(
                f"{label}: the kernel gave shape {tuple(actual.shape)}, the reference {tuple(expected.shape)}"
            )
        a, e = actual.detach().double(), expected.detach().double()
        # Equal elements (infinities and NaN included) are no error; anything else that is
        # not finite is unbounded.
        same = (a == e) | (torch.isnan(a) & torch.isnan(e))
        diff = torch.where(same, torch.zeros_like(a), (a - e).abs())
        worst = float(diff.max()) if diff.numel() else 0.0
        self.checks.append(Check(label, worst if math.isfinite(worst) else None, tolerance.bound(e, scale)))

    def worst(self) -> Check | None:
        return max(self.checks, key=lambda c: c.ratio, default=None)


@dataclass(frozen=True)
class SelfTest:
    """One op's self-test: its name, its target, and the function its builder's ``selftest``
    names (``"module:function"``)."""

    op: str
    target: Target
    run: Callable[[SelfTestContext], None]


def resolve_device(requested: Literal["cpu", "cuda", "auto"]) -> Device:
    """``auto``: cuda when torch sees a GPU (CUDA or ROCm), else cpu."""
    if requested == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    return requested


def gpu_visible() -> bool:
    """Whether torch sees a GPU (CUDA or ROCm) to run the GPU ops' self-tests on."""
    return bool(torch.cuda.is_available())


def _result(
    test: SelfTest,
    device: str,
    *,
    seconds: float = 0.0,
    check: Check | None = None,
    error: str | None = None,
    skipped: str | None = None,
    isa: str | None = None,
) -> SelfTestResult:
    err = check.max_abs_err if check is not None else None
    tol = check.tolerance if check is not None else None
    if check is not None and tol is not None and not math.isfinite(tol):
        # A tolerance given as NaN or inf (a Tolerance or scale of the self-test's own): JSON has
        # no such number, and a NaN bound would fail and an infinite one pass whatever the error.
        error = (
            error
            or f"{check.label}: the tolerance is {tol}, not a finite number (fix the self-test's Tolerance)"
        )
        tol = None
    within = err is not None and tol is not None and err <= tol
    if error is None and skipped is None and check is not None and not within:
        shown = "NaN or inf" if err is None else f"{err:.3g}"
        error = f"{check.label}: max |err| {shown} > tolerance {check.tolerance:.3g}"
    ok = SelfTestResult.passes(err, tol, error, skipped)
    return SelfTestResult(test.op, ok, device, err, tol, round(seconds, 6), isa, error, skipped)


def _kernel_dtypes(module: object) -> tuple[torch.dtype, ...]:
    """fp32 and fp16 always; bf16 only where this build has bf16 kernels (archs >= sm_80)."""
    has_bf16 = getattr(module, "has_bf16", None)
    with_bf16 = bool(has_bf16()) if callable(has_bf16) else False
    return (torch.float32, torch.float16, *((torch.bfloat16,) if with_bf16 else ()))


def run_one(test: SelfTest, device: Device, env: Mapping[str, str]) -> SelfTestResult:
    """Load ``test.op`` and run its self-test; every outcome is a result, never an exception."""
    where = "cpu" if test.target == "cpu" else "cuda"
    if test.target == "gpu":
        if device != "cuda":
            return _result(test, where, skipped=f"a GPU op, and the self-tests run with --device {device}")
        if not gpu_visible():
            return _result(test, where, skipped=no_gpu_reason())
    try:
        module = get_builder(test.op).load(env)
    except (OpLoadError, ImportError) as exc:
        message = getattr(exc, "message", None) or str(exc)
        hint = getattr(exc, "hint", None)
        return _result(test, where, error=f"load failed: {message}" + (f" ({hint})" if hint else ""))
    except KeyboardInterrupt:
        raise
    except BaseException as exc:  # anything else loading raised (an op package's code): this op's result
        return _result(test, where, error=f"load failed: {_describe(exc)}")
    ctx = SelfTestContext(torch.device(where))
    if test.target == "gpu":
        ctx.dtypes = _kernel_dtypes(module)
    start = time.perf_counter()
    error = None
    try:
        test.run(ctx)
        if test.target == "gpu":
            torch.cuda.synchronize()
    except KeyboardInterrupt:
        raise
    except NotCheckableHere as exc:
        return _result(
            test, where, seconds=time.perf_counter() - start, skipped=str(exc), isa=simd_level(module)
        )
    # Any failure of the kernel or the test is this op's result, said with why; sys.exit() in a
    # self-test too, which would otherwise end the whole run with its code (0) and pass the op.
    except BaseException as exc:
        if env.get(settings.DEBUG.name) == "1":
            traceback.print_exc(file=sys.stderr)
        error = _describe(exc)
    seconds = time.perf_counter() - start
    isa = simd_level(module)
    check = ctx.worst()
    if error is None and check is None:
        error = "the self-test compared nothing"
    return _result(test, where, seconds=seconds, check=check, error=error, isa=isa)


def _describe(exc: BaseException) -> str:
    if isinstance(exc, SystemExit):
        return f"SystemExit: the self-test called sys.exit({exc.code!r})"
    return f"{type(exc).__name__}: {exc}".strip()


def simd_level(module: object) -> str | None:
    """The CPU code path the op's kernels ran (scalar, avx2, avx512, neon, sve), for an op whose
    compiled module reports one (``simd_level()``: the CPU optimizers); None for any other."""
    level = getattr(module, "simd_level", None)
    return str(level()) if callable(level) else None


def run_all(tests: Sequence[SelfTest], device: Device, env: Mapping[str, str]) -> SelfTestReport:
    return SelfTestReport(device, tuple(run_one(test, device, env) for test in tests))


def skip_all(tests: Sequence[SelfTest], device: Device, reason: str) -> SelfTestReport:
    """Every test reported skipped for ``reason``, none run (so none is ok)."""
    return SelfTestReport(
        device,
        tuple(_result(test, "cpu" if test.target == "cpu" else "cuda", skipped=reason) for test in tests),
    )
