"""Signing the provenance statement: a DSSE envelope (the in-toto way) with an Ed25519 or an
ECDSA P-256 key (cosign's default key type).

``--sign-key FILE`` is an unencrypted PEM private key: ``openssl genpkey -algorithm ed25519`` or
``openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256`` (PKCS#8; a SEC1 ``EC PRIVATE
KEY`` reads too). ``imagegen verify --key FILE`` takes its PEM public key (SubjectPublicKeyInfo)
or the private key, whose public half is used. The envelope's payload is the statement's exact
bytes; the signature is over DSSE's pre-authentication encoding (PAE) of the payload type and
payload: Ed25519's own, or ECDSA with SHA-256, DER-encoded (what DSSE and cosign write and read).

The key id (the envelope's ``keyid`` and the ``io.imagegen.provenance.keyid`` label) is the hex
sha256 of the raw 32-byte public key for Ed25519 (as it always was) and of the DER
SubjectPublicKeyInfo for P-256 (which has no single raw form: compressed or not).

Any other key (RSA, another curve, an encrypted key) is bad input (exit 2) with a hint naming
both ``openssl`` commands.

Why ``cryptography`` and not securesystemslib's ``dsse.Envelope`` and ``CryptoSigner``: that
library computes its own key ids (over its JSON key form), so ours (a label users rely on) would
still be computed here, as would the choice of the key types accepted and the messages that say
why a key or an envelope is refused; what would remain to it is the PAE (one line below) and one
``sign``/``verify`` call, for a runtime dependency more. The tests check our envelopes with
securesystemslib and with a PAE written from the DSSE spec, so the format cannot drift from it.
"""

from __future__ import annotations

import base64
import hashlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Union

from imagegen.errors import BadInputError
from imagegen.files import read_input
from imagegen.proof.documents import PROVENANCE

if TYPE_CHECKING:
    from cryptography.hazmat.primitives.asymmetric.ec import EllipticCurvePrivateKey, EllipticCurvePublicKey
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

    PrivateKey = Union[Ed25519PrivateKey, EllipticCurvePrivateKey]
    PublicKey = Union[Ed25519PublicKey, EllipticCurvePublicKey]

KINDS = "an Ed25519 or ECDSA P-256 key"
_KEY_HINT = (
    "make one with `openssl genpkey -algorithm ed25519 -out key.pem` or, cosign's default kind,"
    " `openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out key.pem`"
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


def _kind(key: object) -> str:
    """What a key that imagegen does not sign with is, for the message that refuses it."""
    from cryptography.hazmat.primitives.asymmetric import ec, rsa

    if isinstance(key, (rsa.RSAPrivateKey, rsa.RSAPublicKey)):
        return f"an RSA key ({key.key_size} bits)"
    if isinstance(key, (ec.EllipticCurvePrivateKey, ec.EllipticCurvePublicKey)):
        return f"an ECDSA key on {key.curve.name}"
    return f"a key of type {type(key).__name__.lstrip('_')}"


def _public(key: object) -> PublicKey | None:
    """``key``'s public half when it is one imagegen signs with (a private key stands for it)."""
    from cryptography.hazmat.primitives.asymmetric import ec, ed25519

    if isinstance(key, (ed25519.Ed25519PrivateKey, ec.EllipticCurvePrivateKey)):
        key = key.public_key()
    if isinstance(key, ed25519.Ed25519PublicKey):
        return key
    if isinstance(key, ec.EllipticCurvePublicKey) and isinstance(key.curve, ec.SECP256R1):
        return key
    return None


def keyid(public_key: PublicKey) -> str:
    """The key's id, hex: sha256 of Ed25519's raw 32 bytes, of P-256's DER SubjectPublicKeyInfo."""
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import ed25519

    if isinstance(public_key, ed25519.Ed25519PublicKey):
        raw = public_key.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    else:
        raw = public_key.public_bytes(
            serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
        )
    return hashlib.sha256(raw).hexdigest()


@dataclass(frozen=True)
class Signer:
    private_key: PrivateKey
    keyid: str

    @classmethod
    def from_file(cls, path: Path) -> Signer:
        from cryptography.hazmat.primitives import serialization
        from cryptography.hazmat.primitives.asymmetric import ec, ed25519

        data = _read(path, "signing key")
        try:
            key = serialization.load_pem_private_key(data, password=None)
        except (ValueError, TypeError) as exc:
            raise BadInputError(
                f"--sign-key {path} is not an unencrypted PEM private key ({exc})", hint=_KEY_HINT
            ) from None
        public = _public(key)
        if public is None or not isinstance(key, (ed25519.Ed25519PrivateKey, ec.EllipticCurvePrivateKey)):
            raise BadInputError(f"--sign-key {path} is not {KINDS}: it is {_kind(key)}", hint=_KEY_HINT)
        return cls(key, keyid(public))

    def sign(self, data: bytes) -> bytes:
        """Ed25519's signature of ``data``, or ECDSA's over its SHA-256, DER-encoded."""
        from cryptography.hazmat.primitives import hashes
        from cryptography.hazmat.primitives.asymmetric import ec

        if isinstance(self.private_key, ec.EllipticCurvePrivateKey):
            return self.private_key.sign(data, ec.ECDSA(hashes.SHA256()))
        return self.private_key.sign(data)

    def envelope(self, payload: bytes, payload_type: str = PROVENANCE.media_type) -> bytes:
        signature = self.sign(pae(payload_type, payload))
        document = {
            "payload": base64.b64encode(payload).decode(),
            "payloadType": payload_type,
            "signatures": [{"keyid": self.keyid, "sig": base64.b64encode(signature).decode()}],
        }
        return (json.dumps(document, indent=2) + "\n").encode()


def load_public_key(path: Path) -> PublicKey:
    """The Ed25519 or P-256 public key in ``path`` (a public key PEM, or a private key's half)."""
    from cryptography.hazmat.primitives import serialization

    data = _read(path, "key")
    key: object
    try:
        key = serialization.load_pem_public_key(data)
    except (ValueError, TypeError):
        try:
            key = serialization.load_pem_private_key(data, password=None)
        except (ValueError, TypeError) as exc:
            raise BadInputError(
                f"--key {path} is not a PEM public or private key ({exc})", hint=_KEY_HINT
            ) from None
    public = _public(key)
    if public is None:
        raise BadInputError(f"--key {path} is not {KINDS}: it is {_kind(key)}", hint=_KEY_HINT)
    return public


def verifies(public_key: PublicKey, signature: bytes, data: bytes) -> bool:
    """Whether ``signature`` is ``public_key``'s over ``data`` (for P-256: ECDSA-SHA256, DER)."""
    from cryptography.exceptions import InvalidSignature
    from cryptography.hazmat.primitives import hashes
    from cryptography.hazmat.primitives.asymmetric import ec

    try:
        if isinstance(public_key, ec.EllipticCurvePublicKey):
            public_key.verify(signature, data, ec.ECDSA(hashes.SHA256()))
        else:
            public_key.verify(signature, data)
    except InvalidSignature:
        return False
    return True


def check_envelope(envelope: bytes, statement: bytes, public_key: PublicKey) -> str | None:
    """Why ``envelope`` does not prove ``statement`` was signed by ``public_key``; None if it does.

    The payload must be the statement's exact bytes (an altered statement differs from what was
    signed), its type the in-toto one, and one of the signatures must verify with the key (a
    wrong key, a key of the other kind, or an altered payload, does not).
    """
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
    if any(verifies(public_key, signature, pae(payload_type, payload)) for signature in signatures):
        return None
    return f"no signature verifies with the key given (key id {keyid(public_key)[:16]}...)"
