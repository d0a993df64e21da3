"""A push whose image reached the registry but whose proof the registry refused: the failure says
the tag is out there without its SBOM and provenance, by digest, instead of a bare upload error.

The registry here is a small HTTP server that holds the pushed manifest and refuses every blob
upload (403 DENIED), as a registry with a repository policy against artifacts does; the image
is a local one, as ``docker push`` leaves it."""

from __future__ import annotations

import hashlib
import http.server
import json
import threading
from collections.abc import Iterator
from typing import Any

import pytest

from imagegen.errors import BuildFailedError
from imagegen.oci.publish import attach_proof
from imagegen.proof.documents import PROVENANCE, SBOM, Document, ProofDocuments
from imagegen.registry.manifest import DOCKER_MANIFEST
from tests.integration.conftest import STANDIN_RUNTIME

pytestmark = pytest.mark.docker

MANIFEST = json.dumps(
    {
        "schemaVersion": 2,
        "mediaType": DOCKER_MANIFEST,
        "config": {"mediaType": "application/vnd.docker.container.image.v1+json", "size": 2,
                   "digest": "sha256:" + hashlib.sha256(b"{}").hexdigest()},
        "layers": [],
    }
).encode()  # fmt: skip


class _RefusingRegistry(http.server.BaseHTTPRequestHandler):
    """Serves one pushed manifest; refuses every upload."""

    def log_message(self, *args: Any) -> None:  # quiet test output
        pass

    def _answer(self, code: int, body: bytes = b"", content_type: str = "application/json") -> None:
        self.send_response(code)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def do_GET(self) -> None:
        if "/manifests/" in self.path:
            self._answer(200, MANIFEST, DOCKER_MANIFEST)
        else:
            self._answer(200 if self.path == "/v2/" else 404, b"{}")

    def do_HEAD(self) -> None:
        self._answer(404)

    def do_POST(self) -> None:
        denied = {"errors": [{"code": "DENIED", "message": "artifacts are not allowed here"}]}
        self._answer(403, json.dumps(denied).encode())


@pytest.fixture
def refusing_registry() -> Iterator[str]:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _RefusingRegistry)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def test_a_refused_proof_says_the_tag_is_pushed_without_it(
    docker_client: Any, refusing_registry: str
) -> None:
    tag = f"{refusing_registry}/imagegen-it/refused:proof"
    docker_client.api.tag(STANDIN_RUNTIME, tag)
    documents = ProofDocuments(Document(SBOM, b"{}\n"), Document(PROVENANCE, b"{}\n"))
    try:
        with pytest.raises(BuildFailedError) as failure:
            attach_proof(tag, documents)
    finally:
        docker_client.api.remove_image(tag)
    message = failure.value.message
    digest = "sha256:" + hashlib.sha256(MANIFEST).hexdigest()
    assert f"{tag} was pushed ({digest})" in message
    assert "WITHOUT its SBOM and provenance" in message and "403" in message, message
    assert failure.value.hint is not None and "do not deploy that digest" in failure.value.hint
