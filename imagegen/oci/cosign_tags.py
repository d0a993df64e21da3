"""cosign's older storage of a signed image, beside the bundles: the tags ``sha256-<hex>.sig`` and
``sha256-<hex>.att`` of the signed manifest's digest, in its repository.

cosign 2 (``cosign verify`` and ``verify-attestation`` without ``--new-bundle-format``), Kyverno's
``type: Cosign`` rules and sigstore's policy-controller read these, never the bundle referrers
(``imagegen.proof.bundle``); cosign 3 reads them when an image has no bundle. Both tags hold an
OCI image manifest (config: an OCI image config listing the layers; one layer per signature):

- ``.sig``: each layer a *simple signing* payload (``application/vnd.dev.cosign.simplesigning.v1
  +json``: ``{"critical": {"identity": {"docker-reference": NAME}, "image":
  {"docker-manifest-digest": DIGEST}, "type": "cosign container image signature"}, "optional":
  null}``), its signature (over the payload's bytes, as ``Signer.sign`` makes it) base64 in the
  layer's annotation ``dev.cosignproject.cosign/signature``;
- ``.att``: each layer a DSSE envelope (``application/vnd.dsse.envelope.v1+json``) of an in-toto
  statement, annotated ``predicateType`` and an empty ``dev.cosignproject.cosign/signature``.

(sigstore/cosign ``pkg/oci/remote`` ``SignatureTag`` / ``AttestationTag``, ``pkg/oci/static``,
``pkg/types``.) Another signer's layers already under a tag stay: the tag is read, our layers
added and the manifest put back, as cosign does; where the tag already holds our signature of the
same claim (an earlier push of the same image), it is kept as it is, and a push of the same image
again leaves both tags unchanged.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from imagegen.errors import BuildFailedError
from imagegen.proof.bundle import COSIGN_SIGN_PREDICATE_TYPE, Attestation, unlabelled
from imagegen.proof.signing import Signer, pae, verifies
from imagegen.registry.distribution import RegistryClient
from imagegen.registry.manifest import DOCKER_MANIFEST, OCI_MANIFEST, Descriptor, encode, json_object

SIMPLE_SIGNING_MEDIA_TYPE = "application/vnd.dev.cosign.simplesigning.v1+json"
DSSE_MEDIA_TYPE = "application/vnd.dsse.envelope.v1+json"
SIGNATURE_ANNOTATION = "dev.cosignproject.cosign/signature"
PREDICATE_TYPE_ANNOTATION = "predicateType"
OCI_CONFIG = "application/vnd.oci.image.config.v1+json"
# cosign's `CosignSignatureType`, the simple signing payload's type.
SIGNATURE_TYPE = "cosign container image signature"
# What ggcr's empty image says of a time it has none of, as cosign's signature images do.
_NO_TIME = "0001-01-01T00:00:00Z"


def tag(digest: str, suffix: str) -> str:
    """``sha256:<hex>`` -> ``sha256-<hex>.<suffix>`` (cosign's SignatureTag / AttestationTag)."""
    algorithm, sep, value = digest.partition(":")
    if not sep or not algorithm or not value:
        raise ValueError(f"not a digest: {digest!r}")
    return f"{algorithm}-{value}.{suffix}"


def simple_signing(name: str, digest: str) -> bytes:
    """The payload ``cosign sign`` (without bundles) signs for the manifest ``digest`` of ``name``."""
    document = {
        "critical": {
            "identity": {"docker-reference": name},
            "image": {"docker-manifest-digest": digest},
            "type": SIGNATURE_TYPE,
        },
        "optional": None,
    }
    return json.dumps(document, separators=(",", ":")).encode()


@dataclass(frozen=True)
class Layer:
    """One signature of a legacy tag: its blob, media type and annotations."""

    data: bytes
    media_type: str
    annotations: Mapping[str, str] = field(default_factory=dict)

    @property
    def descriptor(self) -> Descriptor:
        return Descriptor.of(self.media_type, self.data, annotations=dict(self.annotations))


def signature_layer(name: str, digest: str, signer: Signer) -> Layer:
    payload = simple_signing(name, digest)
    signed = base64.b64encode(signer.sign(payload)).decode()
    return Layer(payload, SIMPLE_SIGNING_MEDIA_TYPE, {SIGNATURE_ANNOTATION: signed})


def attestation_layer(attestation: Attestation, signer: Signer) -> Layer:
    envelope = unlabelled(signer.envelope(attestation.statement))
    # cosign 2's DSSE verifier, like sigstore-go's, takes a signature with an empty key id.
    envelope["signatures"] = [{"keyid": "", **s} for s in envelope["signatures"]]
    return Layer(
        json.dumps(envelope, separators=(",", ":")).encode(),
        DSSE_MEDIA_TYPE,
        # cosign reads every layer of either tag as a signature: an attestation's is in its
        # envelope, so the annotation is there and empty (cosign's static.NewAttestation).
        {SIGNATURE_ANNOTATION: "", PREDICATE_TYPE_ANNOTATION: attestation.predicate_type},
    )


def signature_manifest(layers: Sequence[Descriptor]) -> tuple[bytes, bytes]:
    """(manifest, config) of a legacy tag holding ``layers``: the config lists each layer's digest
    as its diff id (a signature layer is not compressed), as ggcr's ``mutate.Append`` writes it."""
    if not layers:
        raise ValueError("a signature manifest needs a layer")
    config = encode(
        {
            "architecture": "",
            "created": _NO_TIME,
            "history": [{"created": _NO_TIME} for _ in layers],
            "os": "",
            "rootfs": {"type": "layers", "diff_ids": [layer.digest for layer in layers]},
            "config": {},
        }
    )
    manifest = encode(
        {
            "schemaVersion": 2,
            "mediaType": OCI_MANIFEST,
            "config": Descriptor.of(OCI_CONFIG, config).to_json(),
            "layers": [layer.to_json() for layer in layers],
        }
    )
    return manifest, config


def existing_layers(body: bytes | None) -> list[Descriptor]:
    """The layers a legacy tag lists now ([] when there is none); ValueError for another document."""
    if body is None:
        return []
    document = json_object(body)
    layers = document.get("layers")
    if document.get("mediaType", OCI_MANIFEST) not in (OCI_MANIFEST, DOCKER_MANIFEST) or not isinstance(
        layers, list
    ):
        raise ValueError("not an image manifest of signatures")
    return [Descriptor.from_json(layer) for layer in layers if isinstance(layer, Mapping)]


def put_signatures(
    client: RegistryClient,
    repository: str,
    digest: str,
    suffix: str,
    layers: Sequence[Layer],
    same: Callable[[Descriptor, Layer], bool],
) -> str:
    """Add ``layers`` to the legacy tag ``<digest>.<suffix>``, but for those ``same`` says the tag
    lists already (an earlier push's): the tag is then left as it is. The tag."""
    where = tag(digest, suffix)
    current = client.get_manifest(repository, where, accept=(OCI_MANIFEST, DOCKER_MANIFEST))
    try:
        listed = existing_layers(current)
    except ValueError as exc:
        raise client.malformed(f"the signature tag {repository}:{where}", str(exc)) from None
    added = [new for new in layers if not any(same(old, new) for old in listed)]
    if not added:
        return where
    manifest, config = signature_manifest([*listed, *(layer.descriptor for layer in added)])
    for blob in (config, *(layer.data for layer in added)):
        client.put_blob(repository, blob)
    client.put_manifest(repository, where, manifest, OCI_MANIFEST)
    return where


def put_legacy(
    client: RegistryClient,
    repository: str,
    name: str,
    digest: str,
    statements: Sequence[Attestation],
    signer: Signer,
) -> tuple[str, str | None]:
    """The ``.sig`` tag (a signature of ``digest``) and, with attestations among ``statements``, the
    ``.att`` tag of the manifest ``digest`` in ``repository`` (``name``: the registry and
    repository); the tags put. cosign's own signature statement is not an attestation here: the
    ``.sig`` tag's simple signing payload says what it says."""
    public = signer.private_key.public_key()

    # An earlier push's layer is recognised by what it signs and the key that signed it: an ECDSA
    # signature differs at each signing, so the layers themselves differ.
    def same_signature(old: Descriptor, new: Layer) -> bool:
        signed = old.annotations.get(SIGNATURE_ANNOTATION, "")
        return old.digest == new.descriptor.digest and _signed_by(public, signed, new.data)

    def same_attestation(old: Descriptor, new: Layer) -> bool:
        if old.media_type != DSSE_MEDIA_TYPE or old.annotations != new.annotations:
            return False
        return _envelope_of(client, repository, old, public, json.loads(new.data)["payload"])

    layer = signature_layer(name, digest, signer)
    sig = put_signatures(client, repository, digest, "sig", [layer], same_signature)
    layers = [
        attestation_layer(s, signer) for s in statements if s.predicate_type != COSIGN_SIGN_PREDICATE_TYPE
    ]
    att = put_signatures(client, repository, digest, "att", layers, same_attestation) if layers else None
    return sig, att


def _signed_by(public: Any, signature: str, data: bytes) -> bool:
    try:
        raw = base64.b64decode(signature, validate=True)
    except ValueError:
        return False
    return verifies(public, raw, data)


def _envelope_of(client: RegistryClient, repository: str, old: Descriptor, public: Any, payload: str) -> bool:
    """Whether the envelope ``old`` names signs ``payload`` (base64) with ``public``'s key."""
    try:
        envelope = json_object(client.get_blob(repository, old.digest))
        if envelope.get("payload") != payload:
            return False
        body = base64.b64decode(payload, validate=True)
        kind = str(envelope.get("payloadType"))
        signatures = envelope.get("signatures") or []
        return any(_signed_by(public, str(s.get("sig", "")), pae(kind, body)) for s in signatures)
    except (ValueError, AttributeError, TypeError, BuildFailedError):
        # Not an envelope of ours (another tool's layer, or a blob the registry lost): kept.
        return False
