"""cosign v3's attestation bundles of a pushed image, read by code that is not imagegen's: the
bundle by Sigstore's own schema (sigstore-protobuf-specs), the DSSE signature by `cryptography`
over a PAE built here from the DSSE spec, the statement by plain json."""

from __future__ import annotations

import base64
import hashlib
import json
import warnings
from pathlib import Path

import pytest
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec

from imagegen.oci.manifest import DOCKER_MANIFEST, Descriptor, artifact_manifest
from imagegen.proof.bundle import (
    BUNDLE_MEDIA_TYPE,
    CYCLONEDX_PREDICATE_TYPE,
    attestations,
    bundle,
    bundle_statement,
)
from imagegen.proof.provenance import PREDICATE_TYPE
from imagegen.proof.signing import Signer

# sigstore-protobuf-specs 0.5's models use a validator form pydantic 2.12 deprecates (at import).
with warnings.catch_warnings():
    warnings.simplefilter("ignore", DeprecationWarning)
    from sigstore_protobuf_specs.dev.sigstore.bundle.v1 import Bundle

DIGEST = "sha256:" + "ab" * 32
NAME = "registry.internal/ml/cpu"
PROVENANCE = json.dumps(
    {"_type": "https://in-toto.io/Statement/v1", "predicate": {"buildDefinition": {"buildType": "x"}}}
).encode()
SBOM = json.dumps({"bomFormat": "CycloneDX", "specVersion": "1.6", "components": []}).encode()


@pytest.fixture
def signer(tmp_path: Path) -> Signer:
    key = ec.generate_private_key(ec.SECP256R1())
    path = tmp_path / "key.pem"
    path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )
    )
    return Signer.from_file(path)


def _dsse_pae(payload_type: str, payload: bytes) -> bytes:
    # DSSE v1: "DSSEv1" SP LEN(type) SP type SP LEN(body) SP body, lengths in ASCII decimal.
    return b" ".join(
        [
            b"DSSEv1",
            str(len(payload_type)).encode(),
            payload_type.encode(),
            str(len(payload)).encode(),
            payload,
        ]
    )


def test_each_attestation_is_a_bundle_cosign_reads(signer: Signer) -> None:
    made = attestations(NAME, DIGEST, PROVENANCE, SBOM)
    assert [a.predicate_type for a in made] == [PREDICATE_TYPE, CYCLONEDX_PREDICATE_TYPE]
    public = signer.private_key.public_key()
    for attestation in made:
        data = bundle(signer.envelope(attestation.statement), signer.keyid)
        parsed = Bundle.from_dict(json.loads(data))  # Sigstore's own schema of the bundle
        assert parsed.media_type == BUNDLE_MEDIA_TYPE
        assert parsed.verification_material.public_key.hint == signer.keyid
        envelope = parsed.dsse_envelope
        assert envelope.payload_type == "application/vnd.in-toto+json"
        [signature] = envelope.signatures
        public.verify(
            signature.sig, _dsse_pae(envelope.payload_type, envelope.payload), ec.ECDSA(hashes.SHA256())
        )
        statement = json.loads(envelope.payload)
        assert statement["_type"] == "https://in-toto.io/Statement/v1"
        assert statement["subject"] == [{"name": NAME, "digest": {"sha256": DIGEST.split(":")[1]}}]
        assert statement["predicateType"] == attestation.predicate_type
        assert attestation.annotations == {
            "dev.sigstore.bundle.content": "dsse-envelope",
            "dev.sigstore.bundle.predicateType": attestation.predicate_type,
        }
        assert bundle_statement(data) == statement
    assert json.loads(made[0].statement)["predicate"] == json.loads(PROVENANCE)["predicate"]
    assert json.loads(made[1].statement)["predicate"] == json.loads(SBOM)


def test_a_bundle_signed_by_another_key_or_altered_does_not_verify(signer: Signer, tmp_path: Path) -> None:
    attestation = attestations(NAME, DIGEST, PROVENANCE, SBOM)[0]
    data = json.loads(bundle(signer.envelope(attestation.statement), signer.keyid))
    altered = json.loads(attestation.statement)
    altered["subject"][0]["digest"]["sha256"] = "cd" * 32
    data["dsseEnvelope"]["payload"] = base64.b64encode(json.dumps(altered).encode()).decode()
    parsed = Bundle.from_dict(data)
    with pytest.raises(InvalidSignature):
        signer.private_key.public_key().verify(
            parsed.dsse_envelope.signatures[0].sig,
            _dsse_pae(parsed.dsse_envelope.payload_type, parsed.dsse_envelope.payload),
            ec.ECDSA(hashes.SHA256()),
        )
    with pytest.raises(ValueError, match="not a Sigstore bundle"):
        bundle_statement(b'{"mediaType": "application/vnd.dsse.envelope.v1+json"}')


def test_the_referrer_carries_cosigns_annotations(signer: Signer) -> None:
    attestation = attestations(NAME, DIGEST, PROVENANCE, SBOM)[1]
    data = bundle(signer.envelope(attestation.statement), signer.keyid)
    subject = Descriptor(DOCKER_MANIFEST, DIGEST, 1234)
    manifest = json.loads(
        artifact_manifest(data, BUNDLE_MEDIA_TYPE, subject, annotations=attestation.annotations).manifest
    )
    assert manifest["artifactType"] == BUNDLE_MEDIA_TYPE
    [layer] = manifest["layers"]
    assert (
        layer["mediaType"] == BUNDLE_MEDIA_TYPE
        and layer["digest"] == "sha256:" + hashlib.sha256(data).hexdigest()
    )
    assert manifest["config"] == {
        "mediaType": "application/vnd.oci.empty.v1+json",
        "digest": "sha256:44136fa355b3678a1146ad16f7e8649e94fb4fc21fe77e8310c060f61caaff8a",
        "size": 2,
    }
    assert manifest["subject"]["digest"] == DIGEST
    assert manifest["annotations"]["dev.sigstore.bundle.predicateType"] == CYCLONEDX_PREDICATE_TYPE
    assert manifest["annotations"]["dev.sigstore.bundle.content"] == "dsse-envelope"
