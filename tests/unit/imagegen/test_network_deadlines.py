"""Every network answer has a deadline for the whole of it, not only for each read.

A server that sends one byte at a time, slowly, never trips a socket timeout: before these
deadlines ``imagegen catalog --check-upstream`` and ``imagegen sbom REGISTRY/NAME@DIGEST`` waited
on such a server until they were killed. Here real HTTP servers on the loopback trickle their
answer (the head, or the body after a prompt head) while the deadline is a second: the command
ends within a few, with one message naming the host and the deadline: exit 3 for the package
index (it cannot be read), exit 1 for a registry (its failures are the command's, as for a push).
Each trickling server stops once its test is over, or after ``TRICKLE_BYTES``, so that code
without a deadline fails these tests instead of hanging them.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from typer.testing import CliRunner, Result

from imagegen.cli import app
from imagegen.compat import headers, index_reader, upstream
from imagegen.errors import BuildFailedError, IndexUnreachableError
from imagegen.registry import distribution as registry
from imagegen.registry.manifest import sha256_digest
from tests._http import QuietHandler, Served, serve
from tests.unit.contract import assert_json_error, assert_reported

pytestmark = pytest.mark.timeout(120)

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "index"
DEADLINE = 1.0
INTERVAL = 0.2  # between two bytes of a trickle: far inside any per-read timeout
TRICKLE_BYTES = 60  # 12 s of trickle at most: code without a deadline ends, late, and fails
SLACK = 4.0  # what a command may take past its deadline (start-up, the answers before)


@dataclass
class Trickle:
    """Which paths trickle (a path prefix -> "head" or "body"), and what became of each trickle."""

    paths: dict[str, str] = field(default_factory=dict)
    stop: threading.Event = field(default_factory=threading.Event)
    cut: threading.Event = field(default_factory=threading.Event)  # the client shut its end

    def send(self, handler: QuietHandler, body: bytes, kind: str, phase: str, status: str = "200 OK") -> None:
        head = (f"HTTP/1.1 {status}\r\nContent-Type: {kind}\r\nContent-Length: {len(body)}\r\n\r\n").encode()
        prompt, slow = (b"", head + body) if phase == "head" else (head, body)
        try:
            handler.wfile.write(prompt)
            handler.wfile.flush()
            for byte in slow[:TRICKLE_BYTES]:
                if self.stop.wait(INTERVAL):
                    return
                handler.wfile.write(bytes([byte]))
                handler.wfile.flush()
        except OSError:
            self.cut.set()
        handler.close_connection = True

    def phase(self, path: str) -> str | None:
        return next((p for prefix, p in self.paths.items() if path.startswith(prefix)), None)


@pytest.fixture
def trickle() -> Iterator[Trickle]:
    made = Trickle()
    yield made
    made.stop.set()


@pytest.fixture
def short_deadlines(monkeypatch: pytest.MonkeyPatch) -> None:
    """A second for each answer, index and registry alike, in commands run in this process."""
    monkeypatch.setattr(index_reader, "ANSWER_DEADLINE", DEADLINE)
    monkeypatch.setattr(registry, "ANSWER_DEADLINE", DEADLINE)


def _invoke(*args: str) -> tuple[Result, float]:
    started = time.monotonic()
    result = CliRunner().invoke(app, list(args), env={"IMAGEGEN_DEBUG": "", "COLUMNS": "200"})
    return result, time.monotonic() - started


# ------------------------------------------------------------------ the package index


class _Index:
    """The recorded index; the paths ``trickle`` names trickle."""

    def __init__(self, trickle: Trickle) -> None:
        pages = {p.stem: p.read_bytes() for p in FIXTURES.glob("*.json")}

        class Handler(QuietHandler):
            def do_GET(self) -> None:
                name = self.path.strip("/").split("/")[-1]
                phase = trickle.phase(self.path)
                if name not in pages:
                    self.send_body(404, b"", "text/plain")
                elif phase is not None:
                    trickle.send(self, pages[name], headers.SIMPLE_JSON, phase)
                else:
                    self.send_body(200, pages[name], headers.SIMPLE_JSON)

        self.served: Served = serve(Handler)
        self.url = self.served.root + "/simple"
        self.host = self.served.root.removeprefix("http://")


@pytest.fixture
def index(trickle: Trickle) -> Iterator[_Index]:
    served = _Index(trickle)
    yield served
    served.served.close()


@pytest.mark.parametrize("phase", ["head", "body"])
@pytest.mark.usefixtures("short_deadlines")
def test_a_trickling_index_is_cut_off_at_the_deadline(index: _Index, trickle: Trickle, phase: str) -> None:
    trickle.paths["/simple/nvidia-cuda-nvcc/"] = phase
    done, took = _invoke("catalog", "--check-upstream", "--index-url", index.url)
    assert took < DEADLINE + SLACK, (took, done.output)
    assert_reported(done, code=3, fragment="did not send nvidia-cuda-nvcc's page within 1 s")
    assert index.host in done.stderr


@pytest.mark.usefixtures("short_deadlines")
def test_a_trickling_index_is_cut_off_with_json_too(index: _Index, trickle: Trickle) -> None:
    trickle.paths["/simple/torch/"] = "body"
    done, took = _invoke("catalog", "--check-upstream", "--index-url", index.url, "--json")
    assert took < DEADLINE + SLACK, (took, done.output)
    assert_json_error(done, code=3, fragment="did not send torch's page within 1 s")


def test_the_index_deadline_is_a_parameter(index: _Index, trickle: Trickle) -> None:
    trickle.paths["/simple/torch/"] = "body"
    started = time.monotonic()
    with pytest.raises(IndexUnreachableError, match=r"torch's page within 0\.5 s"):
        upstream.read(index.url, headers.session(), deadline=0.5)
    assert time.monotonic() - started < 0.5 + SLACK
    # The connection whose head had come was shut, which ended the server's trickle at once.
    assert trickle.cut.wait(3 * INTERVAL + 1)


@pytest.fixture
def file_host(trickle: Trickle) -> Iterator[str]:
    """An index whose torch wheels (200 bytes each) sit on a host that trickles every range's
    answer: a 206 of the length asked, a byte at a time. Yields the index's URL."""
    page = json.loads((FIXTURES / "torch.json").read_text())
    for entry in page["files"]:
        entry["size"] = 200

    class Handler(QuietHandler):
        def do_GET(self) -> None:
            if self.path == "/simple/torch/":
                self.send_body(200, json.dumps(page).encode(), headers.SIMPLE_JSON)
            else:
                start, end = (int(x) for x in self.headers["Range"].removeprefix("bytes=").split("-"))
                trickle.send(self, b"P" * (end - start + 1), "application/zip", "body", "206 Partial Content")

    served = serve(Handler)
    yield served.root + "/simple"
    served.close()


def test_a_trickling_file_host_is_cut_off_at_the_deadline(file_host: str) -> None:
    # The newest torch's wheel is read by ranges: its file host trickles each range's answer.
    newest = "torch-2.15.0-cp311-cp311-manylinux_2_28_x86_64.whl"
    project = index_reader.read_project("torch", file_host, headers.session())
    with pytest.raises(IndexUnreachableError, match=rf"did not send bytes \d+-\d+ of {newest} within 0\.5 s"):
        index_reader.requirements(project, "2.15.0", file_host, headers.session(), 0.5)


def test_torchs_headers_from_a_trickling_index_are_cut_off(
    index: _Index, trickle: Trickle, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # `make compat`'s header reader: the torch page trickles its body.
    monkeypatch.setattr(headers, "ANSWER_DEADLINE", DEADLINE)
    trickle.paths["/simple/torch/"] = "body"
    started = time.monotonic()
    with pytest.raises(IndexUnreachableError, match=r"did not send an answer whole within 1 s"):
        headers.fetch_headers("2.15.0", index.url, {"XDG_CACHE_HOME": str(tmp_path)}, headers.session({}))
    assert time.monotonic() - started < DEADLINE + SLACK
    assert not list(tmp_path.rglob("include")), "nothing half-written in the cache"


def test_torchs_headers_from_a_trickling_file_host_are_cut_off(
    file_host: str, trickle: Trickle, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The wheel's ranged reads trickle: each window's deadline is the page's plus its size's.
    monkeypatch.setattr(headers, "ANSWER_DEADLINE", DEADLINE)
    started = time.monotonic()
    with pytest.raises(IndexUnreachableError, match=r"within 1 s"):
        headers.fetch_headers("2.15.0", file_host, {"XDG_CACHE_HOME": str(tmp_path)}, headers.session({}))
    assert time.monotonic() - started < DEADLINE + SLACK
    assert trickle.cut.wait(3 * INTERVAL + 1)


# ------------------------------------------------------------------ a registry


class _Registry:
    """A registry whose every manifest trickles (its head or its body, as ``phase`` says)."""

    def __init__(self, trickle: Trickle, phase: str) -> None:
        self.manifest = b'{"schemaVersion": 2}'

        class Handler(QuietHandler):
            def do_GET(self) -> None:
                trickle.send(self, manifest, "application/vnd.oci.image.manifest.v1+json", phase)

        manifest = self.manifest
        self.served: Served = serve(Handler)
        self.host = self.served.root.removeprefix("http://")
        self.image = f"{self.host}/ops/cpu@{sha256_digest(self.manifest)}"


@pytest.mark.parametrize("phase", ["head", "body"])
@pytest.mark.usefixtures("short_deadlines")
def test_sbom_of_a_trickling_registry_is_cut_off_at_the_deadline(trickle: Trickle, phase: str) -> None:
    served = _Registry(trickle, phase)
    try:
        done, took = _invoke("sbom", served.image)
        assert took < DEADLINE + SLACK, (took, done.output)
        assert_reported(done, code=1, fragment=f"registry {served.host} did not answer GET")
        assert "within 1 s" in done.stderr
        as_json, took = _invoke("sbom", served.image, "--json")
        assert took < DEADLINE + SLACK, (took, as_json.output)
        assert_json_error(as_json, code=1, fragment="within 1 s")
    finally:
        served.served.close()


def test_the_registry_deadline_is_a_parameter(trickle: Trickle) -> None:
    served = _Registry(trickle, "body")
    started = time.monotonic()
    try:
        with (
            registry.RegistryClient(served.host, deadline=0.5) as client,
            pytest.raises(BuildFailedError, match=r"within 0\.5 s"),
        ):
            client.get_manifest("ops/cpu", sha256_digest(served.manifest))
    finally:
        served.served.close()
    assert time.monotonic() - started < 0.5 + SLACK


def test_an_upload_has_more_time_by_its_size() -> None:
    # A registry that answers each PUT a second after it has the body: past a half-second
    # deadline for a small manifest, inside it for one of 768 KiB (three seconds more: a margin
    # that holds on a loaded machine, where the half-second one alone would still fail it).
    class Slow(QuietHandler):
        def do_PUT(self) -> None:
            self.rfile.read(int(self.headers["Content-Length"]))
            time.sleep(1.0)
            self.send_body(201, b"", "text/plain")

    served = serve(Slow)
    host = served.root.removeprefix("http://")
    kind = "application/vnd.oci.image.manifest.v1+json"
    try:
        with registry.RegistryClient(host, deadline=0.5) as client:
            with pytest.raises(
                BuildFailedError, match=rf"registry {host} did not answer PUT .* within 0\.5 s"
            ):
                client.put_manifest("ops/cpu", "small", b"{}", kind)
            assert (
                client.put_manifest("ops/cpu", "large", b" " * (3 * registry.UPLOAD_RATE), kind).status_code
                == 201
            )
    finally:
        served.close()
