"""The OCI documents imagegen writes to a registry, made as bytes (pure; no I/O).

- an *artifact manifest* per proof document: an OCI image manifest whose ``artifactType`` is the
  document's media type, whose one layer is the document, whose config is the empty descriptor
  (``application/vnd.oci.empty.v1+json``, ``{}``), and whose ``subject`` is the image's manifest
  (image-spec 1.1, "Guidelines for Artifact Usage");
- an *image index* of several platforms' manifests (image-spec 1.1, "Image Index");
- the *referrers index* kept under the fallback tag ``<alg>-<hex>`` where a registry has no
  referrers API (distribution-spec 1.1, "Referrers Tag Schema").

A manifest's digest is over its exact bytes, so these are serialized once, here, and never
re-encoded by whoever sends them.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

OCI_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
OCI_INDEX = "application/vnd.oci.image.index.v1+json"
DOCKER_MANIFEST = "application/vnd.docker.distribution.manifest.v2+json"
DOCKER_LIST = "application/vnd.docker.distribution.manifest.list.v2+json"
# What a client accepts when it resolves a tag: an image of either kind, or an index of either.
MANIFEST_TYPES = (OCI_MANIFEST, OCI_INDEX, DOCKER_MANIFEST, DOCKER_LIST)
INDEX_TYPES = (OCI_INDEX, DOCKER_LIST)

EMPTY_MEDIA_TYPE = "application/vnd.oci.empty.v1+json"
EMPTY_JSON = b"{}"
# The document's file name, as `oras pull` names what it writes.
TITLE_ANNOTATION = "org.opencontainers.image.title"
CREATED_ANNOTATION = "org.opencontainers.image.created"


def sha256_digest(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


_JSON_KINDS = {list: "an array", str: "a string", bool: "a boolean", int: "a number", float: "a number"}


def json_object(data: bytes) -> dict[str, Any]:
    """``data`` read as a JSON object, as every document imagegen seals and every OCI manifest
    and config is. ValueError ``not a JSON object: <why>`` for anything else (bytes that are not
    UTF-8, text that is not JSON, JSON of another kind), for a reader to name where it came from:
    such bytes come from an image or a registry, not from us."""
    try:
        document = json.loads(data.decode("utf-8"))
    except UnicodeDecodeError:
        raise ValueError("not a JSON object: it is not UTF-8 text") from None
    except ValueError as exc:  # json.JSONDecodeError
        raise ValueError(f"not a JSON object: it is not JSON ({exc})") from None
    if not isinstance(document, dict):
        kind = "null" if document is None else _JSON_KINDS.get(type(document), "another value")
        raise ValueError(f"not a JSON object: it is {kind}")
    return document


def encode(document: Mapping[str, Any]) -> bytes:
    """The bytes sent for a manifest or index (compact JSON, keys in the order given)."""
    return json.dumps(document, separators=(",", ":"), ensure_ascii=False).encode()


@dataclass(frozen=True)
class Descriptor:
    """An OCI content descriptor: what a manifest or index says about the content it points at."""

    media_type: str
    digest: str
    size: int
    artifact_type: str | None = None
    platform: Mapping[str, str] | None = None  # in an index: {"os", "architecture", "variant"?}
    annotations: Mapping[str, str] = field(default_factory=dict)

    @classmethod
    def of(cls, media_type: str, data: bytes, **extra: Any) -> Descriptor:
        return cls(media_type, sha256_digest(data), len(data), **extra)

    def to_json(self) -> dict[str, Any]:
        found: dict[str, Any] = {"mediaType": self.media_type, "digest": self.digest, "size": self.size}
        if self.artifact_type:
            found["artifactType"] = self.artifact_type
        if self.platform:
            found["platform"] = dict(self.platform)
        if self.annotations:
            found["annotations"] = dict(self.annotations)
        return found

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Descriptor:
        """A descriptor read from a registry; ValueError when a required field is missing or wrong."""
        media_type, digest, size = data.get("mediaType"), data.get("digest"), data.get("size")
        if not isinstance(media_type, str) or not isinstance(digest, str) or not isinstance(size, int):
            raise ValueError(f"not an OCI descriptor: {dict(data)!r:.200}")
        artifact_type = data.get("artifactType")
        platform = data.get("platform")
        annotations = data.get("annotations")
        return cls(
            media_type,
            digest,
            size,
            artifact_type if isinstance(artifact_type, str) else None,
            {str(k): str(v) for k, v in platform.items()} if isinstance(platform, Mapping) else None,
            {str(k): str(v) for k, v in annotations.items()} if isinstance(annotations, Mapping) else {},
        )


EMPTY_DESCRIPTOR = Descriptor.of(EMPTY_MEDIA_TYPE, EMPTY_JSON)


def oci_platform(platform: str) -> dict[str, str]:
    """``linux/arm64`` -> ``{"architecture": "arm64", "os": "linux"}`` (with ``variant`` when given)."""
    parts = platform.split("/")
    if len(parts) not in (2, 3) or not all(parts):
        raise ValueError(f"not an OS/ARCH[/VARIANT] platform: {platform!r}")
    found = {"architecture": parts[1], "os": parts[0]}
    if len(parts) == 3:
        found["variant"] = parts[2]
    return found


@dataclass(frozen=True)
class Artifact:
    """One document as a referrer: its manifest's bytes, and the blobs that manifest names."""

    manifest: bytes
    blobs: tuple[bytes, ...]  # the empty config, then the document

    @property
    def descriptor(self) -> Descriptor:
        """The manifest's descriptor as a referrers index lists it (with its artifactType)."""
        document = json.loads(self.manifest)
        return Descriptor.of(
            OCI_MANIFEST,
            self.manifest,
            artifact_type=document["artifactType"],
            annotations=document.get("annotations") or {},
        )


def artifact_manifest(
    data: bytes,
    media_type: str,
    subject: Descriptor,
    *,
    filename: str | None = None,
    annotations: Mapping[str, str] | None = None,
    created: str | None = None,
) -> Artifact:
    """The manifest that attaches ``data`` (of ``media_type``) to ``subject``.

    ``artifactType`` is the document's media type: image-spec 1.1 requires it when the config is
    the empty descriptor, and it is what a referrers query filters on (``?artifactType=``).
    ``created`` (RFC 3339) becomes the ``org.opencontainers.image.created`` annotation, which
    cosign writes on its referrers and ORAS shows; given the build's time rather than the push's,
    the same document attached again is the same manifest, which a referrers list holds once.
    """
    layer = Descriptor.of(media_type, data, annotations={TITLE_ANNOTATION: filename} if filename else {})
    document: dict[str, Any] = {
        "schemaVersion": 2,
        "mediaType": OCI_MANIFEST,
        "artifactType": media_type,
        "config": EMPTY_DESCRIPTOR.to_json(),
        "layers": [layer.to_json()],
        "subject": Descriptor(subject.media_type, subject.digest, subject.size).to_json(),
    }
    found = {**({CREATED_ANNOTATION: created} if created else {}), **(annotations or {})}
    if found:
        document["annotations"] = found
    return Artifact(encode(document), (EMPTY_JSON, data))


def image_index(manifests: Iterable[Descriptor], media_type: str = OCI_INDEX) -> bytes:
    """An index (``OCI_INDEX``, or Docker's manifest list) of ``manifests``, each with its platform."""
    listed = list(manifests)
    if not listed:
        raise ValueError("an image index needs at least one manifest")
    for descriptor in listed:
        if not descriptor.platform:
            raise ValueError(f"{descriptor.digest}: a platform's manifest needs its platform")
    return encode({"schemaVersion": 2, "mediaType": media_type, "manifests": [m.to_json() for m in listed]})


def referrers_tag(digest: str) -> str:
    """The fallback tag of ``digest``'s referrers: ``<alg>-<ref>``, ``alg`` cut to 32 characters
    and ``ref`` to 64, characters a tag may not hold replaced by ``-`` (distribution-spec 1.1)."""
    algorithm, sep, encoded = digest.partition(":")
    if not sep or not algorithm or not encoded:
        raise ValueError(f"not a digest: {digest!r}")
    clean = "".join(c if c.isalnum() or c in "._-" else "-" for c in algorithm[:32] + "-" + encoded[:64])
    return clean


def referrers_index(current: bytes | None, added: Iterable[Descriptor]) -> bytes:
    """The fallback tag's index after adding ``added``: ``current``'s entries (another tool's
    referrers too) kept, a manifest already listed not listed twice."""
    manifests: list[dict[str, Any]] = []
    if current is not None:
        document = json.loads(current)
        if not isinstance(document, Mapping) or not isinstance(document.get("manifests"), list):
            raise ValueError("the referrers tag does not hold an image index")
        manifests = [dict(m) for m in document["manifests"] if isinstance(m, Mapping)]
    listed = {m.get("digest") for m in manifests}
    for descriptor in added:
        if descriptor.digest not in listed:
            manifests.append(descriptor.to_json())
            listed.add(descriptor.digest)
    return encode({"schemaVersion": 2, "mediaType": OCI_INDEX, "manifests": manifests})


def index_manifests(data: bytes) -> list[Descriptor]:
    """The descriptors an index (or referrers response) lists; ValueError for anything else."""
    document = json.loads(data)
    if not isinstance(document, Mapping) or not isinstance(document.get("manifests"), list):
        raise ValueError("not an image index")
    return [Descriptor.from_json(m) for m in document["manifests"] if isinstance(m, Mapping)]
