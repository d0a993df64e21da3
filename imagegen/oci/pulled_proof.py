"""An image's proof read from a registry: ``imagegen sbom REGISTRY/NAME@DIGEST``.

The documents are the referrers of the image's manifest whose ``artifactType`` is the document's
media type (``imagegen.registry.referrers``); the newest one listed is taken. The image's config, read
from the same registry, holds the document's digest in its label (``io.imagegen.sbom.digest``,
...), so a document that is not the one the build sealed into the image is refused.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from imagegen.errors import BadInputError, VerificationFailedError
from imagegen.imagespec.reference import check_reference
from imagegen.proof.documents import DOCUMENT_TYPES
from imagegen.registry.distribution import RegistryClient, names_registry, parse_reference
from imagegen.registry.manifest import INDEX_TYPES, json_object, sha256_digest
from imagegen.registry.referrers import fetch_document, referrers


def is_registry_digest(image: str) -> bool:
    """True for ``registry/name@sha256:...``: read from the registry, not the engine."""
    return "@" in image and names_registry(image.split("@", 1)[0])


def fetch_proof(image: str, kind: str) -> bytes:
    """The ``kind`` document ("sbom", "provenance", "signature") attached to ``image``'s manifest.

    BadInputError (2): no such manifest, an index (its platforms carry the proof), or no such
    document attached; VerificationFailedError (1): a document other than the image's label names.
    """
    check_reference("IMAGE", image)  # the whole grammar, before any request
    reference = parse_reference(image)
    assert reference.digest is not None  # is_registry_digest
    wanted = next(t for t in DOCUMENT_TYPES if t.kind == kind)
    with RegistryClient(reference.registry) as client:
        subject = client.get_manifest(reference.repository, reference.digest)
        if subject is None:
            raise BadInputError(
                f"{image}: no such manifest in {reference.registry}",
                hint="check the digest: the registry holds no manifest by it",
            )
        manifest = _object(client, subject, f"the manifest {reference.repository}@{reference.digest}")
        if manifest.get("mediaType") in INDEX_TYPES or "manifests" in manifest:
            raise BadInputError(
                f"{image} is an image index: each platform's image carries its own proof",
                hint=_platforms_hint(manifest),
            )
        found = referrers(client, reference.repository, reference.digest, wanted.media_type)
        if not found:
            raise BadInputError(
                f"{image} has no {wanted.kind} attached ({wanted.media_type})",
                hint="images pushed by `imagegen build --push` carry their SBOM and provenance",
            )
        media_type, data = fetch_document(client, reference.repository, found[-1])
        config_digest = _field(manifest, "config", "digest")
        if not isinstance(config_digest, str):
            raise client.malformed(
                f"the manifest {reference.repository}@{reference.digest}", "not an image manifest: no config"
            )
        blob = client.get_blob(reference.repository, config_digest)
        config = _object(client, blob, f"the config {reference.repository}@{config_digest}")
    label = _field(config, "config", "Labels", wanted.label)
    if media_type != wanted.media_type or label != sha256_digest(data):
        raise VerificationFailedError(
            f"{image}: the {wanted.kind} attached is {sha256_digest(data)}, the image's {wanted.label} "
            f"label says {label}",
            hint="the registry holds a document the build did not seal into this image; do not trust it",
        )
    return data


def _object(client: RegistryClient, data: bytes, what: str) -> dict[str, Any]:
    try:
        return json_object(data)
    except ValueError as exc:
        raise client.malformed(what, str(exc)) from None


def _field(document: Mapping[str, Any], *keys: str) -> Any:
    """``document[k1][k2]...``, or None where a level is missing or is no JSON object."""
    found: Any = document
    for key in keys:
        found = found.get(key) if isinstance(found, Mapping) else None
    return found


def _platforms_hint(index: Mapping[str, Any]) -> str:
    entries = index.get("manifests")
    platforms = [
        f"{_field(entry, 'platform', 'os')}/{_field(entry, 'platform', 'architecture')}: "
        + str(entry.get("digest"))
        for entry in (entries if isinstance(entries, list) else [])
        if isinstance(entry, Mapping)
    ]
    if not platforms:
        return "its index lists no platform's image: ask whoever pushed it"
    return "name a platform's digest: " + "; ".join(platforms)
