"""An image's proof documents as OCI referrers of its manifest, and reading them back.

Attaching (``attach``): for each document, its blob and the empty config are uploaded, then its
artifact manifest (``imagegen.registry.manifest.artifact_manifest``, ``subject`` = the image's
manifest) is put by its digest. A registry with the referrers API says so by answering that PUT
with an ``OCI-Subject`` header, or by answering ``GET /v2/<name>/referrers/<digest>``; one that
does neither (Debian's distribution 2.8) gets the fallback tag ``sha256-<hex>``: an image index
listing the referrers, read, extended and put back (distribution-spec 1.1, "Pushing Manifests
with Subject"). Reading (``referrers``) asks the API first, then the fallback tag.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from imagegen.errors import BuildFailedError
from imagegen.registry.distribution import RegistryClient
from imagegen.registry.manifest import (
    INDEX_TYPES,
    OCI_INDEX,
    OCI_MANIFEST,
    Descriptor,
    artifact_manifest,
    index_manifests,
    json_object,
    referrers_index,
    referrers_tag,
)


@dataclass(frozen=True)
class Document:
    """What to attach: the bytes, their media type, the file name they had, and the annotations of
    its referrer manifest (a cosign bundle's content and predicate type)."""

    data: bytes
    media_type: str
    filename: str
    annotations: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Attached:
    """The referrers put for one image manifest, and how a client finds them."""

    subject: Descriptor
    referrers: tuple[Descriptor, ...]
    fallback_tag: str | None  # None: the registry's referrers API lists them

    def to_json(self) -> dict[str, Any]:
        return {
            "subject": self.subject.digest,
            "referrers_api": self.fallback_tag is None,
            "fallback_tag": self.fallback_tag,
            "referrers": [
                {"artifact_type": r.artifact_type, "digest": r.digest, "size": r.size} for r in self.referrers
            ],
        }


def attach(
    client: RegistryClient,
    repository: str,
    subject: Descriptor,
    documents: Sequence[Document],
    annotations: dict[str, str] | None = None,
    *,
    created: str | None = None,
) -> Attached:
    """Put each document as a referrer of ``subject`` (a manifest in ``repository``); ``created``:
    the time their referrer manifests say they were made (RFC 3339)."""
    put: list[Descriptor] = []
    api = False
    for document in documents:
        artifact = artifact_manifest(
            document.data,
            document.media_type,
            subject,
            filename=document.filename,
            annotations={**(annotations or {}), **document.annotations},
            created=created,
        )
        for blob in artifact.blobs:
            client.put_blob(repository, blob)
        descriptor = artifact.descriptor
        answer = client.put_manifest(repository, descriptor.digest, artifact.manifest, OCI_MANIFEST)
        api = api or answer.headers.get("OCI-Subject") == subject.digest
        put.append(descriptor)
    if api or client.referrers(repository, subject.digest) is not None:
        return Attached(subject, tuple(put), None)
    tag = referrers_tag(subject.digest)
    try:
        updated = referrers_index(client.get_manifest(repository, tag, accept=(OCI_INDEX,)), put)
    except ValueError as exc:
        raise BuildFailedError(
            f"{client.registry}/{repository}:{tag}: {exc}",
            hint="another tool wrote that tag; remove it from the registry, or push with a registry "
            "that has the referrers API",
        ) from None
    client.put_manifest(repository, tag, updated, OCI_INDEX)
    return Attached(subject, tuple(put), tag)


def referrers(
    client: RegistryClient, repository: str, digest: str, artifact_type: str | None = None
) -> list[Descriptor]:
    """The manifests that refer to ``digest``: through the API, else the fallback tag (none: [])."""
    body = client.referrers(repository, digest, artifact_type)
    if body is None:
        body = client.get_manifest(repository, referrers_tag(digest), accept=INDEX_TYPES)
    if body is None:
        return []
    try:
        found = index_manifests(body)
    except ValueError as exc:
        raise client.malformed(f"the list of referrers of {repository}@{digest}", str(exc)) from None
    # A registry may ignore the filter (it then says so in OCI-Filters-Applied); apply it here.
    return [d for d in found if artifact_type is None or d.artifact_type == artifact_type]


def fetch_document(client: RegistryClient, repository: str, referrer: Descriptor) -> tuple[str, bytes]:
    """A referrer's document: (its media type, its bytes), checked against the digests."""
    manifest = client.get_manifest(repository, referrer.digest, accept=(OCI_MANIFEST,))
    if manifest is None:
        raise BuildFailedError(
            f"{client.registry}/{repository}@{referrer.digest}: listed, but not there",
            hint="the registry lists a referrer it does not hold: push the image again, or ask "
            "whoever runs the registry",
        )
    what = f"the referrer {repository}@{referrer.digest}"
    try:
        document = json_object(manifest)
        layers = document.get("layers")
        if not isinstance(layers, list) or len(layers) != 1 or not isinstance(layers[0], Mapping):
            raise ValueError("not a manifest of one document (one layer)")
        layer = Descriptor.from_json(layers[0])
    except ValueError as exc:
        raise client.malformed(what, str(exc)) from None
    return layer.media_type, client.get_blob(repository, layer.digest)
