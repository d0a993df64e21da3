"""``imagegen catalog --check-upstream`` says "current" only about what it read.

A real HTTP server on the loopback serves the recorded index answers (tests/fixtures/index/),
each replaceable: a 404 for a project (a mistyped path, a host without ``/simple``), a page that
is not the PEP 691 shape, a file size that is no number of bytes, a wheel whose METADATA pins
CUDA to no version, a file host that answers a range with fewer bytes than asked. Each is one
exit-3 message naming the project and what was wrong (with --json one ``{"error": ...}``
document), never "current" and never a traceback. An ``--index-url`` that is no http(s) URL of
a host is bad input (exit 2) before anything is read.
"""

from __future__ import annotations

import json
import zipfile
from collections.abc import Callable, Iterator
from io import BytesIO
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner, Result

from imagegen.cli import app
from imagegen.compat import headers
from tests._http import QuietHandler, Served, serve
from tests.unit.contract import assert_json_error, assert_reported

FIXTURES = Path(__file__).resolve().parents[3] / "fixtures" / "index"
NEWEST = "torch-2.15.0-cp311-cp311-manylinux_2_28_x86_64.whl"


def _wheel(metadata: str) -> bytes:
    out = BytesIO()
    with zipfile.ZipFile(out, "w") as wheel:
        wheel.writestr("torch/__init__.py", b"")
        wheel.writestr("torch-2.15.0.dist-info/METADATA", metadata)
    return out.getvalue()


class Index:
    """The recorded index. ``pages[name]``: the JSON of a project's page, or raw bytes, or None
    for a 404; ``metadata``: the newest torch wheel's METADATA, served inside a small zip by
    ranges; ``short``: bytes each ranged answer leaves out (its 206 still says the range asked)."""

    def __init__(self) -> None:
        self.pages: dict[str, Any] = {p.stem: json.loads(p.read_text()) for p in FIXTURES.glob("*.json")}
        self.metadata = (FIXTURES / "metadata" / f"{NEWEST}.metadata").read_text()
        self.short = 0
        self.pages["torch"]["files"] = [
            {**f, "size": len(_wheel(self.metadata))} if f["filename"] == NEWEST else f
            for f in self.pages["torch"]["files"]
        ]
        index = self

        class Handler(QuietHandler):
            def do_GET(self) -> None:
                parts = self.path.strip("/").split("/")
                if parts[0] == "simple" and len(parts) == 2 and index.pages.get(parts[1]) is not None:
                    page = index.pages[parts[1]]
                    body = page if isinstance(page, bytes) else json.dumps(page).encode()
                    self.send_body(200, body, headers.SIMPLE_JSON)
                elif parts[0] == "files" and parts[-1] == NEWEST:
                    self.send_ranged_short(_wheel(index.metadata), index.short)
                else:
                    self.send_body(404, b"not found", "text/plain")

            def send_ranged_short(self, data: bytes, short: int) -> None:
                start, end = (int(x) for x in self.headers["Range"].removeprefix("bytes=").split("-"))
                part = data[start : end + 1]
                self.send_response(206)
                self.send_header("Content-Range", f"bytes {start}-{start + len(part) - 1}/{len(data)}")
                self.send_header("Content-Length", str(len(part) - short))
                self.end_headers()
                self.wfile.write(part[: len(part) - short])

        self.served: Served = serve(Handler)
        self.url = self.served.root + "/simple"

    def newest_size(self, size: Any) -> None:
        for entry in self.pages["torch"]["files"]:
            if entry["filename"] == NEWEST:
                entry["size"] = size


@pytest.fixture
def index() -> Iterator[Index]:
    served = Index()
    yield served
    served.served.close()


def _check(*args: str) -> Result:
    return CliRunner().invoke(
        app, ["catalog", "--check-upstream", *args], env={"IMAGEGEN_DEBUG": "", "COLUMNS": "200"}
    )


def _fails_both_ways(url: str, code: int, *fragments: str) -> None:
    """Exit ``code`` with one message holding every fragment, as text and as a JSON error."""
    text, as_json = _check("--index-url", url), _check("--index-url", url, "--json")
    assert_reported(text, code=code)
    assert_json_error(as_json, code=code)
    message = json.loads(as_json.stdout)["error"]["message"]
    for fragment in fragments:
        assert fragment in text.stderr and fragment in message, (fragment, text.stderr)
    assert "current" not in text.stdout + text.stderr


def test_the_recorded_index_is_still_current(index: Index) -> None:
    done = _check("--index-url", index.url)
    assert done.exit_code == 0, done.output
    assert "the catalog is current" in done.stdout


# ------------------------------------------------------------------ what was not read


def test_an_index_path_answering_404_for_every_project_is_exit_3_naming_them(index: Index) -> None:
    # A mistyped path (or a host without /simple): 404 for each of the three projects.
    _fails_both_ways(
        index.served.root + "/simpel", 3, "no page for torch, nvidia-cuda-nvcc, cuda-toolkit (HTTP 404)"
    )


@pytest.mark.parametrize("project", ["torch", "nvidia-cuda-nvcc", "cuda-toolkit"])
def test_a_project_the_index_does_not_have_is_exit_3_naming_it(index: Index, project: str) -> None:
    index.pages[project] = None
    _fails_both_ways(index.url, 3, f"no page for {project} (HTTP 404)")


def test_a_project_listing_no_final_release_is_exit_3_naming_it(index: Index) -> None:
    index.pages["cuda-toolkit"]["versions"] = ["13.0.0rc1"]
    _fails_both_ways(index.url, 3, "no final release of cuda-toolkit")


# ------------------------------------------------------------------ malformed answers


def _deeply_nested(index: Index) -> None:
    index.pages["torch"] = b"[" * 100_000 + b"]" * 100_000


def _set(project: str, key: str, value: Any) -> Callable[[Index], None]:
    def change(index: Index) -> None:
        index.pages[project][key] = value

    return change


def _size(value: Any) -> Callable[[Index], None]:
    return lambda index: index.newest_size(value)


def _infinite_size(index: Index) -> None:
    index.newest_size(float("inf"))  # json.dumps writes Infinity, which Python's json reads back


def _pin_no_version(index: Index) -> None:
    # A metadata line whose pin of cuda-toolkit is no version (=== takes any text).
    pin = index.metadata[index.metadata.index("Requires-Dist: cuda-toolkit[") :].split("\n", 1)[0]
    index.metadata = index.metadata.replace(pin, "Requires-Dist: cuda-toolkit===foo")
    index.newest_size(len(_wheel(index.metadata)))


def _short_ranges(index: Index) -> None:
    index.short = 100


MALFORMED = {
    "nested-json": (_deeply_nested, ["torch's page", "nested too deeply"]),
    "page-not-object": (lambda i: i.pages.update(torch=[1, 2]), ["torch's page", "not a JSON object"]),
    "versions-number": (_set("torch", "versions", 5), ["torch's page", '"versions" is 5']),
    "versions-string": (_set("torch", "versions", "9.0"), ["torch's page", '"versions" is "9.0"']),
    "versions-of-numbers": (_set("nvidia-cuda-nvcc", "versions", [13.5]), ["nvidia-cuda-nvcc's page"]),
    "files-number": (_set("torch", "files", 5), ["torch's page", '"files" is 5']),
    "files-string": (_set("torch", "files", "abc"), ["torch's page", '"files" is "abc"']),
    "file-not-object": (_set("cuda-toolkit", "files", ["x.whl"]), ["cuda-toolkit's page", "file 0"]),
    "size-huge": (_size(10**30), [NEWEST, "size is 1000000000000000000000000000000"]),
    "size-text": (_size("abc"), [NEWEST, 'size is "abc"']),
    "size-infinity": (_infinite_size, [NEWEST, "size is Infinity"]),
    "size-negative": (_size(-1), [NEWEST, "size is -1"]),
    "pin-no-version": (_pin_no_version, ["torch 2.15.0", "cuda-toolkit===foo", "no version"]),
    "206-short": (_short_ranges, [NEWEST, "with "]),
}


@pytest.mark.parametrize(("change", "fragments"), MALFORMED.values(), ids=MALFORMED.keys())
def test_a_malformed_answer_is_one_exit_3_message_naming_what_was_wrong(
    index: Index, change: Callable[[Index], None], fragments: list[str]
) -> None:
    change(index)
    _fails_both_ways(index.url, 3, *fragments)


# ------------------------------------------------------------------ --index-url as input

BAD_URLS = {
    "empty": ("", "--index-url is empty"),
    "blank": ("  ", "--index-url is empty"),
    "no-scheme": ("notaurl", "it has no scheme"),
    "ftp": ("ftp://mirror.example/simple", "its scheme is 'ftp'"),
    "open-bracket": ("http://[::1/simple", "IPv6"),
    "bad-port": ("http://127.0.0.1:99999/simple", "port"),
    "no-host": ("http:///simple", "names no host"),
    "long-host": ("http://" + "a" * 5000 + "/simple", "longer than a host name"),
    "long-label": ("https://" + "b" * 64 + ".example/simple", "longer than a host name"),
    "space": ("https://index.example/sim ple", "white space"),
}


@pytest.mark.parametrize(("url", "fragment"), BAD_URLS.values(), ids=BAD_URLS.keys())
def test_an_index_url_that_is_no_http_url_of_a_host_is_bad_input(url: str, fragment: str) -> None:
    _fails_both_ways(url, 2, fragment)


def test_a_bad_index_url_never_shows_its_password() -> None:
    done = _check("--index-url", "ftp://ci:s3cr3t@mirror.example/simple")
    assert_reported(done, code=2, fragment="'ftp://***@mirror.example/simple'")
    assert "s3cr3t" not in done.output
