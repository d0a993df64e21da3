"""Does an image still hold what its SBOM says? (pure)

Each op module component of the SBOM (``imagegen:op``) is compared with the module the probe
found in the image: its path, its SHA-256, and the device code (``imagegen:sass`` / ``ptx`` /
``gfx``) or CPU code paths (``imagegen:isa``) found in it. A module replaced after the build, an
op missing from either side, or a SBOM whose file differs from its label's digest is a mismatch,
named by op where there is one.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from imagegen.proof import sbom as sbom_props
from imagegen.proof.facts import ImageFacts, OpModule


@dataclass(frozen=True)
class Mismatch:
    op: str | None  # None: about the documents, not one op
    problem: str

    def __str__(self) -> str:
        return f"{self.op}: {self.problem}" if self.op else self.problem

    def to_json(self) -> dict[str, Any]:
        return {"op": self.op, "problem": self.problem}


@dataclass(frozen=True)
class SbomOp:
    """What the SBOM says of one op's module."""

    name: str
    path: str
    sha256: str | None
    code: Mapping[str, tuple[str, ...]]  # property name (imagegen:sass, ...) -> names, as recorded


def sbom_ops(document: Mapping[str, Any]) -> dict[str, SbomOp]:
    """The op module components of a CycloneDX document, by op name. ValueError when it is not one."""
    if document.get("bomFormat") != "CycloneDX":
        raise ValueError("not a CycloneDX document")
    found: dict[str, SbomOp] = {}
    for component in document.get("components") or []:
        if not isinstance(component, Mapping):
            continue
        props = {
            str(p.get("name")): str(p.get("value") or "")
            for p in component.get("properties") or []
            if isinstance(p, Mapping)
        }
        name = props.get(sbom_props.OP)
        if not name:
            continue
        sha = next(
            (
                str(h.get("content"))
                for h in component.get("hashes") or []
                if isinstance(h, Mapping) and h.get("alg") == "SHA-256"
            ),
            None,
        )
        code = {
            key: tuple(v for v in props[key].split(",") if v)
            for key in (sbom_props.SASS, sbom_props.PTX, sbom_props.GFX, sbom_props.ISA)
            if key in props
        }
        found[name] = SbomOp(name, props.get(sbom_props.PATH, ""), sha, code)
    return found


def _found(op: OpModule, key: str) -> tuple[str, ...]:
    return {
        sbom_props.SASS: op.sass,
        sbom_props.PTX: op.ptx,
        sbom_props.GFX: op.gfx,
        sbom_props.ISA: op.isa,
    }[key]


def compare(document: Mapping[str, Any], facts: ImageFacts) -> tuple[Mismatch, ...]:
    """Every difference between the SBOM's op modules and the image's, each naming its op."""
    try:
        recorded = sbom_ops(document)
    except ValueError as exc:
        return (Mismatch(None, f"the SBOM cannot be read: {exc}"),)
    problems: list[Mismatch] = []
    if not recorded:
        problems.append(Mismatch(None, "the SBOM lists no op module"))
    for name, said in recorded.items():
        op = facts.op(name)
        if op is None or op.path is None:
            why = op.error if op is not None and op.error else "not installed in the image"
            problems.append(Mismatch(name, f"the SBOM lists its module, the image has none ({why})"))
            continue
        if op.path != said.path:
            problems.append(Mismatch(name, f"module at {op.path}, the SBOM says {said.path}"))
        if op.sha256 != said.sha256:
            problems.append(
                Mismatch(
                    name,
                    f"module {op.path} was changed after the build: sha256 {op.sha256}, "
                    f"the SBOM says {said.sha256}",
                )
            )
        for key, names in said.code.items():
            found = _found(op, key)
            if set(found) != set(names):
                label = key.split(":", 1)[1]
                found_text, said_text = ",".join(found) or "none", ",".join(names) or "none"
                problems.append(
                    Mismatch(
                        name,
                        f"{label} in the module: {found_text}, the SBOM says {said_text}",
                    )
                )
        if op.error:
            problems.append(Mismatch(name, op.error))
    for op in facts.ops:
        if op.name not in recorded:
            problems.append(Mismatch(op.name, "installed in the image but not in the SBOM"))
    return tuple(problems)
