"""Reading a registry with nothing but urllib and the distribution spec: an independent check of
what imagegen pushed (imagegen's own client is not used here)."""

from __future__ import annotations

import hashlib
import json
import urllib.error
import urllib.request
from typing import Any

MANIFEST_TYPES = ", ".join(
    [
        "application/vnd.oci.image.manifest.v1+json",
        "application/vnd.oci.image.index.v1+json",
        "application/vnd.docker.distribution.manifest.v2+json",
        "application/vnd.docker.distribution.manifest.list.v2+json",
    ]
)


def get(url: str, accept: str = MANIFEST_TYPES) -> tuple[int, str, bytes]:
    """(status, Content-Type, body) of a GET; a 4xx answer is returned, not raised."""
    request = urllib.request.Request(url, headers={"Accept": accept})
    try:
        with urllib.request.urlopen(request, timeout=60) as response:
            return response.status, response.headers.get("Content-Type", ""), response.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.headers.get("Content-Type", ""), exc.read()


def manifest(registry: str, repository: str, ref: str) -> tuple[str, bytes]:
    """(media type, bytes) of a manifest or index; AssertionError when it is not there."""
    status, media_type, body = get(f"http://{registry}/v2/{repository}/manifests/{ref}")
    assert status == 200, f"{registry}/{repository}:{ref}: {status} {body[:300]!r}"
    if ref.startswith("sha256:"):
        assert digest(body) == ref
    return media_type.split(";")[0], body


def blob(registry: str, repository: str, ref: str) -> bytes:
    status, _, body = get(f"http://{registry}/v2/{repository}/blobs/{ref}", accept="*/*")
    assert status == 200 and digest(body) == ref
    return body


def digest(body: bytes) -> str:
    return "sha256:" + hashlib.sha256(body).hexdigest()


def documents_referring_to(registry: str, repository: str, subject: str) -> dict[str, bytes]:
    """artifactType -> the document's bytes, for each referrer of ``subject``, found through the
    referrers tag schema (the registry here has no referrers API: checked)."""
    status, _, _ = get(f"http://{registry}/v2/{repository}/referrers/{subject}")
    assert status == 404, "this registry was expected to lack the referrers API"
    media_type, body = manifest(registry, repository, "sha256-" + subject.split(":", 1)[1])
    assert media_type == "application/vnd.oci.image.index.v1+json"
    found = {}
    for entry in json.loads(body)["manifests"]:
        _, data = manifest(registry, repository, entry["digest"])
        artifact: dict[str, Any] = json.loads(data)
        assert artifact["subject"]["digest"] == subject
        assert artifact["artifactType"] == entry["artifactType"]
        assert artifact["config"]["mediaType"] == "application/vnd.oci.empty.v1+json"
        [layer] = artifact["layers"]
        found[artifact["artifactType"]] = blob(registry, repository, layer["digest"])
    return found
