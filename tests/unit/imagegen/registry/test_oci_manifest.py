"""The OCI documents imagegen writes, checked field by field against the specs' requirements
(image-spec 1.1 manifest, index, descriptor, artifact guidance; distribution-spec 1.1 referrers
tag schema), the registry reference and auth-header parsing, and credentials from docker's config."""

from __future__ import annotations

import base64
import hashlib
import json
from pathlib import Path

import pytest

from imagegen.errors import BadInputError
from imagegen.oci.pulled_proof import is_registry_digest
from imagegen.registry import auth
from imagegen.registry.distribution import Reference, base_url, parse_reference
from imagegen.registry.manifest import (
    DOCKER_MANIFEST,
    OCI_INDEX,
    OCI_MANIFEST,
    Descriptor,
    artifact_manifest,
    image_index,
    index_manifests,
    oci_platform,
    referrers_index,
    referrers_tag,
)

IMAGE = b'{"schemaVersion":2,"mediaType":"application/vnd.docker.distribution.manifest.v2+json"}'
SUBJECT = Descriptor(DOCKER_MANIFEST, "sha256:" + hashlib.sha256(IMAGE).hexdigest(), len(IMAGE))
SBOM = b'{"bomFormat": "CycloneDX", "specVersion": "1.6"}'


def _descriptor_ok(d: dict[str, object], data: bytes | None = None) -> None:
    # image-spec descriptor.md: mediaType, digest and size are REQUIRED.
    assert isinstance(d["mediaType"], str) and isinstance(d["size"], int)
    assert isinstance(d["digest"], str) and d["digest"].startswith("sha256:")
    if data is not None:
        assert d["digest"] == "sha256:" + hashlib.sha256(data).hexdigest() and d["size"] == len(data)


def test_an_artifact_manifest_has_every_field_the_spec_requires() -> None:
    artifact = artifact_manifest(SBOM, "application/vnd.cyclonedx+json", SUBJECT, filename="sbom.cdx.json")
    manifest = json.loads(artifact.manifest)
    assert manifest["schemaVersion"] == 2 and manifest["mediaType"] == OCI_MANIFEST
    # The config is the empty descriptor: the artifactType MUST then be set.
    assert manifest["config"] == {
        "mediaType": "application/vnd.oci.empty.v1+json",
        "digest": "sha256:44136fa355b3678a1146ad16f7e8649e94fb4fc21fe77e8310c060f61caaff8a",
        "size": 2,
    }
    assert hashlib.sha256(b"{}").hexdigest() == manifest["config"]["digest"].split(":")[1]
    assert manifest["artifactType"] == "application/vnd.cyclonedx+json"
    [layer] = manifest["layers"]
    _descriptor_ok(layer, SBOM)
    assert layer["mediaType"] == "application/vnd.cyclonedx+json"
    assert layer["annotations"] == {"org.opencontainers.image.title": "sbom.cdx.json"}
    # The subject is the image's manifest, by its digest, with its own media type.
    assert manifest["subject"] == {"mediaType": DOCKER_MANIFEST, "digest": SUBJECT.digest, "size": len(IMAGE)}
    assert artifact.blobs == (b"{}", SBOM)
    listed = artifact.descriptor
    assert listed.digest == "sha256:" + hashlib.sha256(artifact.manifest).hexdigest()
    assert listed.artifact_type == "application/vnd.cyclonedx+json" and listed.media_type == OCI_MANIFEST


def test_an_artifact_manifest_says_when_the_build_made_it() -> None:
    made = artifact_manifest(
        SBOM,
        "application/vnd.cyclonedx+json",
        SUBJECT,
        annotations={"a": "b"},
        created="2026-11-29T06:13:42Z",
    )
    assert json.loads(made.manifest)["annotations"] == {
        "org.opencontainers.image.created": "2026-11-29T06:13:42Z",
        "a": "b",
    }
    # The build's time, not the push's: the same document attached again is the same manifest.
    again = artifact_manifest(
        SBOM,
        "application/vnd.cyclonedx+json",
        SUBJECT,
        annotations={"a": "b"},
        created="2026-11-29T06:13:42Z",
    )
    assert again.manifest == made.manifest and made.descriptor.annotations["a"] == "b"
    assert "annotations" not in json.loads(artifact_manifest(SBOM, "x/y", SUBJECT).manifest)


def test_an_image_index_lists_each_platform() -> None:
    other = Descriptor(DOCKER_MANIFEST, "sha256:" + "b" * 64, 10)
    body = image_index(
        [
            Descriptor(**{**SUBJECT.__dict__, "platform": oci_platform("linux/amd64")}),
            Descriptor(**{**other.__dict__, "platform": oci_platform("linux/arm64/v8")}),
        ]
    )
    index = json.loads(body)
    assert index["schemaVersion"] == 2 and index["mediaType"] == OCI_INDEX
    for entry in index["manifests"]:
        _descriptor_ok(entry)
    assert [m["platform"] for m in index["manifests"]] == [
        {"architecture": "amd64", "os": "linux"},
        {"architecture": "arm64", "os": "linux", "variant": "v8"},
    ]
    assert [d.digest for d in index_manifests(body)] == [SUBJECT.digest, other.digest]
    with pytest.raises(ValueError, match="platform"):
        image_index([SUBJECT])  # an index entry without its platform could not be chosen from
    with pytest.raises(ValueError):
        image_index([])
    with pytest.raises(ValueError):
        oci_platform("linux")


def test_the_referrers_tag_schema() -> None:
    digest = "sha256:" + hashlib.sha256(b"x").hexdigest()
    assert referrers_tag(digest) == "sha256-" + hashlib.sha256(b"x").hexdigest()
    # sha512's 128 hex characters are cut to 64.
    long = "sha512:" + hashlib.sha512(b"x").hexdigest()
    assert referrers_tag(long) == "sha512-" + hashlib.sha512(b"x").hexdigest()[:64]
    with pytest.raises(ValueError):
        referrers_tag("nodigest")


def test_the_fallback_index_keeps_other_referrers_and_lists_each_once() -> None:
    theirs = {"mediaType": OCI_MANIFEST, "digest": "sha256:" + "c" * 64, "size": 5, "artifactType": "x/sig"}
    current = json.dumps({"schemaVersion": 2, "mediaType": OCI_INDEX, "manifests": [theirs]}).encode()
    ours = artifact_manifest(SBOM, "application/vnd.cyclonedx+json", SUBJECT).descriptor
    once = referrers_index(current, [ours])
    twice = referrers_index(once, [ours])
    assert once == twice
    listed = json.loads(twice)
    assert listed["mediaType"] == OCI_INDEX and listed["schemaVersion"] == 2
    assert listed["manifests"][0] == theirs
    assert listed["manifests"][1]["artifactType"] == "application/vnd.cyclonedx+json"
    assert json.loads(referrers_index(None, [ours]))["manifests"] == [ours.to_json()]
    with pytest.raises(ValueError, match="image index"):
        referrers_index(b'{"layers": []}', [ours])


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("127.0.0.1:5000/ops/cpu:1", Reference("127.0.0.1:5000", "ops/cpu", "1")),
        ("localhost/ops/cpu", Reference("localhost", "ops/cpu")),
        (
            "registry.example/a/b:2@sha256:" + "a" * 64,
            Reference("registry.example", "a/b", "2", "sha256:" + "a" * 64),
        ),
        ("team/ops:3", Reference("docker.io", "team/ops", "3")),
        ("python:3.11", Reference("docker.io", "library/python", "3.11")),
    ],
)
def test_image_references_are_read_as_docker_reads_them(name: str, expected: Reference) -> None:
    assert parse_reference(name) == expected


@pytest.mark.parametrize("name", ["127.0.0.1:5000/Ops/cpu:1", "ops/cpu:", "x@md5:abc"])
def test_a_malformed_reference_is_bad_input(name: str) -> None:
    with pytest.raises(BadInputError):
        parse_reference(name)


def test_plain_http_only_for_the_loopback_and_named_hosts() -> None:
    assert base_url("127.0.0.1:5000", {}) == "http://127.0.0.1:5000"
    assert base_url("localhost:5000", {}) == "http://localhost:5000"
    assert base_url("[::1]:5000", {}) == "http://[::1]:5000"
    assert base_url("registry.example", {}) == "https://registry.example"
    assert base_url("docker.io", {}) == "https://registry-1.docker.io"
    assert (
        base_url("10.0.0.5:5000", {"IMAGEGEN_INSECURE_REGISTRIES": "10.0.0.5:5000"}) == "http://10.0.0.5:5000"
    )


def test_bearer_and_basic_challenges() -> None:
    found = auth.parse_challenge(
        'Bearer realm="https://auth.example/token",service="reg",scope="repository:a/b:pull"'
    )
    assert found == auth.Challenge(
        "bearer", {"realm": "https://auth.example/token", "service": "reg", "scope": "repository:a/b:pull"}
    )
    assert auth.parse_challenge('Basic realm="Registry Realm"') == auth.Challenge(
        "basic", {"realm": "Registry Realm"}
    )
    assert auth.parse_challenge("") is None


def test_credentials_from_dockers_config(tmp_path: Path) -> None:
    encoded = base64.b64encode(b"alice:s3cr:et").decode()
    (tmp_path / "config.json").write_text(
        json.dumps(
            {
                "auths": {
                    "reg.example:5000": {"auth": encoded},
                    "https://index.docker.io/v1/": {"auth": encoded},
                }
            }
        )
    )
    config = auth.docker_config({"DOCKER_CONFIG": str(tmp_path)})
    assert auth.find_credentials("reg.example:5000", config) == auth.Credentials("alice", "s3cr:et")
    assert auth.find_credentials("docker.io", config) == auth.Credentials("alice", "s3cr:et")
    assert auth.find_credentials("other.example", config) is None
    assert auth.Credentials("alice", "s3cr:et").basic() == "Basic " + encoded
    # A helper that is not installed gives no credentials, not an error.
    helper = {"credHelpers": {"reg.example:5000": "imagegen-test-none"}}
    assert auth.find_credentials("reg.example:5000", helper) is None
    assert auth.docker_config({"DOCKER_CONFIG": str(tmp_path / "missing")}) == {}


def test_only_a_registry_digest_is_read_from_the_registry() -> None:
    assert is_registry_digest("127.0.0.1:5000/ops/cpu@sha256:" + "a" * 64)
    assert not is_registry_digest("127.0.0.1:5000/ops/cpu:1")  # a tag: the local image
    assert not is_registry_digest("ops/cpu@sha256:" + "a" * 64)  # no registry named: the engine's
    assert not is_registry_digest("imagegen:cpu")
