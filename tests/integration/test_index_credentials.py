"""A torch index that takes a password: the build gets it, nothing else does.

A small index on the docker bridge's gateway answers only requests with its user and password
(HTTP basic auth over HTTPS, as a private index would; pip takes plain HTTP from the loopback
only): a PEP 503 simple index of the machine's local wheels (torch's and NumPy's dependencies;
torch itself comes from the wheelhouse), its certificate from a CA made here and passed with
``--ca-cert``. ``imagegen build``
builds a CPU image with ``--torch-index https://USER:PASSWORD@GATEWAY:PORT/simple``; the index
must have seen pip ask with the password, and the password must be in none of: the command's
output, the Dockerfile, ``docker history --no-trunc``, ``docker inspect`` (labels and all), any
byte of ``docker save`` (every layer), the SBOM and provenance the image carries and their
copies on the host.
"""

from __future__ import annotations

import base64
import contextlib
import datetime
import functools
import ipaddress
import json
import secrets
import ssl
import subprocess
import threading
from collections.abc import Iterator
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from tests.integration.conftest import (
    CA_CERT,
    STANDIN_DEVEL,
    STANDIN_RUNTIME,
    WHEELHOUSE,
    bridge_gateway,
    imagegen,
)

pytestmark = [pytest.mark.docker, pytest.mark.timeout(1800)]

# A PEP 503 index of local wheels (simple/<project>/index.html linking ../../files/<wheel>).
LOCAL_INDEX = Path("/opt/pypi")
TAG = "imagegen-it/index-credentials:cpu_adam"
USER = "imagegen-it"
DOCKER = "/usr/bin/docker"


class _Index(SimpleHTTPRequestHandler):
    """Files of ``directory``, for requests with the right basic auth only; each request noted."""

    def __init__(self, *args: Any, authorization: str, seen: list[tuple[str, bool]], **kwargs: Any) -> None:
        self._authorization = authorization
        self._seen = seen
        super().__init__(*args, **kwargs)

    def _authorized(self) -> bool:
        ok = self.headers.get("Authorization") == self._authorization
        self._seen.append((self.path, ok))
        if not ok:
            self.send_response(401)
            self.send_header("WWW-Authenticate", 'Basic realm="imagegen-it"')
            self.send_header("Content-Length", "0")
            self.end_headers()
        return ok

    def do_GET(self) -> None:
        if self._authorized():
            super().do_GET()

    def do_HEAD(self) -> None:
        if self._authorized():
            super().do_HEAD()

    def log_message(self, format: str, *args: Any) -> None:
        pass  # the requests are kept in `seen`


def _name(text: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, text)])


def _certificate(
    subject: str, issuer: str, public_key: Any, signer: Any, extensions: list[tuple[Any, bool]]
) -> x509.Certificate:
    now = datetime.datetime.now(datetime.timezone.utc)
    builder = (
        x509.CertificateBuilder()
        .subject_name(_name(subject))
        .issuer_name(_name(issuer))
        .public_key(public_key)
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(hours=1))
        .not_valid_after(now + datetime.timedelta(days=1))
    )
    for extension, critical in extensions:
        builder = builder.add_extension(extension, critical=critical)
    return builder.sign(signer, hashes.SHA256())


def tls_files(folder: Path, address: str) -> tuple[Path, Path, Path]:
    """(CA certificate, server certificate, server key) for ``address``, in PEM: a CA and a leaf
    with the extensions a strict verifier asks for (key identifiers, usages, the IP as SAN)."""
    ca_key, key = ec.generate_private_key(ec.SECP256R1()), ec.generate_private_key(ec.SECP256R1())
    ca_ski = x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key())
    signs_certificates = x509.KeyUsage(
        digital_signature=False, content_commitment=False, key_encipherment=False,
        data_encipherment=False, key_agreement=False, key_cert_sign=True, crl_sign=True,
        encipher_only=False, decipher_only=False,
    )  # fmt: skip
    ca = _certificate(
        "imagegen-it CA", "imagegen-it CA", ca_key.public_key(), ca_key,
        [(x509.BasicConstraints(ca=True, path_length=0), True), (signs_certificates, True), (ca_ski, False)],
    )  # fmt: skip
    server = _certificate(
        address, "imagegen-it CA", key.public_key(), ca_key,
        [
            (x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address(address))]), False),
            (x509.BasicConstraints(ca=False, path_length=None), True),
            (x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), False),
            (x509.AuthorityKeyIdentifier.from_issuer_subject_key_identifier(ca_ski), False),
            (x509.SubjectKeyIdentifier.from_public_key(key.public_key()), False),
        ],
    )  # fmt: skip
    paths = (folder / "ca.pem", folder / "server.pem", folder / "server.key")
    paths[0].write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    paths[1].write_bytes(server.public_bytes(serialization.Encoding.PEM))
    paths[2].write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )
    )
    return paths


@pytest.fixture(scope="module")
def private_index(
    docker_client: Any, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[str, str, list[tuple[str, bool]], Path]]:
    """(index URL with its credentials, the password, the requests seen, the CA bundle a build
    needs) of a password-protected index on the docker bridge's gateway, which a build's RUN
    steps reach the host by."""
    if not (LOCAL_INDEX / "simple" / "sympy").is_dir():
        pytest.skip(f"no local PEP 503 index at {LOCAL_INDEX} with torch's dependencies")
    gateway = bridge_gateway(docker_client)
    folder = tmp_path_factory.mktemp("index-tls")
    ca, certificate, key = tls_files(folder, gateway)
    # The host's bundle too: the build's other downloads may pass an intercepting proxy.
    bundle = folder / "bundle.pem"
    bundle.write_bytes((CA_CERT.read_bytes() if CA_CERT.is_file() else b"") + b"\n" + ca.read_bytes())
    password = "pw-" + secrets.token_hex(16)
    token = base64.b64encode(f"{USER}:{password}".encode()).decode()
    seen: list[tuple[str, bool]] = []
    handler = functools.partial(_Index, directory=str(LOCAL_INDEX), authorization=f"Basic {token}", seen=seen)
    server = ThreadingHTTPServer((gateway, 0), handler)
    tls = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    tls.load_cert_chain(certificate, key)
    server.socket = tls.wrap_socket(server.socket, server_side=True)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"https://{USER}:{password}@{gateway}:{server.server_port}/simple", password, seen, bundle
    finally:
        server.shutdown()
        server.server_close()


@pytest.fixture(scope="module")
def built(private_index: tuple[str, str, list[tuple[str, bool]], Path], docker_client: Any) -> Iterator[Any]:
    url, _, _, bundle = private_index
    flags = [
        "--cpu", "--ops", "cpu_adam", "--base-devel", STANDIN_DEVEL, "--base-runtime", STANDIN_RUNTIME,
        "--wheelhouse", str(WHEELHOUSE), "--ca-cert", str(bundle), "--torch-index", url, "--tag", TAG,
    ]  # fmt: skip
    build = imagegen("build", *flags, "--json")
    dockerfile = imagegen("dockerfile", *flags[:-2])
    yield build, dockerfile
    with contextlib.suppress(Exception):
        docker_client.images.remove(TAG, force=True)


def _docker(*args: str) -> bytes:
    return subprocess.run([DOCKER, *args], capture_output=True, check=True, timeout=600).stdout


def test_the_build_gets_the_password_and_nothing_keeps_it(
    built: Any, private_index: tuple[str, str, list[tuple[str, bool]], Path]
) -> None:
    build, dockerfile = built
    url, password, seen, _ = private_index
    assert build.returncode == 0, build.stderr[-5000:]
    assert dockerfile.returncode == 0, dockerfile.stderr[-2000:]
    # The secret reached pip: the index answered it (and nothing got in without the password).
    assert any(ok and path.startswith("/simple/") for path, ok in seen), seen
    assert any(ok and path.startswith("/files/") for path, ok in seen), seen
    assert all(ok for _, ok in seen), seen

    # Each form the password could take: as typed, and inside a basic-auth header.
    forms = [password.encode(), base64.b64encode(f"{USER}:{password}".encode())]
    proof = build.json()["proof"]
    places: dict[str, bytes] = {
        "the output of imagegen build": (build.stdout + build.stderr).encode(),
        "the Dockerfile": (dockerfile.stdout + dockerfile.stderr).encode(),
        "docker history": _docker("history", "--no-trunc", TAG),
        "docker inspect": _docker("inspect", TAG),
        # Uncompressed layer tars: every file of every layer, the sealed SBOM and provenance too.
        "docker save": _docker("save", TAG),
    }
    for kind, document in proof["documents"].items():
        places[f"the {kind} on the host"] = Path(document["path"]).read_bytes()
    for what, data in places.items():
        assert not any(form in data for form in forms), f"the password is in {what}"

    # What the proof says instead: the index, its credentials as ***.
    assert "--mount=type=secret,id=torch-index" in dockerfile.stdout
    assert "https://***@" + url.rsplit("@", 1)[1] in dockerfile.stdout
    statement = json.loads(Path(proof["documents"]["provenance"]["path"]).read_text())
    parameters = statement["predicate"]["buildDefinition"]["externalParameters"]["spec"]
    assert parameters["torch_index"] == "https://***@" + url.rsplit("@", 1)[1], parameters
