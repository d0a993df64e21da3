"""An image's proof, read and checked through the engine: the probe in a sealed container, the
documents from the image's files, and the checks ``imagegen verify`` and ``imagegen sbom`` run.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from imagegen.engine.image_files import copy_files
from imagegen.engine.images import inspect_local
from imagegen.engine.sealed import SealedRun
from imagegen.errors import BadInputError, VerificationFailedError
from imagegen.imagespec.reference import check_reference
from imagegen.proof import probe
from imagegen.proof.compare import Mismatch, compare, compare_statement, signed_modules
from imagegen.proof.derived import Judgement
from imagegen.proof.documents import (
    DOCUMENT_TYPES,
    PROOF_DIR,
    PROVENANCE,
    SBOM,
    SIGNATURE,
    digest_problem,
)
from imagegen.proof.facts import ImageFacts
from imagegen.proof.outside import check_layers
from imagegen.proof.runtime import signed_runtime
from imagegen.proof.signing import check_envelope
from imagegen.registry.manifest import json_object
from imagegen.verify.container import last_json_object, run_python
from imagegen.verify.failures import no_report_error


def probe_text() -> str:
    """The probe's source, passed to the image's ``python -c`` (nothing of imagegen is in the image)."""
    return Path(probe.__file__).read_text()


def probe_image(image: str, with_torch: bool = False, timeout: float = 300) -> ImageFacts:
    """Run the probe in a sealed container of ``image`` (as ``imagegen verify`` runs its verifier)."""
    command = ["python", "-c", probe_text(), *(["--torch"] if with_torch else [])]
    config = inspect_local(image).get("Config") or {}
    code, stdout, stderr = run_python(SealedRun(image, "proof", config, command, timeout))
    data = last_json_object(stdout)
    try:
        return ImageFacts.from_json(data)
    except ValueError:
        raise no_report_error(image, "python -c <imagegen's probe>", code, stdout + "\n" + stderr) from None


@dataclass(frozen=True)
class ImageDocuments:
    """The proof files an image holds (file name -> bytes) and its labels."""

    image: str
    labels: Mapping[str, str]
    files: Mapping[str, bytes] = field(default_factory=dict)

    def problems(self) -> list[Mismatch]:
        """Each document whose label and file disagree, or that one has and the other not."""
        found = []
        for kind in DOCUMENT_TYPES:
            label, data = self.labels.get(kind.label), self.files.get(kind.filename)
            if label is None and data is None:
                continue
            path = f"{PROOF_DIR}/{kind.filename}"
            problem = digest_problem(
                data,
                label,
                unnamed=f"{path} has no {kind.label} label",
                missing=f"{path} is missing (its label says {label})",
                changed=functools.partial(_changed, path, label),
            )
            if problem is not None:
                found.append(Mismatch(None, problem))
        return found


def _changed(path: str, label: str | None, actual: str) -> str:
    return f"{path} was changed after the build: {actual}, its label says {label}"


def read_documents(image: str) -> ImageDocuments:
    """The labels and the proof files of ``image``, copied out of a container that never starts."""
    check_reference("IMAGE", image)
    labels = (inspect_local(image).get("Config") or {}).get("Labels") or {}
    if not any(kind.label in labels for kind in DOCUMENT_TYPES):
        return ImageDocuments(image, labels)
    found = copy_files(image, PROOF_DIR, purpose="proof")
    if found is None:
        return ImageDocuments(image, labels)
    files = {Path(name).name: data for name, data in found.items()}
    return ImageDocuments(image, labels, files)


def require_document(documents: ImageDocuments, kind: str) -> bytes:
    """The document's bytes; BadInputError (2) for an image without it, VerificationFailedError (1)
    when its file and label disagree."""
    wanted = next(k for k in DOCUMENT_TYPES if k.kind == kind)
    if wanted.label not in documents.labels:
        raise BadInputError(
            f"{documents.image} has no {'SBOM' if wanted is SBOM else wanted.kind} ({wanted.label} label)",
            hint="images get one from `imagegen build`; rebuild the image with it"
            + (", with --sign-key" if wanted is SIGNATURE else ""),
        )
    problems = [p for p in documents.problems() if wanted.filename in p.problem]
    if problems:
        raise VerificationFailedError(
            f"{documents.image}: {problems[0]}", hint="rebuild the image; do not trust it"
        )
    return documents.files[wanted.filename]


def document_object(image: str, kind: str, data: bytes) -> dict[str, Any]:
    """``data``, ``image``'s ``kind`` document, as the JSON object every document imagegen seals
    is; VerificationFailedError (1) otherwise: the reference is fine and the bytes are the ones
    its label names, but they are not a proof `imagegen build` made, so nothing of it is shown."""
    name = "SBOM" if kind == SBOM.kind else kind
    try:
        return json_object(data)
    except ValueError as exc:
        raise VerificationFailedError(
            f"{image}: its {name} is {exc}",
            hint="the image's proof was damaged or not made by `imagegen build`: rebuild the image; "
            "do not trust it",
        ) from None


@dataclass(frozen=True)
class ProofCheck:
    """``imagegen verify``'s check of an image's SBOM (and, with a key, the signed provenance)."""

    sbom_digest: str | None
    signed: bool | None  # None: no key given
    mismatches: tuple[Mismatch, ...]
    # With a key whose signature verified: the image held to the signed statement, exactly or (with
    # --derived) as derived from it (None: not read, without a key or when the signature failed).
    judgement: Judgement | None = None

    @property
    def ok(self) -> bool:
        return not self.mismatches

    @property
    def exact(self) -> bool | None:
        """True: the image is exactly the signed one; False: it is not (or was read as derived)."""
        if self.judgement is None:
            return None
        return self.ok and not self.judgement.derived

    def to_json(self) -> dict[str, Any]:
        return {
            "ok": self.ok,
            "sbom_digest": self.sbom_digest,
            "signed": self.signed,
            "exact": self.exact,
            "mismatches": [m.to_json() for m in self.mismatches],
            "derived": None if self.judgement is None else self.judgement.to_json(),
        }

    def summary(self) -> str:
        return "; ".join(str(m) for m in self.mismatches)

    @property
    def hint(self) -> str:
        """What to do about the mismatches."""
        found = self.judgement.hint if self.judgement is not None else None
        return found or "its op modules or documents are not what its build made: rebuild it, do not ship it"


def check_signed(
    image: str, statement: bytes, documents: ImageDocuments, derived: bool = False
) -> tuple[list[Mismatch], Judgement | None]:
    """The image against its signed statement, read from outside it: the SBOM the statement names,
    then the image's layers and settings (``imagegen.proof.outside.check_layers``)."""
    document, found = compare_statement(statement, documents.files.get(SBOM.filename))
    problems = list(found)
    if document is None:
        return problems, None
    try:
        runtime = signed_runtime(document)
    except ValueError as exc:
        return [*problems, Mismatch(None, f"the signed provenance cannot be read: {exc}")], None
    if runtime is None:
        problems.append(
            Mismatch(
                None,
                "the signed provenance names the op modules only, not the image's layers and Python "
                "(signed by an earlier imagegen): rebuild the image to verify it with a key",
            )
        )
        return problems, None
    judgement = check_layers(image, runtime, signed_modules(document), documents.files, derived)
    problems += [Mismatch(f.op, f.problem) for f in judgement.problems]
    return problems, judgement


def check_image(
    image: str, public_key: Any = None, timeout: float = 300, derived: bool = False
) -> ProofCheck | None:
    """Check ``image``'s proof; None for an image without an SBOM when no key is given (an image
    built before images carried one).

    With ``public_key`` (``signing.load_public_key``'s), the signed statement is the root and
    everything is read from outside the image (``check_signed``): the image must be exactly the
    signed one, or with ``derived`` built on it, its additions listed as not covered. Without a
    key, the SBOM is compared with the op modules as the image's own Python reports them
    (``probe_image``): a check of consistency, not of trust, since the image answers it.
    """
    documents = read_documents(image)
    if SBOM.label not in documents.labels:
        if public_key is None:
            return None
        return ProofCheck(
            None, False, (Mismatch(None, f"{image} has no SBOM or provenance to check the key against"),)
        )
    problems = documents.problems()
    signed: bool | None = None
    signed_statement: bytes | None = None
    if public_key is not None:
        envelope = documents.files.get(SIGNATURE.filename)
        statement = documents.files.get(PROVENANCE.filename)
        if envelope is None or statement is None:
            problems.append(Mismatch(None, "the provenance is not signed (built without --sign-key)"))
            signed = False
        else:
            why = check_envelope(envelope, statement, public_key)
            signed = why is None
            if why is not None:
                problems.append(Mismatch(None, f"signature: {why}"))
            else:
                signed_statement = statement
    sbom_bytes = documents.files.get(SBOM.filename)
    judgement: Judgement | None = None
    if signed_statement is not None:
        found, judgement = check_signed(image, signed_statement, documents, derived)
        problems += found
    elif sbom_bytes is not None:
        try:
            document = json.loads(sbom_bytes)
        except ValueError as exc:
            problems.append(Mismatch(None, f"the SBOM is not JSON: {exc}"))
        else:
            facts = probe_image(image, timeout=timeout)
            problems += compare(document if isinstance(document, Mapping) else {}, facts)
    digest = documents.labels.get(SBOM.label)
    return ProofCheck(digest, signed, tuple(problems), judgement)


def proof_line(check: ProofCheck | None) -> str:
    """The proof's lines of ``imagegen verify``'s text output."""
    if check is None:
        return "SBOM: none in this image (built without one): not checked"
    if not check.ok:
        what = "SBOM" if check.signed is None else "proof"
        return f"{what}: MISMATCH: " + check.summary()
    judgement = check.judgement
    if judgement is None:
        return f"SBOM {check.sbom_digest}: every op module matches"
    line = f"SBOM {check.sbom_digest}: every op module matches; provenance signature verified"
    if not judgement.derived:
        return (
            f"{line}; this is exactly the signed image: its {judgement.signed_layers} signed layers, its "
            "proof layer and its settings, read from outside the image"
        )
    line += (
        f"\nderived from the signed image: its {judgement.signed_layers} signed layers are its first, in "
        "order and intact, and hold the op modules it runs"
    )
    added = judgement.added
    if judgement.layers or judgement.settings:
        line += (
            f"\nNOT covered by the signature ({len(judgement.layers)} layer(s) added; the deriver's to "
            f"sign): {_shown([a.what for a in added]) or 'no files'}"
        )
    if judgement.settings:
        line += "\nsettings NOT covered by the signature: " + "; ".join(a.what for a in judgement.settings)
    risky = judgement.risky
    if risky:
        line += (
            f"\nflagged, {len(risky)} that may run before a signed file (a warning list, not a complete one):"
        )
        line += "".join(f"\n  {a.what}: {a.risk}" for a in risky)
    return line


def _shown(items: list[str], most: int = 5) -> str:
    return ", ".join(items[:most]) + (f" and {len(items) - most} more" if len(items) > most else "")
