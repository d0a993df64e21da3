"""Attestations of a pushed image in the format cosign v3 writes and reads (pure).

cosign 3 stores an attestation as a Sigstore bundle (v0.3, ``application/vnd.dev.sigstore.bundle
.v0.3+json``; sigstore/cosign ``specs/BUNDLE_SPEC.md``) in an OCI referrer of the image manifest:
``artifactType`` and its one layer's media type the bundle's, config the empty descriptor, and
the annotations ``dev.sigstore.bundle.content=dsse-envelope`` and
``dev.sigstore.bundle.predicateType=<type>``. The bundle's ``dsseEnvelope`` holds an in-toto
statement whose subject is the pushed manifest (registry digest), signed like the provenance
(``imagegen.proof.signing``). Two are made per pushed manifest: the SLSA provenance (the sealed
statement's predicate) and the CycloneDX SBOM (predicate type ``https://cyclonedx.org/bom``).

Keyed signing only: no transparency log is reachable here, so ``verificationMaterial`` names the
public key (its key id, as ``publicKey.hint``) and ``tlogEntries`` is empty; a verifier is given
the key (``cosign verify-attestation --key``, with ``--insecure-ignore-tlog``). docs/imagegen.md
shows how a team with Rekor adds an entry.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from imagegen.proof.documents import json_object
from imagegen.proof.provenance import PREDICATE_TYPE, STATEMENT_TYPE

BUNDLE_MEDIA_TYPE = "application/vnd.dev.sigstore.bundle.v0.3+json"
CYCLONEDX_PREDICATE_TYPE = "https://cyclonedx.org/bom"
CONTENT_ANNOTATION = "dev.sigstore.bundle.content"
PREDICATE_ANNOTATION = "dev.sigstore.bundle.predicateType"
BUNDLE_FILENAME = "attestation.sigstore.json"


@dataclass(frozen=True)
class Attestation:
    """One statement about a pushed manifest, before it is signed."""

    predicate_type: str
    statement: bytes

    @property
    def annotations(self) -> dict[str, str]:
        return {CONTENT_ANNOTATION: "dsse-envelope", PREDICATE_ANNOTATION: self.predicate_type}


def statement(name: str, digest: str, predicate_type: str, predicate: Mapping[str, Any]) -> bytes:
    """An in-toto Statement v1 about the manifest ``digest`` ("sha256:...") of ``name``."""
    algorithm, _, value = digest.partition(":")
    document = {
        "_type": STATEMENT_TYPE,
        "subject": [{"name": name, "digest": {algorithm: value}}],
        "predicateType": predicate_type,
        "predicate": dict(predicate),
    }
    return (json.dumps(document, sort_keys=True, separators=(",", ":")) + "\n").encode()


def attestations(name: str, digest: str, provenance: bytes, sbom: bytes) -> tuple[Attestation, ...]:
    """The provenance's predicate and the SBOM, each as a statement about the pushed manifest.
    ValueError when a document is not the JSON object the seal made."""
    sealed = json_object(provenance)
    predicate = sealed.get("predicate")
    if not isinstance(predicate, Mapping):
        raise ValueError("the provenance has no predicate")
    return (
        Attestation(PREDICATE_TYPE, statement(name, digest, PREDICATE_TYPE, predicate)),
        Attestation(
            CYCLONEDX_PREDICATE_TYPE, statement(name, digest, CYCLONEDX_PREDICATE_TYPE, json_object(sbom))
        ),
    )


def bundle(envelope: bytes, keyid: str) -> bytes:
    """A Sigstore bundle v0.3 of a signed DSSE envelope (``Signer.envelope``'s JSON), keyed."""
    signed = json_object(envelope)
    document = {
        "mediaType": BUNDLE_MEDIA_TYPE,
        "verificationMaterial": {"publicKey": {"hint": keyid}, "tlogEntries": []},
        "dsseEnvelope": {
            "payload": signed["payload"],
            "payloadType": signed["payloadType"],
            "signatures": [{"sig": s["sig"], "keyid": s.get("keyid", "")} for s in signed["signatures"]],
        },
    }
    return (json.dumps(document, indent=2) + "\n").encode()


def bundle_statement(data: bytes) -> dict[str, Any]:
    """The statement a bundle's envelope carries (its signature is checked elsewhere); ValueError
    for anything that is not a DSSE bundle of an in-toto statement."""
    document = json_object(data)
    envelope = document.get("dsseEnvelope")
    if document.get("mediaType") != BUNDLE_MEDIA_TYPE or not isinstance(envelope, Mapping):
        raise ValueError("not a Sigstore bundle v0.3 of a DSSE envelope")
    try:
        payload = base64.b64decode(str(envelope.get("payload")), validate=True)
    except ValueError:
        raise ValueError("its envelope's payload is not base64") from None
    return json_object(payload)
