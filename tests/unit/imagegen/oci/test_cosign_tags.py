"""Signing a pushed manifest for cosign, against an in-memory registry: cosign 2's `.sig` / `.att`
tags keep another signer's layers and are left as they are when they hold imagegen's own, pushing the
same image again reuses its cosign 3 bundles rather than adding three more referrers, and an index
is signed with each platform's statements."""

from __future__ import annotations

import json
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec

from imagegen.errors import BuildFailedError
from imagegen.oci import cosign_tags, publish
from imagegen.oci.cosign_bundles import bundles, statements
from imagegen.proof import documents as docs
from imagegen.proof.bundle import Subject, bundle_statement
from imagegen.proof.signing import Signer
from imagegen.registry.distribution import parse_reference
from imagegen.registry.manifest import (
    OCI_INDEX,
    OCI_MANIFEST,
    Descriptor,
    encode,
    referrers_tag,
    sha256_digest,
)
from imagegen.registry.referrers import attach, fetch_document, referrers

REPOSITORY = "ml/cpu"
NAME = f"registry.internal/{REPOSITORY}"
IMAGE = encode({"schemaVersion": 2, "mediaType": OCI_MANIFEST, "layers": []})
SUBJECT = Descriptor.of(OCI_MANIFEST, IMAGE)
PROOF = docs.ProofDocuments(
    docs.Document(docs.SBOM, json.dumps({"bomFormat": "CycloneDX", "components": []}).encode()),
    docs.Document(docs.PROVENANCE, json.dumps({"predicate": {"buildDefinition": {}}}).encode()),
)


@dataclass
class _Answer:
    headers: dict[str, str] = field(default_factory=dict)


class _Registry:
    """What imagegen's RegistryClient offers, in memory, with no referrers API (as distribution 2.8)."""

    registry = "registry.internal"

    def __init__(self) -> None:
        self.manifests: dict[str, bytes] = {}
        self.blobs: dict[str, bytes] = {}

    def get_manifest(self, repository: str, ref: str, accept: Any = None) -> bytes | None:
        return self.manifests.get(ref)

    def put_manifest(self, repository: str, ref: str, body: bytes, media_type: str) -> _Answer:
        self.manifests[ref] = self.manifests[sha256_digest(body)] = body
        return _Answer()

    def put_blob(self, repository: str, data: bytes) -> str:
        self.blobs[sha256_digest(data)] = data
        return sha256_digest(data)

    def get_blob(self, repository: str, digest: str) -> bytes:
        return self.blobs[digest]

    def referrers(self, repository: str, digest: str, artifact_type: str | None = None) -> None:
        return None

    def malformed(self, what: str, problem: str) -> BuildFailedError:
        return BuildFailedError(f"{what} is {problem}", hint="ask whoever runs the registry")


def _signer(path: Path) -> Signer:
    path.write_bytes(
        ec.generate_private_key(ec.SECP256R1()).private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )
    )
    return Signer.from_file(path)


def _layers(registry: _Registry, suffix: str) -> list[dict[str, Any]]:
    layers: list[dict[str, Any]] = json.loads(registry.manifests[cosign_tags.tag(SUBJECT.digest, suffix)])[
        "layers"
    ]
    return layers


def test_the_legacy_tags_keep_other_signers_and_our_own_earlier_ones(tmp_path: Path) -> None:
    ours, theirs = _signer(tmp_path / "ours.pem"), _signer(tmp_path / "theirs.pem")
    registry: Any = _Registry()
    signed = statements([Subject(NAME, SUBJECT.digest)], PROOF)
    cosign_tags.put_legacy(registry, REPOSITORY, NAME, SUBJECT.digest, signed, theirs)
    sig, att = cosign_tags.put_legacy(registry, REPOSITORY, NAME, SUBJECT.digest, signed, ours)
    before = dict(registry.manifests)
    # Pushed again: our signatures are there already, so neither tag changes.
    assert cosign_tags.put_legacy(registry, REPOSITORY, NAME, SUBJECT.digest, signed, ours) == (sig, att)
    assert registry.manifests == before
    assert (sig, att) == (cosign_tags.tag(SUBJECT.digest, "sig"), cosign_tags.tag(SUBJECT.digest, "att"))
    # Another key's signature of the same payload stays beside ours; ours is there once.
    assert len(_layers(registry, "sig")) == 2
    assert len({layer["digest"] for layer in _layers(registry, "sig")}) == 1  # one payload
    # The attestations: the provenance and the SBOM, each once per key (cosign's own signature
    # statement is the .sig tag's payload, not an attestation).
    assert sorted(layer["annotations"]["predicateType"] for layer in _layers(registry, "att")) == [
        "https://cyclonedx.org/bom",
        "https://cyclonedx.org/bom",
        "https://slsa.dev/provenance/v1",
        "https://slsa.dev/provenance/v1",
    ]
    config = json.loads(registry.blobs[json.loads(registry.manifests[att])["config"]["digest"]])
    assert config["rootfs"]["diff_ids"] == [layer["digest"] for layer in _layers(registry, "att")]


def test_a_legacy_tag_another_tool_wrote_otherwise_is_one_clear_error(tmp_path: Path) -> None:
    registry: Any = _Registry()
    registry.manifests[cosign_tags.tag(SUBJECT.digest, "sig")] = b'{"manifests": []}'
    with pytest.raises(
        BuildFailedError, match=r"signature tag ml/cpu:sha256-.*\.sig is not an image manifest"
    ):
        cosign_tags.put_legacy(registry, REPOSITORY, NAME, SUBJECT.digest, (), _signer(tmp_path / "k.pem"))


def test_pushing_again_reuses_the_bundles(tmp_path: Path) -> None:
    signer = _signer(tmp_path / "key.pem")
    registry: Any = _Registry()
    signed = statements([Subject(NAME, SUBJECT.digest)], PROOF)
    first = attach(
        registry, REPOSITORY, SUBJECT, bundles(registry, REPOSITORY, SUBJECT.digest, signed, signer)
    )
    again = attach(
        registry, REPOSITORY, SUBJECT, bundles(registry, REPOSITORY, SUBJECT.digest, signed, signer)
    )
    assert first.referrers == again.referrers and len(first.referrers) == 3
    assert len(referrers(registry, REPOSITORY, SUBJECT.digest)) == 3
    # Another key's bundles are not ours to reuse: its push adds its own three.
    other = _signer(tmp_path / "other.pem")
    attach(registry, REPOSITORY, SUBJECT, bundles(registry, REPOSITORY, SUBJECT.digest, signed, other))
    assert len(referrers(registry, REPOSITORY, SUBJECT.digest)) == 6


def test_a_bundle_written_with_a_keyid_is_not_reused(tmp_path: Path) -> None:
    # An older imagegen wrote the key id on the signature, which cosign 3 refuses: a push adds a
    # bundle cosign reads instead of keeping only that one.
    signer = _signer(tmp_path / "key.pem")
    registry: Any = _Registry()
    signed = statements([Subject(NAME, SUBJECT.digest)], PROOF)[:1]
    [document] = bundles(registry, REPOSITORY, SUBJECT.digest, signed, signer)
    old = json.loads(document.data)
    old["dsseEnvelope"]["signatures"][0]["keyid"] = signer.keyid
    labelled = json.dumps(old, indent=2).encode() + b"\n"
    attach(registry, REPOSITORY, SUBJECT, [replace(document, data=labelled)])
    [fresh] = bundles(registry, REPOSITORY, SUBJECT.digest, signed, signer)
    assert "keyid" not in json.loads(fresh.data)["dsseEnvelope"]["signatures"][0]
    attach(registry, REPOSITORY, SUBJECT, [fresh])
    index = json.loads(registry.manifests[referrers_tag(SUBJECT.digest)])
    assert index["mediaType"] == OCI_INDEX and len(index["manifests"]) == 2


def test_the_index_is_signed_with_each_platforms_statements(tmp_path: Path) -> None:
    signer = _signer(tmp_path / "key.pem")
    registry: Any = _Registry()
    arm64 = Descriptor.of(OCI_MANIFEST, IMAGE + b" ")
    platforms = [
        ("linux/amd64", publish.Published(f"{NAME}:1-amd64", SUBJECT, None, PROOF)),
        ("linux/arm64", publish.Published(f"{NAME}:1-arm64", arm64, None, PROOF)),
        ("linux/s390x", publish.Published(f"{NAME}:1-s390x", SUBJECT, None, None)),  # no proof
    ]
    index = Descriptor.of(OCI_INDEX, b'{"manifests": []}')
    attached = publish.sign_index(registry, parse_reference(f"{NAME}:1"), index, platforms, signer)
    found = {}
    for referrer in attached.referrers:
        _, data = fetch_document(registry, REPOSITORY, referrer)
        statement = bundle_statement(data)
        found.setdefault(statement["predicateType"], []).append(statement["subject"])
    index_subject = {"name": NAME, "digest": {"sha256": index.digest.split(":")[1]}}
    assert found["https://sigstore.dev/cosign/sign/v1"] == [[index_subject]]
    for kind in ("https://slsa.dev/provenance/v1", "https://cyclonedx.org/bom"):
        assert found[kind] == [
            [index_subject, {**_subject(SUBJECT), "annotations": {"imagegen:platform": "linux/amd64"}}],
            [index_subject, {**_subject(arm64), "annotations": {"imagegen:platform": "linux/arm64"}}],
        ]
    # cosign 2's tags of the index digest: its signature and the four attestations.
    assert json.loads(registry.manifests[cosign_tags.tag(index.digest, "sig")])["layers"][0]["mediaType"] == (
        cosign_tags.SIMPLE_SIGNING_MEDIA_TYPE
    )
    assert len(json.loads(registry.manifests[cosign_tags.tag(index.digest, "att")])["layers"]) == 4


def _subject(descriptor: Descriptor) -> dict[str, Any]:
    return {"name": NAME, "digest": {"sha256": descriptor.digest.split(":")[1]}}
