"""Stage 5, publishing: the one place imagegen pushes, where its push plan
(``imagegen.oci.push_plan``: made once from the run's options, with the rule that nothing unverified
is pushed checked as it is made) sends an image; ``publish`` pushes after a passing
verification and does nothing otherwise. Pushing goes through the docker CLI when there is one
(its credential helpers and ``docker login`` apply), else the Docker SDK. The image's SBOM and
provenance (and the provenance's signature) then follow it as OCI referrers of the manifest just
pushed (``imagegen.oci.referrers``), with a signing key also as cosign v3's attestation bundles
(``imagegen.proof.bundle``), and ``publish_index`` puts several platforms' pushed
manifests under one tag as an OCI image index.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from typing import Any

from imagegen.engine.client import docker_client
from imagegen.engine.process import stream_process
from imagegen.engine.progress import LogView
from imagegen.engine.types import Engine
from imagegen.errors import BadInputError, BuildFailedError
from imagegen.oci.manifest import OCI_INDEX, Descriptor, image_index, oci_platform
from imagegen.oci.referrers import Attached, Document, attach
from imagegen.oci.registry import Reference, RegistryClient, parse_reference
from imagegen.proof import documents as docs
from imagegen.proof.bundle import BUNDLE_FILENAME, BUNDLE_MEDIA_TYPE, attestations, bundle
from imagegen.proof.documents import ProofDocuments
from imagegen.proof.image_proof import read_documents
from imagegen.proof.signing import Signer
from imagegen.verify.container import VerifyResult


@dataclass(frozen=True)
class Published:
    """One image pushed: the manifest the registry holds for it, and its proof's referrers."""

    reference: str  # the tag pushed
    manifest: Descriptor  # of the pushed manifest, as the registry serves it
    proof: Attached | None  # None: the image carries no SBOM or provenance

    def to_json(self) -> dict[str, Any]:
        return {
            "reference": self.reference,
            "digest": self.manifest.digest,
            "media_type": self.manifest.media_type,
            "proof": None if self.proof is None else self.proof.to_json(),
        }


def publish(
    engine: Engine, tag: str, verified: VerifyResult | None, documents: ProofDocuments | None = None
) -> bool:
    """Push ``tag`` when its verification passed; True when it was pushed. An image not
    verified (``verified`` None) or failing verification is never pushed."""
    return publish_image(engine, tag, verified, documents) is not None


def publish_image(
    engine: Engine,
    tag: str,
    verified: VerifyResult | None,
    documents: ProofDocuments | None = None,
    signer: Signer | None = None,
) -> Published | None:
    """``publish``, saying what was pushed: the manifest's digest and the proof's referrers.

    ``documents``: the image's proof as its build made it; default: read from the image itself.
    ``signer``: the key that signed it, which then signs cosign's attestations of the pushed manifest.
    """
    if verified is None or not verified.ok:
        return None
    push_image(engine, tag)
    return attach_proof(tag, documents, signer)


def _proof_documents(
    reference: Reference, manifest: Descriptor, proof: ProofDocuments, signer: Signer | None
) -> list[Document]:
    """The documents as the image holds them, and with a signer, cosign v3's bundles of the
    provenance and the SBOM about the manifest pushed (``imagegen.proof.bundle``)."""
    found = [Document(doc.data, doc.type.media_type, doc.type.filename) for doc in proof.all()]
    if signer is None:
        return found
    name = f"{reference.registry}/{reference.repository}"
    for attestation in attestations(name, manifest.digest, proof.provenance.data, proof.sbom.data):
        envelope = signer.envelope(attestation.statement)
        found.append(
            Document(
                bundle(envelope, signer.keyid), BUNDLE_MEDIA_TYPE, BUNDLE_FILENAME, attestation.annotations
            )
        )
    return found


def attach_proof(
    tag: str, documents: ProofDocuments | None = None, signer: Signer | None = None
) -> Published:
    """Find the manifest ``docker push`` just sent for ``tag`` and attach the proof documents to it."""
    reference = parse_reference(tag)
    pushed = _repo_digest(tag, reference)
    proof = documents if documents is not None else _image_documents(tag)
    with RegistryClient(reference.registry) as client:
        # By the digest docker recorded for the push: the proof goes to exactly that manifest,
        # even when someone pushed the tag again meanwhile.
        manifest = client.resolve(reference if pushed is None else replace(reference, digest=pushed))
        if manifest is None:
            raise BuildFailedError(
                f"{tag} was pushed, but {reference.registry} has no manifest for it",
                hint="the registry may have dropped it; push again",
            )
        attached = None
        if proof is not None:
            try:
                attached = attach(
                    client,
                    reference.repository,
                    manifest,
                    _proof_documents(reference, manifest, proof, signer),
                )
            except BuildFailedError as exc:
                raise proof_refused(tag, manifest, exc) from None
    return Published(tag, manifest, attached)


def proof_refused(tag: str, manifest: Descriptor, exc: BuildFailedError) -> BuildFailedError:
    """The failure of a push whose image reached the registry but whose proof did not.

    The tag cannot be taken back reliably (most registries refuse manifest deletes by default,
    and the tag may already have been pulled), so the report says plainly that it is out there
    without its SBOM and provenance, by digest, and what to do about it.
    """
    return BuildFailedError(
        f"{tag} was pushed ({manifest.digest}), but the registry refused its proof, so the tag is in "
        f"the registry WITHOUT its SBOM and provenance: {exc.message}",
        hint="do not deploy that digest; fix what the registry refused and push again (the proof is "
        "attached to the same digest), or delete the tag from the registry",
    )


def publish_index(tag: str, platforms: Sequence[tuple[str, Published]]) -> Descriptor:
    """Put one OCI image index under ``tag`` listing each (platform, pushed image) pair; its descriptor.

    Every image must be in ``tag``'s repository (an index names its manifests by digest only)."""
    reference = parse_reference(tag)
    entries = []
    for platform, published in platforms:
        where = parse_reference(published.reference)
        if (where.registry, where.repository) != (reference.registry, reference.repository):
            raise BadInputError(
                f"{published.reference} is not in {reference.registry}/{reference.repository}"
            )
        entries.append(replace(published.manifest, platform=oci_platform(platform)))
    body = image_index(entries)
    with RegistryClient(reference.registry) as client:
        client.put_manifest(reference.repository, reference.ref, body, OCI_INDEX)
    return Descriptor.of(OCI_INDEX, body)


def _repo_digest(tag: str, reference: Reference) -> str | None:
    """The manifest digest docker recorded for ``tag``'s repository when it pushed it (None: none)."""
    client = docker_client(os.environ, timeout=60)
    try:
        digests = client.api.inspect_image(tag).get("RepoDigests") or []
    finally:
        client.close()
    name = tag.rsplit("@", 1)[0]
    name = name.rsplit(":", 1)[0] if ":" in name.rsplit("/", 1)[-1] else name
    for entry in digests:
        repo, _, digest = str(entry).partition("@")
        if repo == name or parse_reference(repo) == replace(reference, tag=None, digest=None):
            return digest
    return None


def _image_documents(tag: str) -> ProofDocuments | None:
    """The proof documents the image carries (None: an image built without them)."""

    found = read_documents(tag)
    problems = found.problems()
    if problems:
        raise BuildFailedError(
            f"{tag}: {problems[0]}", hint="rebuild the image; its proof cannot be attached"
        )
    if docs.SBOM.filename not in found.files or docs.PROVENANCE.filename not in found.files:
        return None
    signature = found.files.get(docs.SIGNATURE.filename)
    return ProofDocuments(
        docs.Document(docs.SBOM, found.files[docs.SBOM.filename]),
        docs.Document(docs.PROVENANCE, found.files[docs.PROVENANCE.filename]),
        None if signature is None else docs.Document(docs.SIGNATURE, signature),
        found.labels.get(docs.KEYID_LABEL),
    )


def push_image(engine: Engine, tag: str) -> None:
    """Push ``tag`` to the registry its name points at (CLI when there is one: credential helpers)."""
    if engine.client is not None:
        _push_cli(engine.client, tag)
    else:
        _push_sdk(tag)


def _push_cli(client: str, tag: str) -> None:
    view = LogView("buildkit", plain=True)
    try:
        rc = stream_process([client, "push", tag], os.environ, view)
    finally:
        view.close()
    if rc != 0:
        raise BuildFailedError(f"pushing {tag} failed", hint=_push_hint(view.lines))


def _push_sdk(tag: str) -> None:
    client = docker_client(os.environ, timeout=None)
    lines: list[str] = []
    try:
        repository, _, version = tag.rpartition(":") if _has_tag(tag) else (tag, "", "latest")
        for item in client.api.push(repository, tag=version, stream=True, decode=True):
            text = str(item.get("error") or item.get("status") or "")
            if text:
                lines.append(text)
                print(text, file=sys.stderr, flush=True)
            if "error" in item:
                raise BuildFailedError(f"pushing {tag} failed: {item['error']}", hint=_push_hint(lines))
    finally:
        client.close()


def _has_tag(name: str) -> bool:
    # registry:5000/repo has a port, not a tag: a tag is after the last "/".
    return ":" in name.rsplit("/", 1)[-1]


def _push_hint(lines: Iterable[str]) -> str:
    tail = list(lines)[-10:]
    return "check the registry address and `docker login`; last output:\n" + "\n".join(tail)
