"""Stage 5, publishing: the one place imagegen pushes, where its push plan
(``imagegen.oci.push_plan``: made once from the run's options, with the rule that nothing unverified
is pushed checked as it is made) sends an image; ``publish`` pushes after a passing
verification and does nothing otherwise. The engine sends it (``imagegen.engine.push``: through
the docker CLI when there is one, so its credential helpers and ``docker login`` apply). The
image's SBOM and provenance (and the provenance's signature) then follow it as OCI referrers of
the manifest just pushed (``imagegen.registry.referrers``), each annotated with the build's time. With
a signing key the manifest is also signed for cosign: its signature, provenance and SBOM as cosign
3's bundles (``imagegen.proof.bundle``) among the referrers, and as cosign 2's ``.sig`` / ``.att``
tags (``imagegen.oci.cosign_tags``). ``publish_index`` puts several platforms' pushed manifests
under one tag as an OCI image index, signed the same way when there is a key: cosign and Kyverno
resolve a tag to the index's digest, and look for signatures of that digest.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from imagegen.engine.images import inspect_local
from imagegen.engine.push import push_image
from imagegen.engine.types import Engine
from imagegen.errors import BadInputError, BuildFailedError
from imagegen.oci.cosign_bundles import bundles, created, statements
from imagegen.oci.cosign_tags import put_legacy
from imagegen.proof import documents as docs
from imagegen.proof.bundle import PLATFORM_ANNOTATION, Subject, signature
from imagegen.proof.documents import ProofDocuments
from imagegen.proof.image_proof import read_documents
from imagegen.proof.signing import Signer
from imagegen.registry.distribution import Reference, RegistryClient, parse_reference
from imagegen.registry.manifest import OCI_INDEX, Descriptor, image_index, oci_platform
from imagegen.registry.referrers import Attached, Document, attach
from imagegen.verify.container import VerifyResult


@dataclass(frozen=True)
class Published:
    """One image pushed: the manifest the registry holds for it, and its proof's referrers."""

    reference: str  # the tag pushed
    manifest: Descriptor  # of the pushed manifest, as the registry serves it
    proof: Attached | None  # None: the image carries no SBOM or provenance
    # The documents attached, for the index's statements (``publish_index``); not in the report.
    documents: ProofDocuments | None = field(default=None, compare=False, repr=False)

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


def _name(reference: Reference) -> str:
    return f"{reference.registry}/{reference.repository}"


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
            found = [Document(doc.data, doc.type.media_type, doc.type.filename) for doc in proof.all()]
            # With a key, what cosign reads too: its signature of the manifest, the provenance and
            # the SBOM, as cosign 3's bundles among the referrers and in cosign 2's tags.
            signed = () if signer is None else statements([Subject(_name(reference), manifest.digest)], proof)
            try:
                if signer is not None:
                    found += bundles(client, reference.repository, manifest.digest, signed, signer)
                attached = attach(client, reference.repository, manifest, found, created=created(proof))
                if signer is not None:
                    put_legacy(
                        client, reference.repository, _name(reference), manifest.digest, signed, signer
                    )
            except BuildFailedError as exc:
                raise proof_refused(tag, manifest, exc) from None
    return Published(tag, manifest, attached, proof)


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


def publish_index(
    tag: str, platforms: Sequence[tuple[str, Published]], signer: Signer | None = None
) -> Descriptor:
    """Put one OCI image index under ``tag`` listing each (platform, pushed image) pair; its descriptor.

    Every image must be in ``tag``'s repository (an index names its manifests by digest only).
    With ``signer`` the index is signed for cosign as a platform's manifest is (``sign_index``)."""
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
    index = Descriptor.of(OCI_INDEX, body)
    with RegistryClient(reference.registry) as client:
        client.put_manifest(reference.repository, reference.ref, body, OCI_INDEX)
        if signer is not None:
            try:
                sign_index(client, reference, index, platforms, signer)
            except BuildFailedError as exc:
                raise BuildFailedError(
                    f"the index {tag} was pushed ({index.digest}), but the registry refused its "
                    f"signatures, so `cosign verify {tag}` fails: {exc.message}",
                    hint="each platform's image is signed; push again to sign the index, or verify a "
                    "platform's digest",
                ) from None
    return index


def sign_index(
    client: RegistryClient,
    reference: Reference,
    index: Descriptor,
    platforms: Sequence[tuple[str, Published]],
    signer: Signer,
) -> Attached:
    """The index's cosign signature, and each platform's provenance and SBOM as statements whose
    subjects are the index and that platform's manifest (annotated with its platform), as bundle
    referrers of the index and in its ``.sig`` / ``.att`` tags: what ``cosign verify TAG`` and
    ``verify-attestation TAG`` check, having resolved the tag to the index's digest. The platforms'
    own manifests keep theirs."""
    name = _name(reference)
    signed = [signature(Subject(name, index.digest))]
    times = []
    for platform, published in platforms:
        if published.documents is None:
            continue  # an image pushed without its proof: nothing of it to attest
        subjects = [
            Subject(name, index.digest),
            Subject(name, published.manifest.digest, {PLATFORM_ANNOTATION: platform}),
        ]
        # Its provenance and SBOM: the index has one signature statement, its own (above).
        signed.extend(statements(subjects, published.documents)[1:])
        times.append(created(published.documents))
    # The newest platform's build time: when the last part of what the index lists was made.
    when = max((t for t in times if t is not None), default=None)
    found = bundles(client, reference.repository, index.digest, signed, signer)
    attached = attach(client, reference.repository, index, found, created=when)
    put_legacy(client, reference.repository, name, index.digest, signed, signer)
    return attached


def _repo_digest(tag: str, reference: Reference) -> str | None:
    """The manifest digest docker recorded for ``tag``'s repository when it pushed it (None: none)."""
    digests = inspect_local(tag, timeout=60).get("RepoDigests") or []
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
