"""What cosign reads of a pushed image, read by code that is not imagegen's: cosign 3's bundles by
Sigstore's own schema (sigstore-protobuf-specs), the DSSE signature by `cryptography` over a PAE
built here from the DSSE spec, the statement by plain json and against in-toto's field list;
cosign 2's `.sig` / `.att` layers as cosign's source describes them; the referrers' time.
The real cosign 3 and 2 read them in tests/integration/test_cosign.py."""

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

from imagegen.oci import cosign_tags
from imagegen.oci.cosign_bundles import created
from imagegen.proof import documents as docs
from imagegen.proof.bundle import (
    BUNDLE_MEDIA_TYPE,
    COSIGN_SIGN_PREDICATE_TYPE,
    CYCLONEDX_PREDICATE_TYPE,
    PLATFORM_ANNOTATION,
    Subject,
    attestations,
    bundle,
    bundle_statement,
    signature,
)
from imagegen.proof.provenance import PREDICATE_TYPE
from imagegen.proof.signing import Signer
from imagegen.registry.manifest import DOCKER_MANIFEST, Descriptor, artifact_manifest

# sigstore-protobuf-specs 0.5's models use a validator form pydantic 2.12 deprecates (at import).
with warnings.catch_warnings():
    warnings.simplefilter("ignore", DeprecationWarning)
    from sigstore_protobuf_specs.dev.sigstore.bundle.v1 import Bundle

DIGEST = "sha256:" + "ab" * 32
INDEX_DIGEST = "sha256:" + "cd" * 32
NAME = "registry.internal/ml/cpu"
SUBJECTS = [Subject(NAME, DIGEST)]
# in-toto Statement v1's fields and a ResourceDescriptor's (in-toto/attestation protos), as JSON:
# sigstore-go reads a statement with protojson, which refuses a field the schema does not have.
STATEMENT_FIELDS = {"_type", "subject", "predicateType", "predicate"}
SUBJECT_FIELDS = {"name", "uri", "digest", "content", "downloadLocation", "mediaType", "annotations"}
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
    made = (signature(SUBJECTS[0]), *attestations(SUBJECTS, PROVENANCE, SBOM))
    assert [a.predicate_type for a in made] == [
        "https://sigstore.dev/cosign/sign/v1",
        PREDICATE_TYPE,
        CYCLONEDX_PREDICATE_TYPE,
    ]
    public = signer.private_key.public_key()
    for attestation in made:
        data = bundle(signer.envelope(attestation.statement), signer.keyid)
        parsed = Bundle.from_dict(json.loads(data))  # Sigstore's own schema of the bundle
        assert parsed.media_type == BUNDLE_MEDIA_TYPE
        # The key is named where sigstore-js looks it up (the hint) and nowhere else: a keyid on
        # the signature that is not the one sigstore-go derives makes cosign 3 skip it ("Found: 0").
        assert parsed.verification_material.public_key.hint == signer.keyid
        assert [set(s) for s in json.loads(data)["dsseEnvelope"]["signatures"]] == [{"sig"}]
        assert json.loads(data)["verificationMaterial"]["tlogEntries"] == []
        envelope = parsed.dsse_envelope
        assert envelope.payload_type == "application/vnd.in-toto+json"
        [one] = envelope.signatures
        assert one.keyid == ""
        public.verify(one.sig, _dsse_pae(envelope.payload_type, envelope.payload), ec.ECDSA(hashes.SHA256()))
        statement = json.loads(envelope.payload)
        assert set(statement) == STATEMENT_FIELDS and set(statement["subject"][0]) <= SUBJECT_FIELDS
        assert statement["_type"] == "https://in-toto.io/Statement/v1"
        assert statement["subject"] == [{"name": NAME, "digest": {"sha256": DIGEST.split(":")[1]}}]
        assert statement["predicateType"] == attestation.predicate_type
        assert attestation.annotations == {
            "dev.sigstore.bundle.content": "dsse-envelope",
            "dev.sigstore.bundle.predicateType": attestation.predicate_type,
        }
        assert bundle_statement(data) == statement
    # cosign sign's own statement (cmd/cosign/cli/sign signDigestBundle): an empty predicate.
    assert json.loads(made[0].statement)["predicate"] == {}
    assert json.loads(made[1].statement)["predicate"] == json.loads(PROVENANCE)["predicate"]
    assert json.loads(made[2].statement)["predicate"] == json.loads(SBOM)
    assert COSIGN_SIGN_PREDICATE_TYPE == "https://sigstore.dev/cosign/sign/v1"


def test_a_bundle_signed_by_another_key_or_altered_does_not_verify(signer: Signer, tmp_path: Path) -> None:
    attestation = attestations(SUBJECTS, PROVENANCE, SBOM)[0]
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
    attestation = attestations(SUBJECTS, PROVENANCE, SBOM)[1]
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


def test_the_image_envelope_keeps_its_keyid_and_the_bundle_drops_it(signer: Signer) -> None:
    # The envelope sealed in the image is imagegen's (its keyid is a label users check); the copy
    # in a bundle is sigstore-go's form, the same signature over the same payload.
    envelope = signer.envelope(signature(SUBJECTS[0]).statement)
    [sealed] = json.loads(envelope)["signatures"]
    assert sealed["keyid"] == signer.keyid
    [carried] = json.loads(bundle(envelope, signer.keyid))["dsseEnvelope"]["signatures"]
    assert carried == {"sig": sealed["sig"]}


def test_an_index_statement_names_the_index_and_the_platforms_manifest() -> None:
    subjects = [Subject(NAME, INDEX_DIGEST), Subject(NAME, DIGEST, {PLATFORM_ANNOTATION: "linux/arm64"})]
    provenance, sbom = (json.loads(a.statement) for a in attestations(subjects, PROVENANCE, SBOM))
    for statement in (provenance, sbom):
        # The index first: cosign names the first subject's digest in what it prints.
        assert statement["subject"] == [
            {"name": NAME, "digest": {"sha256": "cd" * 32}},
            {
                "name": NAME,
                "digest": {"sha256": "ab" * 32},
                "annotations": {"imagegen:platform": "linux/arm64"},
            },
        ]
        assert set(statement) == STATEMENT_FIELDS
        assert all(set(s) <= SUBJECT_FIELDS for s in statement["subject"])
    with pytest.raises(ValueError, match="not a digest"):
        Subject(NAME, "ab" * 32).to_json()
    with pytest.raises(ValueError, match="no predicate"):
        attestations(SUBJECTS, b'{"_type": "x"}', SBOM)


def test_cosign2_signature_layer_is_a_simple_signing_payload_signed(signer: Signer) -> None:
    layer = cosign_tags.signature_layer(NAME, DIGEST, signer)
    # cosign's payload.SimpleContainerImage, as `cosign sign` (without bundles) writes it.
    assert json.loads(layer.data) == {
        "critical": {
            "identity": {"docker-reference": NAME},
            "image": {"docker-manifest-digest": DIGEST},
            "type": "cosign container image signature",
        },
        "optional": None,
    }
    assert layer.media_type == "application/vnd.dev.cosign.simplesigning.v1+json"
    signed = base64.b64decode(layer.annotations["dev.cosignproject.cosign/signature"])
    # cosign verifies the signature over the payload's bytes (ECDSA with SHA-256 for P-256).
    signer.private_key.public_key().verify(signed, layer.data, ec.ECDSA(hashes.SHA256()))
    assert cosign_tags.tag(DIGEST, "sig") == "sha256-" + "ab" * 32 + ".sig"


def test_cosign2_attestation_layer_is_a_dsse_envelope_with_cosigns_annotations(signer: Signer) -> None:
    attestation = attestations(SUBJECTS, PROVENANCE, SBOM)[0]
    layer = cosign_tags.attestation_layer(attestation, signer)
    assert layer.media_type == "application/vnd.dsse.envelope.v1+json"
    assert layer.annotations == {"dev.cosignproject.cosign/signature": "", "predicateType": PREDICATE_TYPE}
    envelope = json.loads(layer.data)
    [one] = envelope["signatures"]
    assert one["keyid"] == ""  # as cosign writes it: a keyid of ours would not match its own
    payload = base64.b64decode(envelope["payload"])
    assert payload == attestation.statement
    signer.private_key.public_key().verify(
        base64.b64decode(one["sig"]), _dsse_pae(envelope["payloadType"], payload), ec.ECDSA(hashes.SHA256())
    )


def test_a_cosign2_tag_lists_its_layers_in_its_config(signer: Signer) -> None:
    layers = [
        cosign_tags.signature_layer(NAME, DIGEST, signer).descriptor,
        cosign_tags.signature_layer(NAME, DIGEST, signer).descriptor,
    ]
    manifest, config = cosign_tags.signature_manifest(layers)
    document, image = json.loads(manifest), json.loads(config)
    assert document["mediaType"] == "application/vnd.oci.image.manifest.v1+json"
    assert document["config"]["mediaType"] == "application/vnd.oci.image.config.v1+json"
    assert document["config"]["digest"] == "sha256:" + hashlib.sha256(config).hexdigest()
    assert [layer["digest"] for layer in document["layers"]] == image["rootfs"]["diff_ids"]
    assert len(image["history"]) == 2
    with pytest.raises(ValueError):
        cosign_tags.signature_manifest([])


@pytest.mark.parametrize(
    ("finished", "timestamp", "expected"),
    [
        ("2026-11-29T06:13:42.123456Z", "2026-11-29T05:00:00+00:00", "2026-11-29T06:13:42Z"),
        ("2026-11-29T08:13:42+02:00", None, "2026-11-29T06:13:42Z"),
        (None, "2026-11-29T05:00:00.5+00:00", "2026-11-29T05:00:00Z"),
        ("not a time", "2026-11-29T05:00:00Z", "2026-11-29T05:00:00Z"),
        ("2026-11-29T06:13:42", None, None),  # no zone: not a moment
        (None, None, None),
    ],
)
def test_the_referrers_time_is_the_builds(
    finished: str | None, timestamp: str | None, expected: str | None
) -> None:
    provenance = {"predicate": {"runDetails": {"metadata": {"finishedOn": finished}}}} if finished else {}
    sbom = {"metadata": {"timestamp": timestamp}} if timestamp else {}
    proof = docs.ProofDocuments(
        docs.Document(docs.SBOM, json.dumps(sbom).encode()),
        docs.Document(docs.PROVENANCE, json.dumps(provenance).encode()),
    )
    assert created(proof) == expected
