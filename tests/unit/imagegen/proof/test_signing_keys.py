"""The keys users have: ``--sign-key`` takes ECDSA P-256 (cosign's default kind) as well as
Ed25519, and ``verify --key`` either public key or the private key. A P-256 envelope is checked
here by code that is not imagegen's: DSSE's PAE written from the spec, ``cryptography``'s ECDSA
verify, and securesystemslib's DSSE ``Envelope``. Wrong keys and keys of the other kind fail with
a reason; other kinds of key are bad input (exit 2) with a hint naming both openssl commands."""

from __future__ import annotations

import base64
import hashlib
import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed25519, rsa
from cryptography.hazmat.primitives.asymmetric.utils import decode_dss_signature

from imagegen.errors import BadInputError
from imagegen.proof.documents import PROVENANCE
from imagegen.proof.signing import Signer, check_envelope, keyid, load_public_key

STATEMENT = json.dumps({"_type": "https://in-toto.io/Statement/v1", "subject": []}).encode() + b"\n"
P256_COMMAND = "openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256"
ED25519_COMMAND = "openssl genpkey -algorithm ed25519"


def private_pem(key: Any, password: bytes | None = None) -> bytes:
    encryption: serialization.KeySerializationEncryption = (
        serialization.BestAvailableEncryption(password) if password else serialization.NoEncryption()
    )
    data: bytes = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, encryption)
    return data


def public_pem(key: Any) -> bytes:
    data: bytes = key.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    return data


def write(path: Path, data: bytes) -> Path:
    path.write_bytes(data)
    return path


def openssl(*args: str) -> bytes:
    if shutil.which("openssl") is None:
        pytest.skip("no openssl: apt-get install openssl")
    return subprocess.run(["openssl", *args], check=True, capture_output=True, timeout=60).stdout


def spec_pae(payload_type: str, payload: bytes) -> bytes:
    """PAE as the DSSE v1 protocol spells it: "DSSEv1" SP LEN(type) SP type SP LEN(body) SP body,
    LEN as ASCII decimal with no leading zeros."""
    kind = payload_type.encode("utf-8")
    return b" ".join([b"DSSEv1", str(len(kind)).encode(), kind, str(len(payload)).encode(), payload])


def test_a_p256_key_made_by_the_documented_openssl_command_signs_and_verifies(tmp_path: Path) -> None:
    key_file = tmp_path / "key.pem"
    openssl("genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256", "-out", str(key_file))
    assert key_file.read_bytes().startswith(b"-----BEGIN PRIVATE KEY-----")  # PKCS#8
    pub_file = write(tmp_path / "pub.pem", openssl("pkey", "-in", str(key_file), "-pubout"))
    signer = Signer.from_file(key_file)
    envelope = signer.envelope(STATEMENT)
    assert check_envelope(envelope, STATEMENT, load_public_key(pub_file)) is None
    assert check_envelope(envelope, STATEMENT, load_public_key(key_file)) is None  # the private key too
    # The key id: sha256 of the DER SubjectPublicKeyInfo, as openssl writes it.
    der = openssl("pkey", "-in", str(key_file), "-pubout", "-outform", "DER")
    assert signer.keyid == hashlib.sha256(der).hexdigest()
    assert json.loads(envelope)["signatures"][0]["keyid"] == signer.keyid


def test_a_sec1_p256_key_reads_too(tmp_path: Path) -> None:
    key = ec.generate_private_key(ec.SECP256R1())
    sec1 = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.TraditionalOpenSSL,
        serialization.NoEncryption(),
    )
    assert sec1.startswith(b"-----BEGIN EC PRIVATE KEY-----")
    envelope = Signer.from_file(write(tmp_path / "key.pem", sec1)).envelope(STATEMENT)
    assert check_envelope(envelope, STATEMENT, key.public_key()) is None


def test_the_ed25519_key_id_stays_the_raw_keys_sha256(tmp_path: Path) -> None:
    key = ed25519.Ed25519PrivateKey.generate()
    raw = key.public_key().public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    assert len(raw) == 32
    signer = Signer.from_file(write(tmp_path / "key.pem", private_pem(key)))
    assert signer.keyid == keyid(key.public_key()) == hashlib.sha256(raw).hexdigest()


def test_a_p256_envelope_verifies_with_code_that_is_not_imagegens(tmp_path: Path) -> None:
    key = ec.generate_private_key(ec.SECP256R1())
    envelope = json.loads(Signer.from_file(write(tmp_path / "key.pem", private_pem(key))).envelope(STATEMENT))
    assert base64.b64decode(envelope["payload"]) == STATEMENT
    assert envelope["payloadType"] == PROVENANCE.media_type == "application/vnd.in-toto+json"
    signature = base64.b64decode(envelope["signatures"][0]["sig"])
    decode_dss_signature(signature)  # DER: an ASN.1 SEQUENCE of r and s (ValueError otherwise)
    # cryptography's ECDSA verify over the PAE written from the spec (InvalidSignature otherwise).
    key.public_key().verify(
        signature, spec_pae(envelope["payloadType"], STATEMENT), ec.ECDSA(hashes.SHA256())
    )
    with pytest.raises(InvalidSignature):
        key.public_key().verify(signature, STATEMENT, ec.ECDSA(hashes.SHA256()))  # not the bare payload


@pytest.mark.parametrize("kind", ["p256", "ed25519"])
def test_securesystemslib_verifies_our_envelopes(tmp_path: Path, kind: str) -> None:
    pytest.importorskip("securesystemslib", reason="pip install securesystemslib (the dev extra)")
    from securesystemslib.dsse import Envelope
    from securesystemslib.exceptions import VerificationError
    from securesystemslib.signer import SSlibKey

    key: Any = (
        ec.generate_private_key(ec.SECP256R1()) if kind == "p256" else ed25519.Ed25519PrivateKey.generate()
    )
    signer = Signer.from_file(write(tmp_path / "key.pem", private_pem(key)))
    envelope = Envelope.from_dict(json.loads(signer.envelope(STATEMENT)))
    public = SSlibKey.from_crypto(key.public_key(), keyid=signer.keyid)
    assert list(envelope.verify([public], 1)) == [signer.keyid]
    assert envelope.payload == STATEMENT
    # Their verdict on a wrong key of the same kind, under the same key id: refused.
    other: Any = (
        ec.generate_private_key(ec.SECP256R1()) if kind == "p256" else ed25519.Ed25519PrivateKey.generate()
    )
    with pytest.raises(VerificationError):
        envelope.verify([SSlibKey.from_crypto(other.public_key(), keyid=signer.keyid)], 1)


def test_wrong_keys_and_keys_of_the_other_kind_fail_with_a_reason(tmp_path: Path) -> None:
    p256, other_p256 = ec.generate_private_key(ec.SECP256R1()), ec.generate_private_key(ec.SECP256R1())
    ed = ed25519.Ed25519PrivateKey.generate()
    p256_envelope = Signer.from_file(write(tmp_path / "p256.pem", private_pem(p256))).envelope(STATEMENT)
    ed_envelope = Signer.from_file(write(tmp_path / "ed.pem", private_pem(ed))).envelope(STATEMENT)
    keys = {
        name: load_public_key(write(tmp_path / f"{name}.pub.pem", public_pem(key)))
        for name, key in {"p256": p256, "other": other_p256, "ed": ed}.items()
    }
    assert check_envelope(p256_envelope, STATEMENT, keys["p256"]) is None
    assert check_envelope(ed_envelope, STATEMENT, keys["ed"]) is None
    for envelope, key in [
        (p256_envelope, "other"),  # another P-256 key
        (p256_envelope, "ed"),  # an Ed25519 key for an ECDSA signature
        (ed_envelope, "p256"),  # a P-256 key for an Ed25519 signature
        (ed_envelope, "other"),
    ]:
        why = check_envelope(envelope, STATEMENT, keys[key])
        assert why is not None and "no signature verifies" in why, key
        assert keyid(keys[key])[:16] in why
    # An altered statement signed over again by no one: the P-256 signature does not cover it.
    document = json.loads(p256_envelope)
    altered = STATEMENT.replace(b"Statement", b"Statemenu")
    document["payload"] = base64.b64encode(altered).decode()
    assert "no signature verifies" in str(
        check_envelope(json.dumps(document).encode(), altered, keys["p256"])
    )


def refused(kind: str) -> Any:
    return {
        "rsa": lambda: rsa.generate_private_key(public_exponent=65537, key_size=2048),
        "p384": lambda: ec.generate_private_key(ec.SECP384R1()),
        "k256": lambda: ec.generate_private_key(ec.SECP256K1()),
    }[kind]()


@pytest.mark.parametrize(
    ("kind", "named"),
    [("rsa", "an RSA key (2048 bits)"), ("p384", "an ECDSA key on secp384r1"), ("k256", "on secp256k1")],
)
def test_other_kinds_of_key_are_bad_input_naming_both_commands(tmp_path: Path, kind: str, named: str) -> None:
    key = refused(kind)
    for load, data in [
        (Signer.from_file, private_pem(key)),
        (load_public_key, private_pem(key)),
        (load_public_key, public_pem(key)),
    ]:
        with pytest.raises(BadInputError, match="not an Ed25519 or ECDSA P-256 key") as info:
            load(write(tmp_path / "key.pem", data))
        assert named in str(info.value)
        assert info.value.exit_code == 2
        assert P256_COMMAND in str(info.value.hint) and ED25519_COMMAND in str(info.value.hint)


def test_an_encrypted_p256_key_is_bad_input(tmp_path: Path) -> None:
    path = write(tmp_path / "key.pem", private_pem(ec.generate_private_key(ec.SECP256R1()), b"secret"))
    with pytest.raises(BadInputError, match="not an unencrypted PEM private key") as info:
        Signer.from_file(path)
    assert info.value.exit_code == 2 and P256_COMMAND in str(info.value.hint)
    with pytest.raises(BadInputError, match="not a PEM public or private key"):
        load_public_key(path)


def test_the_commands_take_p256_keys_and_refuse_p384_before_the_engine(tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from imagegen.cli import app

    runner = CliRunner()
    env = {"DOCKER_HOST": "tcp://127.0.0.1:9"}  # nothing answers there: a key is judged before it

    def error(*args: str) -> tuple[int, str]:
        result = runner.invoke(app, [*args, "--json"], env=env)
        return result.exit_code, str(json.loads(result.stdout)["error"]["message"])

    p384 = write(tmp_path / "p384.pem", private_pem(refused("p384")))
    for args in (["verify", "some/image:1", "--key"], ["build", "--cpu", "--ops", "cpu_adam", "--sign-key"]):
        code, message = error(*args, str(p384))
        assert code == 2 and "not an Ed25519 or ECDSA P-256 key: it is an ECDSA key on secp384r1" in message
    # A P-256 public key passes the key's check: what stops verify then is the missing engine.
    p256 = write(tmp_path / "p256.pub.pem", public_pem(ec.generate_private_key(ec.SECP256R1())))
    code, message = error("verify", "some/image:1", "--key", str(p256))
    assert code == 3 and "no Docker daemon answers" in message and "key" not in message
