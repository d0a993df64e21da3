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

Source = Literal["aot", "jit", "fallback"]
SOURCES: tuple[Source, ...] = ("aot", "jit", "fallback")


@dataclass(frozen=True)
class OpVerification:
    """One op's load check: it passes only when it loaded from its ahead-of-time module."""

    name: str
    ok: bool
    source: Source | None
    seconds: float
    error: str | None

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "ok": self.ok,
            "source": self.source,
            "seconds": self.seconds,
            "error": self.error,
        }

    @classmethod
    def from_json(cls, raw: Mapping[str, Any]) -> OpVerification:
        source = raw.get("source")
        known = cast(Source, source) if source in SOURCES else None
        error = str(raw["error"]) if raw.get("error") else None
        if known is not None and known != "aot" and error is None:
            error = f"loaded from {known}, not ahead of time"
        return cls(
            name=str(raw["name"]),
            ok=bool(raw.get("ok")) and known == "aot",
            source=known,
            seconds=float(raw.get("seconds") or 0.0),
            error=error,
        )

    @classmethod
    def not_reported(cls, name: str) -> OpVerification:
        return cls(name, False, None, 0.0, "not reported by the image (op not installed?)")


@dataclass(frozen=True)
class VerifyReport:
    """Every op's check plus the torch build they were checked against."""

    torch: str
    cuda: str | None
    hip: str | None
    ops: tuple[OpVerification, ...]

    @property
    def ok(self) -> bool:
        return bool(self.ops) and all(op.ok for op in self.ops)

    def to_json(self) -> dict[str, Any]:
        return {
            "ok": self.ok,
            "torch": self.torch,
            "cuda": self.cuda,
            "hip": self.hip,
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
        return {
            "name": self.name,
            "ok": self.ok,
            "device": self.device,
            "max_abs_err": self.max_abs_err,
            "tolerance": self.tolerance,
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
