"""cosign 3's signature and attestations of a pushed manifest, as the bundle referrers that carry
them (the statements and bundles: ``imagegen.proof.bundle``), and the time their referrer
manifests carry.

A manifest pushed again (a rerun, a bake pushing an image it pushed before) gets the same
referrers, not three more: an ECDSA signature differs at each signing, so a bundle already
attached whose statement is the one to sign, signed by this key and written as imagegen writes it
now, is attached again as it is (the same manifest, which a referrers list holds once). A bundle
an older imagegen wrote (with the ``keyid`` cosign 3 refuses) is not reused: a new one joins it.
"""

from __future__ import annotations

import base64
import datetime
import json
from collections.abc import Mapping, Sequence
from typing import Any

from imagegen.errors import BuildFailedError
from imagegen.proof.bundle import (
    BUNDLE_FILENAME,
    BUNDLE_MEDIA_TYPE,
    Attestation,
    Subject,
    attestations,
    bundle,
    signature,
)
from imagegen.proof.documents import ProofDocuments
from imagegen.proof.signing import Signer, pae, verifies
from imagegen.registry.distribution import RegistryClient
from imagegen.registry.manifest import json_object
from imagegen.registry.referrers import Document, fetch_document, referrers


def statements(subjects: Sequence[Subject], proof: ProofDocuments) -> tuple[Attestation, ...]:
    """What cosign reads about ``subjects`` (the first: the manifest signed): cosign's signature of
    it, then the provenance and the SBOM as attestations."""
    try:
        made = attestations(subjects, proof.provenance.data, proof.sbom.data)
    except ValueError as exc:
        raise BuildFailedError(
            f"the image's proof cannot be signed for cosign: {exc}",
            hint="rebuild the image; its provenance or SBOM is not the document the build made",
        ) from None
    return (signature(subjects[0]), *made)


def bundles(
    client: RegistryClient, repository: str, digest: str, signed: Sequence[Attestation], signer: Signer
) -> list[Document]:
    """Each statement of ``signed`` as a bundle referrer of the manifest ``digest``: the one already
    attached when there is one (above), else signed now."""
    earlier = _signed_before(client, repository, digest, signer)
    found = []
    for attestation in signed:
        payload = base64.b64encode(attestation.statement).decode()
        data = earlier.get(payload) or bundle(signer.envelope(attestation.statement), signer.keyid)
        found.append(Document(data, BUNDLE_MEDIA_TYPE, BUNDLE_FILENAME, attestation.annotations))
    return found


def _signed_before(client: RegistryClient, repository: str, digest: str, signer: Signer) -> dict[str, bytes]:
    """The bundles attached to ``digest`` that ``signer`` made as imagegen makes them now, by the
    base64 payload their envelope signs."""
    public = signer.private_key.public_key()
    found: dict[str, bytes] = {}
    for referrer in referrers(client, repository, digest, BUNDLE_MEDIA_TYPE):
        try:
            media_type, data = fetch_document(client, repository, referrer)
            envelope = json_object(data).get("dsseEnvelope")
            if media_type != BUNDLE_MEDIA_TYPE or not isinstance(envelope, Mapping):
                continue
            payload, kind = str(envelope.get("payload")), str(envelope.get("payloadType"))
            [entry] = envelope.get("signatures") or [None]
            raw = base64.b64decode(str(entry["sig"]), validate=True)
            again = json.dumps(
                {"payload": payload, "payloadType": kind, "signatures": [{"sig": entry["sig"]}]}
            )
            if data != bundle(again.encode(), signer.keyid):
                continue  # written another way (an older imagegen's keyid), or by another tool
            if verifies(public, raw, pae(kind, base64.b64decode(payload, validate=True))):
                found[payload] = data
        except (BuildFailedError, ValueError, KeyError, TypeError):
            continue  # a referrer that is not such a bundle: not ours to reuse
    return found


def created(proof: ProofDocuments) -> str | None:
    """When the build made ``proof`` (its provenance's ``finishedOn``, else the SBOM's timestamp), as
    the referrers' ``org.opencontainers.image.created``: the build's time, so that pushing one
    image again gives the same referrer manifests. None when neither says (an older proof)."""
    for data, path in (
        (proof.provenance.data, ("predicate", "runDetails", "metadata", "finishedOn")),
        (proof.sbom.data, ("metadata", "timestamp")),
    ):
        try:
            found: Any = json_object(data)
        except ValueError:
            continue
        for key in path:
            found = found.get(key) if isinstance(found, Mapping) else None
        moment = rfc3339(found)
        if moment is not None:
            return moment
    return None


def rfc3339(text: object) -> str | None:
    """``text`` (an ISO 8601 time with its zone) in UTC to the second, as cosign writes the
    annotation; None for anything else."""
    if not isinstance(text, str):
        return None
    try:
        moment = datetime.datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return None
    if moment.tzinfo is None:
        return None
    return moment.astimezone(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
