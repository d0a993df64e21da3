"""The JSON that ``python -m op_builder verify`` prints, defined once for both sides.

The verifier inside an image writes it with ``VerifyReport.to_json``; imagegen, outside
the image, reads it back with ``VerifyReport.from_json``. Reading is lenient about what an
older or damaged image prints (missing keys, wrong types) but never trusts its verdicts:
``ok`` is recomputed from the ops.
"""

from __future__ import annotations

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


def _optional_str(value: object) -> str | None:
    return None if value is None else str(value)
