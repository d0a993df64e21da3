"""An image's proof read from a registry: ``imagegen sbom REGISTRY/NAME@DIGEST``.

The documents are the referrers of the image's manifest whose ``artifactType`` is the document's
media type (``imagegen.oci.referrers``); the newest one listed is taken. The image's config, read
from the same registry, holds the document's digest in its label (``io.imagegen.sbom.digest``,
...), so a document that is not the one the build sealed into the image is refused.
"""

from __future__ import annotations

import json

from imagegen.errors import BadInputError, VerificationFailedError
from imagegen.oci.manifest import INDEX_TYPES, sha256_digest
from imagegen.oci.referrers import fetch_document, referrers
from imagegen.oci.registry import RegistryClient, names_registry, parse_reference
from imagegen.proof.documents import DOCUMENT_TYPES
from imagegen.spec.reference import check_reference


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
            raise BadInputError(f"{image}: no such manifest in {reference.registry}")
        manifest = json.loads(subject)
        if manifest.get("mediaType") in INDEX_TYPES or "manifests" in manifest:
            platforms = []
            for entry in manifest.get("manifests", []):
                platform = entry.get("platform") or {}
                platforms.append(
                    f"{platform.get('os')}/{platform.get('architecture')}: {entry.get('digest')}"
                )
            raise BadInputError(
                f"{image} is an image index: each platform's image carries its own proof",
                hint="name a platform's digest: " + "; ".join(platforms),
            )
        found = referrers(client, reference.repository, reference.digest, wanted.media_type)
        if not found:
            raise BadInputError(
                f"{image} has no {wanted.kind} attached ({wanted.media_type})",
                hint="images pushed by `imagegen build --push` carry their SBOM and provenance",
            )
        media_type, data = fetch_document(client, reference.repository, found[-1])
        config = json.loads(client.get_blob(reference.repository, manifest["config"]["digest"]))
    label = ((config.get("config") or {}).get("Labels") or {}).get(wanted.label)
    if media_type != wanted.media_type or label != sha256_digest(data):
        raise VerificationFailedError(
            f"{image}: the {wanted.kind} attached is {sha256_digest(data)}, the image's {wanted.label} "
            f"label says {label}",
            hint="the registry holds a document the build did not seal into this image; do not trust it",
        )
    return data
