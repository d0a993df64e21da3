"""The JSON that ``python -m op_builder verify`` and ``selftest`` print, defined once for both sides.

The verifier inside an image writes it with ``VerifyReport.to_json`` (``SelfTestReport.to_json``);
imagegen, outside the image, reads it back with ``from_json``. Reading is lenient about what an
older or damaged image prints (missing keys, wrong types) but never trusts its verdicts:
``ok`` is recomputed from the ops.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal, cast

from op_builder.binary import Audit

Source = Literal["aot", "jit", "fallback"]
SOURCES: tuple[Source, ...] = ("aot", "jit", "fallback")


@dataclass(frozen=True)
class OpVerification:
    """One op's verification: it loaded from its ahead-of-time module, its self-test passed
    (``selftest``; None when not run), and its GPU code is what was planned (``binary``; None for
    CPU ops). A self-test skipped for want of a GPU passes unless the run required a GPU."""

    name: str
    ok: bool
    source: Source | None
    seconds: float
    error: str | None
    selftest: SelfTestResult | None = None
    binary: Audit | None = None
    # The machine its module's code is for (``aarch64``), from the ELF header; None when not read.
    machine: str | None = None

    @staticmethod
    def verdict(
        source: Source | None,
        error: str | None,
        selftest: SelfTestResult | None,
        binary: Audit | None,
        require_gpu: bool = False,
    ) -> bool:
        """The one rule for an op's verdict, used when writing and again when reading."""
        if source != "aot" or error is not None:
            return False
        if binary is not None and not binary.ok:
            return False
        if selftest is None or selftest.ok:
            return True
        return selftest.skipped is not None and selftest.error is None and not require_gpu

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "ok": self.ok,
            "source": self.source,
            "seconds": self.seconds,
            "error": self.error,
            "selftest": self.selftest.to_json() if self.selftest else None,
            "binary": self.binary.to_json() if self.binary else None,
            "machine": self.machine,
        }

    @classmethod
    def from_json(cls, raw: Mapping[str, Any]) -> OpVerification:
        source = raw.get("source")
        known = cast(Source, source) if source in SOURCES else None
        error = str(raw["error"]) if raw.get("error") else None
        if known is not None and known != "aot" and error is None:
            error = f"loaded from {known}, not ahead of time"
        selftest = raw.get("selftest")
        test = (
            SelfTestResult.from_json(selftest)
            if isinstance(selftest, Mapping) and "name" in selftest
            else None
        )
        binary = raw.get("binary")
        audit = Audit.from_json(binary) if isinstance(binary, Mapping) else None
        return cls(
            name=str(raw["name"]),
            # Reading can only lower a verdict: a run with --require-gpu wrote False for a skip.
            ok=bool(raw.get("ok")) and cls.verdict(known, error, test, audit),
            source=known,
            seconds=float(raw.get("seconds") or 0.0),
            error=error,
            selftest=test,
            binary=audit,
            machine=_optional_str(raw.get("machine")),
        )

    @classmethod
    def not_reported(cls, name: str) -> OpVerification:
        return cls(name, False, None, 0.0, "not reported by the image (op not installed?)")

    def problems(self) -> list[str]:
        """What failed, in words, for a one-line summary (empty when the op passed)."""
        if self.ok:
            return []
        found: list[str] = [self.error] if self.error else []
        if self.binary is not None and not self.binary.ok:
            parts = [f"missing {' '.join(self.binary.missing)}"] if self.binary.missing else []
            parts += [f"extra {' '.join(self.binary.extra)}"] if self.binary.extra else []
            parts += list(self.binary.found.unreadable)
            found.append("device code differs from the plan: " + "; ".join(parts))
        test = self.selftest
        if test is not None and not test.ok:
            if test.skipped:
                if not found:  # only then was the skip itself the failure (a GPU was required)
                    found.append(f"self-test skipped ({test.skipped}) and a GPU was required")
            elif test.error:
                found.append(f"self-test failed: {test.error}")
            else:
                worst, allowed = _number(test.max_abs_err), _number(test.tolerance)
                found.append(f"self-test failed: max error {worst} > tolerance {allowed}")
        return found or ["failed"]


@dataclass(frozen=True)
class VerifyReport:
    """Every op's check plus the torch build they were checked against."""

    torch: str
    cuda: str | None
    hip: str | None
    ops: tuple[OpVerification, ...]
    # The machine the check ran on (``uname -m``; under emulation, the emulated one); None in old reports.
    machine: str | None = None

    @property
    def ok(self) -> bool:
        return bool(self.ops) and all(op.ok for op in self.ops)

    def to_json(self) -> dict[str, Any]:
        return {
            "ok": self.ok,
            "torch": self.torch,
            "cuda": self.cuda,
            "hip": self.hip,
            "machine": self.machine,
            "ops": [op.to_json() for op in self.ops],
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> VerifyReport:
        """Parse leniently: entries without a name are dropped; ``ok`` is recomputed."""
        ops = tuple(
            OpVerification.from_json(raw)
            for raw in data.get("ops") or []
            if isinstance(raw, Mapping) and isinstance(raw.get("name"), str)
        )
        return cls(
            torch=str(data.get("torch") or ""),
            cuda=_optional_str(data.get("cuda")),
            hip=_optional_str(data.get("hip")),
            ops=ops,
            machine=_optional_str(data.get("machine")),
        )


@dataclass(frozen=True)
class SelfTestResult:
    """One op's self-test: its compiled kernel against an independent reference.

    ``max_abs_err`` and ``tolerance`` are those of the op's worst check (the largest error
    relative to its own tolerance), so the op passed only if ``max_abs_err <= tolerance``.
    ``isa`` is the CPU code path that ran (None where that does not apply); ``skipped`` says
    why the op did not run, and a skipped op is never ``ok``.
    """

    name: str
    ok: bool
    device: str
    max_abs_err: float | None
    tolerance: float | None
    seconds: float
    isa: str | None
    error: str | None
    skipped: str | None

    @staticmethod
    def passes(
        max_abs_err: float | None, tolerance: float | None, error: str | None, skipped: str | None
    ) -> bool:
        """The one verdict rule: ran, raised nothing, and compared within its tolerance."""
        if skipped is not None or error is not None or max_abs_err is None or tolerance is None:
            return False
        return max_abs_err <= tolerance

    def to_json(self) -> dict[str, Any]:
        # JSON has no NaN or infinity: such a number is written null (the error says why).
        return {
            "name": self.name,
            "ok": self.ok,
            "device": self.device,
            "max_abs_err": _optional_float(self.max_abs_err),
            "tolerance": _optional_float(self.tolerance),
            "seconds": self.seconds,
            "isa": self.isa,
            "error": self.error,
            "skipped": self.skipped,
        }

    @classmethod
    def from_json(cls, raw: Mapping[str, Any]) -> SelfTestResult:
        err, tol = _optional_float(raw.get("max_abs_err")), _optional_float(raw.get("tolerance"))
        error = str(raw["error"]) if raw.get("error") else None
        skipped = str(raw["skipped"]) if raw.get("skipped") else None
        return cls(
            name=str(raw["name"]),
            ok=bool(raw.get("ok")) and cls.passes(err, tol, error, skipped),
            device=str(raw.get("device") or ""),
            max_abs_err=err,
            tolerance=tol,
            seconds=_optional_float(raw.get("seconds")) or 0.0,
            isa=_optional_str(raw.get("isa")),
            error=error,
            skipped=skipped,
        )


@dataclass(frozen=True)
class SelfTestReport:
    """Every requested op's self-test, and the device they were asked to run on."""

    device: str
    ops: tuple[SelfTestResult, ...]

    @property
    def ok(self) -> bool:
        return bool(self.ops) and all(op.ok for op in self.ops)

    def to_json(self) -> dict[str, Any]:
        return {"ok": self.ok, "device": self.device, "ops": [op.to_json() for op in self.ops]}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> SelfTestReport:
        """Parse leniently: entries without a name are dropped; ``ok`` is recomputed."""
        ops = tuple(
            SelfTestResult.from_json(raw)
            for raw in data.get("ops") or []
            if isinstance(raw, Mapping) and isinstance(raw.get("name"), str)
        )
        return cls(device=str(data.get("device") or ""), ops=ops)


def _optional_str(value: object) -> str | None:
    return None if value is None else str(value)


def _optional_float(value: object) -> float | None:
    """A finite number as a float, else None (JSON has no NaN; a bool is not a number)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value) if math.isfinite(value) else None


def _number(value: float | None) -> str:
    return "-" if value is None else f"{value:.3g}"
