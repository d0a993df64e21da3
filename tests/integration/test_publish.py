"""A pushed image takes its SBOM and provenance along: OCI referrers of its manifest in the
registry, found by the image's digest and byte for byte the files the image holds."""

from __future__ import annotations

import io
import tarfile
from pathlib import Path
from typing import Any

import pytest

from imagegen.errors import BuildFailedError
from imagegen.oci.manifest import DOCKER_MANIFEST, Descriptor
from imagegen.oci.referrers import Document, attach
from imagegen.oci.registry import RegistryClient
from imagegen.publish import attach_proof
from tests.integration import oci_reader
from tests.integration.conftest import build_args, imagegen
from tests.integration.derived import derive

pytestmark = pytest.mark.docker

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
