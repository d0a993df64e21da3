"""Documents imagegen reads from others, malformed: a registry's manifest, config or referrer that
is not a JSON object (or not UTF-8), a Docker config whose auth entry is not base64 of UTF-8, and
an SBOM that is not a JSON object (`imagegen sbom` as text, with --json and with -o). Each is one
clear error with a hint and its exit code, never a traceback, and with --json one `{"error": ...}`
document, never nothing.

The registry is a real HTTP server on the loopback serving what each test puts in it."""

from __future__ import annotations

import base64
import json
import os
import stat
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner, Result

from imagegen.cli import app
from imagegen.proof.documents import SBOM
from imagegen.registry.manifest import (
    OCI_INDEX,
    OCI_MANIFEST,
    Descriptor,
    artifact_manifest,
    encode,
    sha256_digest,
)
from tests.unit.contract import assert_json_error, assert_reported

CONFIG_TYPE = "application/vnd.oci.image.config.v1+json"
SBOM_DOC = json.dumps({"bomFormat": "CycloneDX", "specVersion": "1.6", "components": []}).encode()


class _Registry:
    """A loopback registry: manifests and blobs by digest, referrers by subject digest. With
    ``basic_auth``, a request without credentials is answered 401 with a Basic challenge."""

    def __init__(self) -> None:
        self.manifests: dict[str, bytes] = {}
        self.blobs: dict[str, bytes] = {}
        self.referrers: dict[str, bytes] = {}
        self.basic_auth = False
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: object) -> None:
                pass

            def do_GET(self) -> None:
                if owner.basic_auth and "Authorization" not in self.headers:
                    self._send(401, b"", {"WWW-Authenticate": 'Basic realm="test"'})
                    return
                _, _, rest = self.path.partition("/v2/")
                for kind, table, media_type in (
                    ("/manifests/", owner.manifests, OCI_MANIFEST),
                    ("/blobs/", owner.blobs, "application/octet-stream"),
                    ("/referrers/", owner.referrers, OCI_INDEX),
                ):
                    if kind in rest:
                        key = rest.split(kind, 1)[1].split("?", 1)[0]
                        found = table.get(key)
                        if found is not None:
                            self._send(200, found, {"Content-Type": media_type})
                            return
                self._send(404, b"", {})

            def _send(self, code: int, body: bytes, headers: dict[str, str]) -> None:
                self.send_response(code)
                for name, value in {**headers, "Content-Length": str(len(body))}.items():
                    self.send_header(name, value)
                self.end_headers()
                self.wfile.write(body)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.host = f"127.0.0.1:{self.httpd.server_address[1]}"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def manifest(self, body: bytes) -> str:
        """Serve ``body`` as a manifest under its digest; that digest."""
        digest = sha256_digest(body)
        self.manifests[digest] = body
        return digest

    def blob(self, body: bytes) -> str:
        digest = sha256_digest(body)
        self.blobs[digest] = body
        return digest

    def image(self, config: bytes, referrer_manifest: bytes | None = None) -> str:
        """An image whose config blob is ``config``, with one referrer when one is given: the
        reference `sbom` reads (HOST/ops/cpu@DIGEST)."""
        config_digest = self.blob(config)
        subject = encode({
            "schemaVersion": 2, "mediaType": OCI_MANIFEST, "layers": [],
            "config": {"mediaType": CONFIG_TYPE, "digest": config_digest, "size": len(config)},
        })  # fmt: skip
        digest = self.manifest(subject)
        if referrer_manifest is not None:
            listed = Descriptor.of(OCI_MANIFEST, referrer_manifest, artifact_type=SBOM.media_type)
            self.manifest(referrer_manifest)
            self.referrers[digest] = encode(
                {"schemaVersion": 2, "mediaType": OCI_INDEX, "manifests": [listed.to_json()]}
            )
        return f"{self.host}/ops/cpu@{digest}"

    def image_with_sbom(self, document: bytes) -> str:
        """An image whose SBOM (a referrer, named by the config's label) is ``document``."""
        config = json.dumps({"config": {"Labels": {SBOM.label: sha256_digest(document)}}}).encode()
        image = self.image(config)
        subject = Descriptor.of(OCI_MANIFEST, self.manifests[image.rsplit("@", 1)[1]])
        artifact = artifact_manifest(document, SBOM.media_type, subject, filename=SBOM.filename)
        for blob in artifact.blobs:
            self.blob(blob)
        self.manifest(artifact.manifest)
        self.referrers[subject.digest] = encode(
            {"schemaVersion": 2, "mediaType": OCI_INDEX, "manifests": [artifact.descriptor.to_json()]}
        )
        return image


@pytest.fixture
def registry() -> Iterator[_Registry]:
    server = _Registry()
    yield server
    server.httpd.shutdown()


def _invoke(args: list[str], env: dict[str, str] | None = None) -> Result:
    return CliRunner().invoke(app, args, env={"IMAGEGEN_DEBUG": "", "COLUMNS": "200", **(env or {})})


def _assert_failed_both_ways(
    args: list[str], code: int, fragment: str, env: dict[str, str] | None = None
) -> None:
    assert_reported(_invoke(args, env), code=code, fragment=fragment)
    assert_json_error(_invoke([*args, "--json"], env), code=code, fragment=fragment)


# ------------------------------------------------------------------ a registry's documents

NOT_OBJECTS = [b"[]", b'"text"', b"not json", b"\xff\xfe{}", b""]


@pytest.mark.parametrize("body", NOT_OBJECTS, ids=["list", "string", "not-json", "not-utf8", "empty"])
def test_a_manifest_that_is_not_a_json_object_fails_by_name(registry: _Registry, body: bytes) -> None:
    image = f"{registry.host}/ops/cpu@{registry.manifest(body)}"
    _assert_failed_both_ways(["sbom", image], 1, "not a JSON object")


def _sbom_referrer(registry: _Registry) -> bytes:
    """A well-formed SBOM referrer (its blobs served): what makes `sbom` go on to the config."""
    artifact = artifact_manifest(SBOM_DOC, SBOM.media_type, Descriptor.of(OCI_MANIFEST, b"x"))
    for blob in artifact.blobs:
        registry.blob(blob)
    return artifact.manifest


@pytest.mark.parametrize("body", NOT_OBJECTS, ids=["list", "string", "not-json", "not-utf8", "empty"])
def test_a_config_that_is_not_a_json_object_fails_by_name(registry: _Registry, body: bytes) -> None:
    image = registry.image(body, referrer_manifest=_sbom_referrer(registry))
    _assert_failed_both_ways(["sbom", image], 1, "not a JSON object")


@pytest.mark.parametrize("body", NOT_OBJECTS, ids=["list", "string", "not-json", "not-utf8", "empty"])
def test_a_referrer_that_is_not_a_json_object_fails_by_name(registry: _Registry, body: bytes) -> None:
    image = registry.image(b"{}", referrer_manifest=body)
    _assert_failed_both_ways(["sbom", image], 1, "not a JSON object")


@pytest.mark.parametrize(
    ("manifest", "fragment"),
    [
        ({"schemaVersion": 2}, "config"),
        ({"schemaVersion": 2, "config": "sha256:x"}, "config"),
        ({"schemaVersion": 2, "config": {"digest": 5}}, "config"),
        ({"schemaVersion": 2, "manifests": ["not a descriptor"]}, "index"),
    ],
    ids=["no-config", "config-not-object", "config-digest-not-text", "index-of-strings"],
)
def test_a_manifest_of_the_wrong_shape_fails_by_name(
    registry: _Registry, manifest: dict[str, Any], fragment: str
) -> None:
    digest = registry.manifest(json.dumps(manifest).encode())
    referrer = _sbom_referrer(registry)
    listed = Descriptor.of(OCI_MANIFEST, referrer, artifact_type=SBOM.media_type)
    registry.manifest(referrer)
    registry.referrers[digest] = encode(
        {"schemaVersion": 2, "mediaType": OCI_INDEX, "manifests": [listed.to_json()]}
    )
    image = f"{registry.host}/ops/cpu@{digest}"
    code = 2 if fragment == "index" else 1  # an index is the user's to narrow down (a platform)
    _assert_failed_both_ways(["sbom", image], code, fragment)


def test_a_referrer_whose_layer_is_no_descriptor_fails_by_name(registry: _Registry) -> None:
    referrer = json.dumps({"schemaVersion": 2, "layers": [{"digest": 5}]}).encode()
    image = registry.image(b"{}", referrer_manifest=referrer)
    _assert_failed_both_ways(["sbom", image], 1, "descriptor")


# ------------------------------------------------------------------ Docker's config


@pytest.mark.parametrize(
    "entry",
    ["!!! not base64 !!!", base64.b64encode(b"\xff\xfe:secret").decode()],
    ids=["not-base64", "not-utf8"],
)
def test_a_docker_config_auth_entry_that_is_not_base64_utf8_is_bad_input(
    registry: _Registry, tmp_path: Path, entry: str
) -> None:
    registry.basic_auth = True
    (tmp_path / "config.json").write_text(json.dumps({"auths": {registry.host: {"auth": entry}}}))
    image = registry.image_with_sbom(SBOM_DOC)
    _assert_failed_both_ways(["sbom", image], 2, "auth entry", env={"DOCKER_CONFIG": str(tmp_path)})


# ------------------------------------------------------------------ the SBOM itself

SBOMS = [b"[]", b"not json", b"\xff\xfe{}", b'"text"', b'{"bomFormat": "SPDX"}', b'{"components": 5}']
SBOM_IDS = ["list", "not-json", "not-utf8", "string", "not-cyclonedx", "components-not-list"]


@pytest.mark.parametrize("document", SBOMS, ids=SBOM_IDS)
def test_an_sbom_that_is_not_a_cyclonedx_object_fails_by_name(
    registry: _Registry, workdir: Path, document: bytes
) -> None:
    # Exit 1: the reference is fine and the document is the one the image's label names, but it
    # is no SBOM imagegen seals, as a verification that fails.
    image = registry.image_with_sbom(document)
    assert_reported(_invoke(["sbom", image]), code=1, fragment="SBOM")
    if document.startswith(b"{"):  # a JSON object: --json prints it as the image holds it
        assert _invoke(["sbom", image, "--json"]).stdout.encode() == document
    else:  # no JSON object: --json and -o refuse it too, and write nothing
        assert_json_error(_invoke(["sbom", image, "--json"]), code=1, fragment="SBOM")
        assert_reported(_invoke(["sbom", image, "-o", "sbom.json"]), code=1, fragment="SBOM")
        assert_json_error(_invoke(["sbom", image, "-o", "sbom.json", "--json"]), code=1, fragment="SBOM")
        assert list(workdir.iterdir()) == []


def test_a_good_sbom_is_read_and_written_byte_for_byte(registry: _Registry, workdir: Path) -> None:
    image = registry.image_with_sbom(SBOM_DOC)
    result = _invoke(["sbom", image])
    assert result.exit_code == 0, result.output
    assert "CycloneDX 1.6" in result.stdout
    assert _invoke(["sbom", image, "--json"]).stdout.encode() == SBOM_DOC
    assert _invoke(["sbom", image, "-o", "sbom.json"]).exit_code == 0
    assert Path("sbom.json").read_bytes() == SBOM_DOC


@pytest.mark.skipif(os.geteuid() != 0, reason="making a device node needs root")
def test_sbom_output_onto_a_device_keeps_the_device(registry: _Registry, tmp_path: Path) -> None:
    null = tmp_path / "null"
    os.mknod(null, stat.S_IFCHR | 0o666, os.makedev(1, 3))
    result = _invoke(["sbom", registry.image_with_sbom(SBOM_DOC), "-o", str(null)])
    assert result.exit_code == 0, result.output
    assert stat.S_ISCHR(null.lstat().st_mode)
