"""A pushed image takes its SBOM and provenance along: OCI referrers of its manifest in the
registry, found by the image's digest and byte for byte the files the image holds."""

from __future__ import annotations

import io
import json
import subprocess
import tarfile
import warnings
from pathlib import Path
from typing import Any

import pytest
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec

from imagegen.errors import BuildFailedError
from imagegen.oci.publish import attach_proof
from imagegen.registry.distribution import RegistryClient
from imagegen.registry.manifest import DOCKER_MANIFEST, Descriptor
from imagegen.registry.referrers import Document, attach
from tests.integration import oci_reader
from tests.integration.conftest import PUSHED_REPOSITORY, SignedImage, build_args, imagegen
from tests.integration.derived import derive
from tests.unit.imagegen.proof.test_sbom_scanners import scan

with warnings.catch_warnings():  # sigstore-protobuf-specs 0.5: a validator form pydantic 2.12 deprecates
    warnings.simplefilter("ignore", DeprecationWarning)
    from sigstore_protobuf_specs.dev.sigstore.bundle.v1 import Bundle

pytestmark = pytest.mark.docker

BUNDLE = "application/vnd.dev.sigstore.bundle.v0.3+json"
PROOF_FILES = {
    "application/vnd.cyclonedx+json": "sbom.cdx.json",
    "application/vnd.in-toto+json": "provenance.intoto.json",
}


def image_files(docker_client: Any, image: str) -> dict[str, bytes]:
    """The image's /opt/imagegen/proof files, copied out of a container that never starts."""
    container = docker_client.api.create_container(image, command=["true"])
    try:
        stream, _ = docker_client.api.get_archive(container["Id"], "/opt/imagegen/proof")
        archive = b"".join(stream)
    finally:
        docker_client.api.remove_container(container["Id"], force=True)
    found = {}
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        for member in tar.getmembers():
            handle = tar.extractfile(member) if member.isfile() else None
            if handle is not None:
                found[member.name.rsplit("/", 1)[-1]] = handle.read()
    return found


@pytest.mark.slow
def test_push_attaches_the_sbom_and_provenance_to_the_image_digest(
    cpu_image: dict[str, Any], local_registry: str, docker_client: Any
) -> None:
    repository = "imagegen-it/cpu"
    remote = f"{local_registry}/{repository}:proof"
    result = imagegen(*build_args(remote), "--push")
    assert result.returncode == 0, result.stderr[-3000:]
    summary = result.json()
    assert summary["pushed"] is True
    published = summary["published"]
    # The digest the report names is the manifest docker pushed and the tag resolves to.
    _, pushed = oci_reader.manifest(local_registry, repository, "proof")
    assert published["digest"] == oci_reader.digest(pushed)
    repo_digests = docker_client.api.inspect_image(remote)["RepoDigests"]
    assert f"{local_registry}/{repository}@{published['digest']}" in repo_digests
    # Debian's registry (distribution 2.8) has no referrers API: the fallback tag holds them.
    proof = published["proof"]
    assert proof["referrers_api"] is False
    assert proof["fallback_tag"] == "sha256-" + published["digest"].split(":", 1)[1]
    assert sorted(r["artifact_type"] for r in proof["referrers"]) == sorted(PROOF_FILES)
    # Fetched by the image digest alone, the documents are the image's own files, byte for byte.
    documents = oci_reader.documents_referring_to(local_registry, repository, published["digest"])
    files = image_files(docker_client, remote)
    assert set(documents) == set(PROOF_FILES)
    for media_type, name in PROOF_FILES.items():
        assert documents[media_type] == files[name], name
    # And they are the host copies the build wrote beside build.json.
    host = summary["proof"]["documents"]
    assert documents["application/vnd.cyclonedx+json"] == Path(host["sbom"]["path"]).read_bytes()
    docker_client.api.remove_image(remote)

    # imagegen sbom REGISTRY/NAME@DIGEST reads them from the registry, no image needed here.
    pushed_ref = f"{local_registry}/{repository}@{published['digest']}"
    for flag, name in (("--json", "sbom.cdx.json"), ("--provenance", "provenance.intoto.json")):
        read = imagegen("sbom", pushed_ref, flag)
        assert read.returncode == 0, read.stderr[-2000:]
        assert read.stdout.encode() == files[name], name
    unsigned = imagegen("sbom", pushed_ref, "--signature")
    assert unsigned.returncode == 2 and "no signature attached" in unsigned.stderr
    # A newer SBOM attached by someone else is not the one the image's label names: refused.
    with RegistryClient(local_registry) as client:
        subject = Descriptor.of(DOCKER_MANIFEST, pushed)
        attach(
            client, repository, subject, [Document(b"{}", "application/vnd.cyclonedx+json", "sbom.cdx.json")]
        )
    forged = imagegen("sbom", pushed_ref, "--json")
    assert forged.returncode == 1 and "label says" in forged.json()["error"]["message"], forged.stdout


def test_a_proof_changed_after_the_build_is_not_attached(
    cpu_image: dict[str, Any], docker_client: Any
) -> None:
    # publish() without the build's documents (imagegen bake's pushes) reads them from the image:
    # one whose SBOM no longer matches its label is refused before anything reaches a registry.
    tag = "127.0.0.1:9/imagegen-it/tampered:sbom"
    derive(docker_client, tag, cpu_image["tag"], {"/opt/imagegen/proof/sbom.cdx.json": b"{}"}, {})
    try:
        with pytest.raises(BuildFailedError, match=r"sbom\.cdx\.json was changed after the build"):
            attach_proof(tag)
    finally:
        docker_client.api.remove_image(tag, force=True)


def test_a_p256_signed_push_carries_cosigns_bundles_and_a_cyclonedx_referrer(
    pushed_signed_image: SignedImage, local_registry: str, tmp_path: Path
) -> None:
    # The session's push signed with the key type cosign makes by default (conftest's p256_keys).
    repository, remote = PUSHED_REPOSITORY, pushed_signed_image.tag
    public = pushed_signed_image.keys.public
    digest = pushed_signed_image.summary["published"]["digest"]
    # Read back with nothing of imagegen's: the registry through urllib, the referrers by the tag schema.
    _, index = oci_reader.manifest(local_registry, repository, "sha256-" + digest.split(":", 1)[1])
    artifacts = []
    for entry in json.loads(index)["manifests"]:
        _, data = oci_reader.manifest(local_registry, repository, entry["digest"])
        artifact = json.loads(data)
        assert artifact["subject"]["digest"] == digest and entry["artifactType"] == artifact["artifactType"]
        assert artifact["config"]["mediaType"] == "application/vnd.oci.empty.v1+json"
        [layer] = artifact["layers"]
        artifacts.append((artifact, layer, oci_reader.blob(local_registry, repository, layer["digest"])))
    bundles = [a for a in artifacts if a[0]["artifactType"] == BUNDLE]
    # cosign's own signature statement (what `cosign verify` reads) and the two attestations; the
    # real cosign reads them in tests/integration/test_cosign.py.
    assert sorted(a[0]["annotations"]["dev.sigstore.bundle.predicateType"] for a in bundles) == [
        "https://cyclonedx.org/bom",
        "https://sigstore.dev/cosign/sign/v1",
        "https://slsa.dev/provenance/v1",
    ]
    verifier = serialization.load_pem_public_key(public.read_bytes())
    assert isinstance(verifier, ec.EllipticCurvePublicKey)
    for artifact, layer, data in bundles:
        assert (
            layer["mediaType"] == BUNDLE
            and artifact["annotations"]["dev.sigstore.bundle.content"] == "dsse-envelope"
        )
        # The build's time, not the push's: the same referrers when the image is pushed again.
        assert artifact["annotations"]["org.opencontainers.image.created"].endswith("Z")
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)
            parsed = Bundle.from_dict(json.loads(data))  # Sigstore's schema of a bundle
        envelope = parsed.dsse_envelope
        pae = b" ".join(
            [
                b"DSSEv1",
                b"%d" % len(envelope.payload_type),
                envelope.payload_type.encode(),
                b"%d" % len(envelope.payload),
                envelope.payload,
            ]
        )
        verifier.verify(envelope.signatures[0].sig, pae, ec.ECDSA(hashes.SHA256()))  # raises if not
        statement = json.loads(envelope.payload)
        assert statement["subject"] == [
            {"name": f"{local_registry}/{repository}", "digest": {"sha256": digest.split(":", 1)[1]}}
        ]
        assert statement["predicateType"] == artifact["annotations"]["dev.sigstore.bundle.predicateType"]
    # The plain CycloneDX referrer trivy image --sbom-sources oci looks for, and Trivy reads it whole.
    [(_, sbom_layer, sbom)] = [
        a for a in artifacts if a[0]["artifactType"] == "application/vnd.cyclonedx+json"
    ]
    assert sbom_layer["mediaType"] == "application/vnd.cyclonedx+json"
    report = scan(tmp_path, sbom)
    assert report["Metadata"]["OS"]["Family"] == "debian"
    found = [p for r in report.get("Results") or [] for p in r.get("Packages") or []]
    assert len(found) == len([c for c in json.loads(sbom)["components"] if c.get("purl")])
    # The old referrers stay for readers of the previous format; verify --key takes the P-256 key.
    assert {"application/vnd.in-toto+json", "application/vnd.dsse.envelope.v1+json"} <= {
        a[0]["artifactType"] for a in artifacts
    }
    verified = imagegen("verify", remote, "--key", str(public))
    assert verified.returncode == 0, verified.stderr[-2000:]
    other = tmp_path / "other.pem"
    subprocess.run(["openssl", "genpkey", "-algorithm", "ed25519", "-out", str(other)], check=True)
    refused = imagegen("verify", remote, "--key", str(other))
    assert refused.returncode == 1 and "no signature verifies" in refused.stderr
