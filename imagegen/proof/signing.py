"""Signing the provenance statement: a DSSE envelope (the in-toto way) with an Ed25519 key.

``--sign-key FILE`` is a PEM private key (``openssl genpkey -algorithm ed25519``, unencrypted);
``imagegen verify --key FILE`` takes its PEM public key (or the private key, whose public half
is used). The envelope's payload is the statement's exact bytes; the signature is over DSSE's
pre-authentication encoding (PAE) of the payload type and payload. Keys are read with
``cryptography``; a key that is not an Ed25519 PEM key is bad input (exit 2).
"""

from __future__ import annotations

import base64
import hashlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from imagegen.errors import BadInputError
from imagegen.files import read_input
from imagegen.proof.documents import PROVENANCE

_KEY_HINT = (
    "make one with `openssl genpkey -algorithm ed25519 -out key.pem`"
    " (its public key: `openssl pkey -in key.pem -pubout`)"
)


def pae(payload_type: str, payload: bytes) -> bytes:
    """DSSE v1's pre-authentication encoding: what is signed."""
    kind = payload_type.encode()
    return b"DSSEv1 %d %s %d %s" % (len(kind), kind, len(payload), payload)


# A PEM key is a few kilobytes at most (an RSA key of 16384 bits: about 12 KiB); anything larger is
# not a key, and a path to an endless file must not be read without bound.
KEY_FILE_LIMIT = 1 << 20


def _read(path: Path, what: str) -> bytes:
    return read_input(path, f"the {what}", limit=KEY_FILE_LIMIT, hint=_KEY_HINT)


def keyid(public_key: Any) -> str:
    """sha256 of the raw 32-byte public key, hex: names the key without revealing anything."""
    from cryptography.hazmat.primitives import serialization

    raw = public_key.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    return hashlib.sha256(raw).hexdigest()


@dataclass(frozen=True)
class Signer:
    private_key: Any  # Ed25519PrivateKey
    keyid: str

    @classmethod
    def from_file(cls, path: Path) -> Signer:
        from cryptography.hazmat.primitives import serialization
        from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

        data = _read(path, "signing key")
        try:
            key = serialization.load_pem_private_key(data, password=None)
        except (ValueError, TypeError) as exc:
            raise BadInputError(
                f"--sign-key {path} is not an unencrypted PEM private key ({exc})", hint=_KEY_HINT
            ) from None
        if not isinstance(key, Ed25519PrivateKey):
            raise BadInputError(f"--sign-key {path} is not an Ed25519 key", hint=_KEY_HINT)
        return cls(key, keyid(key.public_key()))

    def envelope(self, payload: bytes, payload_type: str = PROVENANCE.media_type) -> bytes:
        signature = self.private_key.sign(pae(payload_type, payload))
        document = {
            "payload": base64.b64encode(payload).decode(),
            "payloadType": payload_type,
            "signatures": [{"keyid": self.keyid, "sig": base64.b64encode(signature).decode()}],
        }
        return (json.dumps(document, indent=2) + "\n").encode()


def load_public_key(path: Path) -> Any:
    """The Ed25519 public key in ``path`` (a public key PEM, or a private key's public half)."""
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

    data = _read(path, "key")
    key: Any
    try:
        key = serialization.load_pem_public_key(data)
    except (ValueError, TypeError):
        try:
            key = serialization.load_pem_private_key(data, password=None).public_key()
        except (ValueError, TypeError) as exc:
            raise BadInputError(f"--key {path} is not a PEM Ed25519 key ({exc})", hint=_KEY_HINT) from None
    if isinstance(key, Ed25519PrivateKey):
        key = key.public_key()
    if not isinstance(key, Ed25519PublicKey):
        raise BadInputError(f"--key {path} is not an Ed25519 key", hint=_KEY_HINT)
    return key


def check_envelope(envelope: bytes, statement: bytes, public_key: Any) -> str | None:
    """Why ``envelope`` does not prove ``statement`` was signed by ``public_key``; None if it does.

    The payload must be the statement's exact bytes (an altered statement differs from what was
    signed), its type the in-toto one, and one of the signatures must verify with the key (a
    wrong key, or an altered payload, does not).
    """
    from cryptography.exceptions import InvalidSignature

    try:
        document = json.loads(envelope)
        payload = base64.b64decode(document["payload"], validate=True)
        payload_type = str(document["payloadType"])
        signatures = [base64.b64decode(s["sig"], validate=True) for s in document["signatures"]]
    except (ValueError, KeyError, TypeError) as exc:
        return f"the signature envelope is malformed ({type(exc).__name__}: {exc})"
    if payload_type != PROVENANCE.media_type:
        return f"the envelope signs a {payload_type!r}, not an in-toto statement"
    if payload != statement:
        return "the provenance statement differs from the one that was signed"
    for signature in signatures:
        try:
            public_key.verify(signature, pae(payload_type, payload))
            return None
        except InvalidSignature:
            continue
    return f"no signature verifies with the key given (key id {keyid(public_key)[:16]}...)"
