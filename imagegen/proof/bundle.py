"""What cosign reads of a pushed image, made as bytes (pure): the in-toto statements about the
pushed manifest and the Sigstore bundles that carry them signed.

cosign 3 stores a signature or an attestation as a Sigstore bundle (v0.3,
``application/vnd.dev.sigstore.bundle.v0.3+json``; sigstore/cosign ``specs/BUNDLE_SPEC.md``) in an
OCI referrer of the image manifest: ``artifactType`` and its one layer's media type the bundle's,
config the empty descriptor, and the annotations ``dev.sigstore.bundle.content=dsse-envelope`` and
``dev.sigstore.bundle.predicateType=<type>`` (``Attestation.annotations``). The bundle's
``dsseEnvelope`` holds an in-toto statement whose subject is the pushed manifest (its registry
digest), signed like the provenance (``imagegen.proof.signing``). Three are made per pushed
manifest:

- the signature ``cosign sign`` makes (``signature``): predicate type
  ``https://sigstore.dev/cosign/sign/v1``, an empty predicate (cosign's ``signDigestBundle``), what
  ``cosign verify`` reads;
- the SLSA provenance (the sealed statement's predicate) and the CycloneDX SBOM (predicate type
  ``https://cyclonedx.org/bom``) (``attestations``), what ``cosign verify-attestation --type`` reads.

An image index gets its own (``imagegen.oci.publish.publish_index``): the signature about the
index, and each platform's provenance and SBOM as statements with two subjects, the index and the
platform's manifest (annotated ``imagegen:platform``): cosign resolves a tag to the index digest
and accepts a statement when any subject is that digest (sigstore-go's
``verifyEnvelopeWithArtifactDigests``).

Keyed signing only: no transparency log is reachable here, so ``verificationMaterial`` names the
public key (its key id, as ``publicKey.hint``, which sigstore-js looks the key up by) and
``tlogEntries`` is empty; a verifier is given the key (``cosign verify --key``, with
``--insecure-ignore-tlog``). The envelope's signature carries no ``keyid``, as sigstore-go writes
it: its DSSE verifier (go-securesystemslib ``dsse/verify.go``) derives its own id of the key it is
given and skips a signature whose non-empty ``keyid`` differs, so ours (a label imagegen's own
envelope keeps) would leave cosign "0 of 1" accepted signatures. docs/imagegen.md shows how a team
with Rekor adds an entry.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from imagegen.proof.provenance import PREDICATE_TYPE, STATEMENT_TYPE
from imagegen.registry.manifest import json_object

BUNDLE_MEDIA_TYPE = "application/vnd.dev.sigstore.bundle.v0.3+json"
CYCLONEDX_PREDICATE_TYPE = "https://cyclonedx.org/bom"
# cosign's `types.CosignSignPredicateType`: the statement `cosign sign` signs about an image.
COSIGN_SIGN_PREDICATE_TYPE = "https://sigstore.dev/cosign/sign/v1"
CONTENT_ANNOTATION = "dev.sigstore.bundle.content"
PREDICATE_ANNOTATION = "dev.sigstore.bundle.predicateType"
BUNDLE_FILENAME = "attestation.sigstore.json"
PLATFORM_ANNOTATION = "imagegen:platform"


@dataclass(frozen=True)
class Subject:
    """A statement's subject: a manifest ``digest`` ("sha256:...") in the repository ``name``."""

    name: str
    digest: str
    annotations: Mapping[str, str] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        algorithm, sep, value = self.digest.partition(":")
        if not sep or not algorithm or not value:
            raise ValueError(f"not a digest: {self.digest!r}")
        found: dict[str, Any] = {"name": self.name, "digest": {algorithm: value}}
        if self.annotations:
            found["annotations"] = dict(self.annotations)
        return found


@dataclass(frozen=True)
class Attestation:
    """One statement about a pushed manifest, before it is signed."""

    predicate_type: str
    statement: bytes

    @property
    def annotations(self) -> dict[str, str]:
        return {CONTENT_ANNOTATION: "dsse-envelope", PREDICATE_ANNOTATION: self.predicate_type}


def statement(subjects: Sequence[Subject], predicate_type: str, predicate: Mapping[str, Any]) -> bytes:
    """An in-toto Statement v1 about ``subjects``. Only the fields in-toto's protobuf schema has:
    sigstore-go reads the statement with protojson, which refuses any other field."""
    if not subjects:
        raise ValueError("a statement needs a subject")
    document = {
        "_type": STATEMENT_TYPE,
        "subject": [s.to_json() for s in subjects],
        "predicateType": predicate_type,
        "predicate": dict(predicate),
    }
    return (json.dumps(document, sort_keys=True, separators=(",", ":")) + "\n").encode()


def signature(subject: Subject) -> Attestation:
    """cosign's signature of a manifest: the statement ``cosign sign`` makes, with an empty predicate."""
    return Attestation(COSIGN_SIGN_PREDICATE_TYPE, statement([subject], COSIGN_SIGN_PREDICATE_TYPE, {}))


def attestations(subjects: Sequence[Subject], provenance: bytes, sbom: bytes) -> tuple[Attestation, ...]:
    """The provenance's predicate and the SBOM, each as a statement about ``subjects``.
    ValueError when a document is not the JSON object the seal made."""
    sealed = json_object(provenance)
    predicate = sealed.get("predicate")
    if not isinstance(predicate, Mapping):
        raise ValueError("the provenance has no predicate")
    return (
        Attestation(PREDICATE_TYPE, statement(subjects, PREDICATE_TYPE, predicate)),
        Attestation(
            CYCLONEDX_PREDICATE_TYPE, statement(subjects, CYCLONEDX_PREDICATE_TYPE, json_object(sbom))
        ),
    )


def unlabelled(envelope: bytes) -> dict[str, Any]:
    """A signed DSSE envelope (``Signer.envelope``'s JSON) with no ``keyid`` on its signatures:
    what sigstore-go and cosign's DSSE verifiers accept with any key id of their own."""
    signed = json_object(envelope)
    return {
        "payload": signed["payload"],
        "payloadType": signed["payloadType"],
        "signatures": [{"sig": s["sig"]} for s in signed["signatures"]],
    }


def bundle(envelope: bytes, keyid: str) -> bytes:
    """A Sigstore bundle v0.3 of a signed DSSE envelope (``Signer.envelope``'s JSON), keyed: the key
    named by ``keyid`` as the public key's hint, never on the envelope's signature."""
    document = {
        "mediaType": BUNDLE_MEDIA_TYPE,
        "verificationMaterial": {"publicKey": {"hint": keyid}, "tlogEntries": []},
        "dsseEnvelope": unlabelled(envelope),
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
