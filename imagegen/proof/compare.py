"""Does an image still hold what its SBOM says? (pure)

Each op module component of the SBOM (``imagegen:op``) is compared with the module the probe
found in the image: its path, its SHA-256, and the device code (``imagegen:sass`` / ``ptx`` /
``gfx``) or CPU code paths (``imagegen:isa``) found in it. A module replaced after the build, an
op missing from either side, or a SBOM whose file differs from its label's digest is a mismatch,
named by op where there is one.

With a key, ``compare_statement`` holds the signed provenance statement as the root: the SBOM must
be the one it names; the modules are checked against it from the image's layers (``outside``).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from imagegen.proof import sbom as sbom_props
from imagegen.proof.documents import SBOM, digest_problem
from imagegen.proof.facts import ImageFacts, OpModule
from imagegen.proof.provenance import STATEMENT_TYPE


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


def _listed(value: Any) -> list[Any]:
    """A field that should hold a list: the list, else nothing (the document is someone's)."""
    return value if isinstance(value, list) else []


def sbom_ops(document: Mapping[str, Any]) -> dict[str, SbomOp]:
    """The op module components of a CycloneDX document, by op name. ValueError when it is not one."""
    if document.get("bomFormat") != "CycloneDX":
        raise ValueError("not a CycloneDX document")
    components = document.get("components") or []
    if not isinstance(components, list):
        raise ValueError("not a CycloneDX document: its components are not a list")
    found: dict[str, SbomOp] = {}
    for component in components:
        if not isinstance(component, Mapping):
            continue
        props = {
            str(p.get("name")): str(p.get("value") or "")
            for p in _listed(component.get("properties"))
            if isinstance(p, Mapping)
        }
        name = props.get(sbom_props.OP)
        if not name:
            continue
        sha = next(
            (
                str(h.get("content"))
                for h in _listed(component.get("hashes"))
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


# --------------------------------------------------------------------------- the signed statement


def _subject_ops(statement: Mapping[str, Any]) -> dict[str, tuple[str, str | None]]:
    """The op module subjects of a provenance statement: op -> (path, sha256)."""
    found: dict[str, tuple[str, str | None]] = {}
    for subject in statement.get("subject") or []:
        if not isinstance(subject, Mapping):
            continue
        annotations = subject.get("annotations")
        op = annotations.get(sbom_props.OP) if isinstance(annotations, Mapping) else None
        if not op:
            continue
        digest = subject.get("digest")
        sha = digest.get("sha256") if isinstance(digest, Mapping) else None
        found[str(op)] = (str(subject.get("name") or ""), None if sha is None else str(sha))
    return found


def _named_sbom_digest(statement: Mapping[str, Any]) -> str | None:
    """The SBOM digest the statement names as its build's byproduct ("sha256:..."), if any."""
    predicate = statement.get("predicate")
    run = predicate.get("runDetails") if isinstance(predicate, Mapping) else None
    byproducts = run.get("byproducts") if isinstance(run, Mapping) else None
    for entry in byproducts if isinstance(byproducts, list) else []:
        if isinstance(entry, Mapping) and entry.get("name") == SBOM.filename:
            digest = entry.get("digest")
            if isinstance(digest, Mapping) and digest.get("sha256"):
                return f"sha256:{digest['sha256']}"
    return None


def compare_statement(
    statement: bytes, sbom: bytes | None
) -> tuple[dict[str, Any] | None, tuple[Mismatch, ...]]:
    """A *signed* provenance statement read, and the SBOM checked against it (pure): once the
    signature over ``statement`` has verified, the statement is the root of trust, and the SBOM
    must be the very document it names (its digest). Checking the SBOM against the modules alone
    would let a forger rewrite both together. (The statement, or None when it is not one.)

    The op modules and every other file are checked against the statement from the image's layers
    (``imagegen.proof.outside``), never by asking the image."""
    try:
        document = json.loads(statement)
    except ValueError as exc:
        return None, (Mismatch(None, f"the signed provenance is not JSON: {exc}"),)
    if not isinstance(document, dict) or document.get("_type") != STATEMENT_TYPE:
        return None, (Mismatch(None, "the signed provenance is not an in-toto statement"),)
    problems: list[Mismatch] = []
    named = _named_sbom_digest(document)
    problem = digest_problem(
        sbom,
        named,
        unnamed="the signed provenance names no SBOM",
        missing=f"the signed provenance names the SBOM {named}; the image has none",
        changed=lambda actual: (
            f"the SBOM is not the one the signed provenance names: {actual}, "
            f"the signed provenance says {named}"
        ),
    )
    if problem is not None:
        problems.append(Mismatch(None, problem))
    return document, tuple(problems)


def signed_modules(statement: Mapping[str, Any]) -> dict[str, tuple[str, str]]:
    """The op module subjects of a statement: path -> (op, sha256)."""
    return {path: (op, sha or "") for op, (path, sha) in _subject_ops(statement).items()}
