"""Image references the engine would refuse are refused first, by our grammar (exit 2): a first
component in upper case that is no registry host (`Foo/bar`: dockerd reads it as a Docker Hub
path, which must be lower case), and a digest that is not `algorithm:hex` of its algorithm's
length (`@sha256:zz`), which used to reach the registry and come back as its 500 (exit 1)."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from typer.testing import CliRunner, Result

from imagegen.cli import app
from imagegen.errors import BadInputError
from imagegen.imagespec.reference import reference_problem
from imagegen.registry.distribution import parse_reference
from tests.unit.contract import assert_json_error, assert_reported

HEX64 = "0123456789abcdef" * 4
NO_ENGINE = {"DOCKER_HOST": "tcp://127.0.0.1:9", "IMAGEGEN_DEBUG": "", "COLUMNS": "200"}

REFERENCES = [
    ("Foo/bar", "upper-case"),
    ("Foo/bar:1", "upper-case"),
    ("LOCALHOST/bar", "upper-case"),  # only `localhost` itself is a host without '.' or ':'
    ("Foo.example/bar", None),  # a host: upper case is fine there
    ("FOO:5000/bar", None),
    ("localhost/bar", None),
    ("a@sha256:" + HEX64, None),
    ("reg.example:5000/a/b:1@sha256:" + HEX64, None),
    ("a@sha384:" + "0" * 96, None),
    ("a@sha512:" + "0" * 128, None),
    ("a@sha256:zz", "digest"),
    ("a@sha256:" + HEX64[:-1], "digest"),
    ("a@sha256:" + HEX64 + "0", "digest"),
    ("a@sha256:" + HEX64.upper(), "digest"),
    ("a@sha512:" + HEX64, "digest"),  # sha256's length under sha512's name
    ("a@md5:" + "0" * 32, "sha256"),
    ("a@" + HEX64, "digest"),
    ("a@", "digest"),
]


@pytest.mark.parametrize(("ref", "problem"), REFERENCES, ids=[r[:40] for r, _ in REFERENCES])
def test_the_grammar_refuses_what_the_engine_refuses(ref: str, problem: str | None) -> None:
    found = reference_problem(ref)
    if problem is None:
        assert found is None, found
    else:
        assert found is not None and problem in found, found


@pytest.mark.parametrize("name", ["127.0.0.1:5000/a@sha256:zz", "127.0.0.1:5000/a@sha256:" + HEX64.upper()])
def test_the_registry_client_refuses_a_malformed_digest(name: str) -> None:
    with pytest.raises(BadInputError, match="digest"):
        parse_reference(name)


def _invoke(args: list[str]) -> Result:
    return CliRunner().invoke(app, args, env=NO_ENGINE)


@pytest.mark.parametrize("command", ["verify", "size", "sbom"])
@pytest.mark.parametrize(
    "image", ["Foo/bar", "Foo/bar:1", "imagegen@sha256:zz", "imagegen@sha256:" + "0" * 32]
)
def test_commands_refuse_such_a_reference_before_the_engine(command: str, image: str) -> None:
    # No engine answers at DOCKER_HOST: exit 2 here, not 3, shows nothing was asked of it.
    assert_reported(_invoke([command, image]), fragment="not a valid image reference")
    assert_json_error(_invoke([command, image, "--json"]), fragment="not a valid image reference")


class _Registry:
    """A loopback server that answers every request with a 500, and counts them."""

    def __init__(self) -> None:
        self.requests: list[str] = []
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: object) -> None:
                pass

            def do_GET(self) -> None:
                owner.requests.append(self.path)
                self.send_response(500)
                self.send_header("Content-Length", "0")
                self.end_headers()

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.host = f"127.0.0.1:{self.httpd.server_address[1]}"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()


@pytest.fixture
def registry() -> Iterator[_Registry]:
    server = _Registry()
    yield server
    server.httpd.shutdown()


@pytest.mark.parametrize("digest", ["sha256:zz", "sha256:" + HEX64.upper(), "sha1:" + "0" * 40])
def test_sbom_of_a_malformed_registry_digest_never_reaches_the_registry(
    registry: _Registry, digest: str
) -> None:
    image = f"{registry.host}/ops/cpu@{digest}"
    assert_reported(_invoke(["sbom", image]), fragment="digest")
    assert_json_error(_invoke(["sbom", image, "--json"]), fragment="digest")
    assert registry.requests == []
