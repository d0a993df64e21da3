"""The proof documents an image carries: their file names, media types, in-image path and labels.

Kept in one place so that whatever stores or sends them (the image's own files, the copies beside
the build report, later an OCI referrer per document) uses the same bytes and the same media type.
The documents' bytes are made once (``imagegen.proof.sbom``, ``imagegen.proof.provenance``,
``imagegen.proof.signing``) and never re-serialized: their digests are over exactly these bytes.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

# Where the documents live inside the image: root-owned, readable by every user (0644 files).
PROOF_DIR = "/opt/imagegen/proof"

Kind = Literal["sbom", "provenance", "signature"]


@dataclass(frozen=True)
class DocumentType:
    kind: Kind
    filename: str
    media_type: str
    label: str  # the image label that holds the document's digest


SBOM = DocumentType("sbom", "sbom.cdx.json", "application/vnd.cyclonedx+json", "io.imagegen.sbom.digest")
PROVENANCE = DocumentType(
    "provenance", "provenance.intoto.json", "application/vnd.in-toto+json", "io.imagegen.provenance.digest"
)
# The DSSE envelope of the provenance statement, signed (--sign-key); only in signed images.
SIGNATURE = DocumentType(
    "signature",
    "provenance.dsse.json",
    "application/vnd.dsse.envelope.v1+json",
    "io.imagegen.provenance.signature.digest",
)
DOCUMENT_TYPES = (SBOM, PROVENANCE, SIGNATURE)
# The key id that signed the provenance: sha256 of the raw Ed25519 public key, or of a P-256 key's
# DER SubjectPublicKeyInfo (imagegen.proof.signing.keyid).
KEYID_LABEL = "io.imagegen.provenance.keyid"


def sha256_digest(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


def digest_problem(
    data: bytes | None, named: str | None, *, unnamed: str, missing: str, changed: Callable[[str], str]
) -> str | None:
    """What is wrong between a document and the digest something names for it, in the caller's
    words (``changed`` is given the document's own digest); None when they agree."""
    if named is None:
        return unnamed
    if data is None:
        return missing
    actual = sha256_digest(data)
    return None if actual == named else changed(actual)


@dataclass(frozen=True)
class Document:
    """One document's exact bytes and its type."""

    type: DocumentType
    data: bytes

    @property
    def digest(self) -> str:
        return sha256_digest(self.data)

    @property
    def image_path(self) -> str:
        return f"{PROOF_DIR}/{self.type.filename}"

    def to_json(self) -> dict[str, str]:
        return {"media_type": self.type.media_type, "digest": self.digest, "image_path": self.image_path}


@dataclass(frozen=True)
class ProofDocuments:
    """The SBOM and the provenance statement of one image, and the statement's signature if any."""

    sbom: Document
    provenance: Document
    signature: Document | None = None
    keyid: str | None = None

    def all(self) -> tuple[Document, ...]:
        return (self.sbom, self.provenance, *((self.signature,) if self.signature else ()))

    def labels(self) -> dict[str, str]:
        labels = {doc.type.label: doc.digest for doc in self.all()}
        if self.keyid:
            labels[KEYID_LABEL] = self.keyid
        return labels
