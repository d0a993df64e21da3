"""``imagegen catalog --check-upstream``, run against recorded index answers.

tests/fixtures/index/ holds what the package index answered for torch, nvidia-cuda-nvcc and
cuda-toolkit (its README says when and how), served here by a local HTTP server; a scenario
adds what a future release would add to those answers (torch 2.16, CUDA 13.6, torch 2.15.1).
Wheels are served as small zips holding only their recorded METADATA, read with HTTP ranges,
or as PEP 658 metadata files. Nothing here reaches the network.
"""

from __future__ import annotations

import copy
import json
import socket
import subprocess
import sys
import zipfile
from collections.abc import Iterator
from io import BytesIO
from pathlib import Path
from typing import Any

import pytest

from imagegen.compat import headers, index_reader, upstream
from imagegen.errors import IndexUnreachableError
from imagegen.imagespec import catalog
from tests._http import QuietHandler, serve

FIXTURES = Path(__file__).resolve().parents[3] / "fixtures" / "index"
REPO = Path(__file__).resolve().parents[4]
SECRET = "s3cr3t-token"


def _answers() -> dict[str, dict[str, Any]]:
    return {p.stem: json.loads(p.read_text()) for p in FIXTURES.glob("*.json")}


def _metadata() -> dict[str, str]:
    return {p.name.removesuffix(".metadata"): p.read_text() for p in (FIXTURES / "metadata").iterdir()}


class Index:
    """A PEP 691 index of recorded answers; ``pep658``: metadata files beside the wheels."""

    def __init__(self, pep658: bool = False) -> None:
        self.answers, self.metadata, self.pep658 = _answers(), _metadata(), pep658
        self.requests: list[str] = []
        index = self

        class Handler(QuietHandler):
            def do_GET(self) -> None:
                index.requests.append(self.path)
                parts = self.path.strip("/").split("/")
                if parts[0] == "simple" and parts[1] in index.answers:
                    answer = copy.deepcopy(index.answers[parts[1]])
                    for entry in answer["files"]:
                        if index.pep658 and entry["filename"] in index.metadata:
                            entry["core-metadata"] = True
                    self.send_body(200, json.dumps(answer).encode(), headers.SIMPLE_JSON)
                elif parts[0] == "files" and parts[1].endswith(".metadata") and index.pep658:
                    self.send_body(
                        200, index.metadata[parts[1].removesuffix(".metadata")].encode(), "text/plain"
                    )
                elif parts[0] == "files" and parts[1] in index.metadata:
                    self.send_ranged(index.wheel(parts[1]))
                else:
                    self.send_body(404, b"not found", "text/plain")

        self.served = serve(Handler)
        self.url = self.served.root + "/simple"

    def wheel(self, filename: str) -> bytes:
        version = filename.split("-")[1]
        out = BytesIO()
        with zipfile.ZipFile(out, "w") as wheel:
            wheel.writestr("torch/__init__.py", b"")
            wheel.writestr(f"torch-{version}.dist-info/METADATA", self.metadata[filename])
        return out.getvalue()

    def fix_sizes(self) -> None:
        for entry in self.answers["torch"]["files"]:
            if entry["filename"] in self.metadata:
                entry["size"] = len(self.wheel(entry["filename"]))

    def publish_torch(self, version: str, cuda_toolkit: str | None) -> None:
        """What the index shows once torch ``version`` is out, its wheel pinning ``cuda_toolkit``."""
        filename = f"torch-{version}-cp311-cp311-manylinux_2_28_x86_64.whl"
        self.answers["torch"]["versions"].append(version)
        self.answers["torch"]["files"].append(
            {"filename": filename, "url": f"../../files/{filename}", "size": 0}
        )
        pin = (
            f'Requires-Dist: cuda-toolkit[cudart]=={cuda_toolkit}; platform_system == "Linux"\n'
            if cuda_toolkit
            else ""
        )
        self.metadata[filename] = f"Metadata-Version: 2.4\nName: torch\nVersion: {version}\n{pin}"
        self.fix_sizes()

    def publish_cuda(self, nvcc: str, toolkit: str) -> None:
        self.answers["nvidia-cuda-nvcc"]["versions"].append(nvcc)
        self.answers["cuda-toolkit"]["versions"].append(toolkit)


@pytest.fixture
def index() -> Iterator[Index]:
    server = Index()
    server.fix_sizes()
    yield server
    server.served.close()


def _check(index: Index) -> dict[str, Any]:
    found = upstream.read(index.url, headers.session())
    return upstream.report(found, upstream.findings(found))


def _kinds(report: dict[str, Any]) -> dict[str, list[str]]:
    kinds: dict[str, list[str]] = {}
    for finding in report["missing"]:
        kinds.setdefault(finding["kind"], []).append(finding["subject"])
    return kinds


def test_the_recorded_index_finds_the_catalog_current(index: Index) -> None:
    report = _check(index)
    assert report["ok"] is True and report["missing"] == []
    # The newest torch's pin was read out of its wheel (ranges: the zip's tail, then METADATA).
    assert report["upstream"]["torch"][-1] == {"version": "2.15.0", "cuda": "13.2"}
    assert [c["minor"] for c in report["upstream"]["cuda"]][-3:] == ["13.3", "13.4", "13.5"]
    assert report["upstream"]["cuda"][-1] == {"minor": "13.5", "nvcc": "13.5.37", "toolkit": "13.5.0"}
    # The CPU's default is held on purpose, and says so.
    assert [(f["subject"], f["held"] is not None) for f in report["held"]] == [("cpu", True)]


def test_a_new_torch_minor_is_named_with_the_cuda_its_wheel_pins(index: Index) -> None:
    index.publish_torch("2.16.0", "13.4.3")
    report = _check(index)
    assert report["ok"] is False
    assert _kinds(report) == {"torch-minor": ["2.16"]}
    (finding,) = report["missing"]
    assert "CUDA 13.4 build" in finding["message"] and "make compat TORCH=2.16" in finding["hint"]


def test_a_cuda_release_newer_than_every_target_is_missing(index: Index) -> None:
    index.publish_cuda("13.6.20", "13.6.0")
    report = _check(index)
    assert _kinds(report) == {"cuda-release": ["13.6"]}
    assert (
        "13.6.0" in report["missing"][0]["hint"]
        and "nvidia-cuda-nvcc 13.6.20" in report["missing"][0]["message"]
    )


def test_a_cuda_release_a_torch_is_built_with_is_missing_even_between_targets(index: Index) -> None:
    # 13.1 is on the index and has no target: fine until a torch wheel is built with it.
    assert "cuda-release" not in _kinds(_check(index))
    index.publish_torch("2.16.0", "13.1.2")
    assert _kinds(_check(index)) == {"torch-minor": ["2.16"], "cuda-release": ["13.1"]}


def test_a_new_patch_release_is_missing_and_makes_the_defaults_it_passes_stale(index: Index) -> None:
    index.publish_torch("2.15.1", "13.2.2")
    kinds = _kinds(_check(index))
    assert kinds["torch-release"] == ["2.15.1"]
    stale = {t.name for t in catalog.CUDA_TARGETS.values() if t.default_torch == "2.15.0"}
    assert stale == {"cuda13.0", "cuda13.2", "cuda13.3", "cuda13.4", "cuda13.5"}
    assert set(kinds["stale-default"]) == stale | {"cpu"}  # the CPU's hold lapses too (below)


def test_a_hold_lapses_when_a_newer_release_appears(index: Index) -> None:
    # The CPU's hold was decided against 2.15.0: a 2.15.1 makes it a person's choice again.
    index.publish_torch("2.15.1", "13.2.2")
    report = _check(index)
    cpu = [f for f in report["missing"] if f["kind"] == "stale-default" and f["subject"] == "cpu"]
    assert len(cpu) == 1 and "decide again" in cpu[0]["hint"] and report["held"] == []


def test_a_default_without_a_hold_is_stale(index: Index, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(upstream, "DEFAULT_HOLDS", {})
    report = _check(index)
    assert _kinds(report) == {"stale-default": ["cpu"]}
    assert report["missing"][0]["message"] == "cpu's default torch is 2.13.0; the newest it admits is 2.15.0"


def test_pins_read_from_pep_658_metadata_match_the_ranged_reads() -> None:
    server = Index(pep658=True)
    server.fix_sizes()
    try:
        report = _check(server)
    finally:
        server.served.close()
    assert report["upstream"]["torch"][-1]["cuda"] == "13.2"
    assert any(r.endswith(".whl.metadata") for r in server.requests)


@pytest.mark.parametrize(
    ("filename", "cuda"),
    [
        ("torch-2.6.0-cp311-cp311-manylinux1_x86_64.whl", "12.4"),  # nvidia-cuda-runtime-cu12 (==12.4.127)
        ("torch-2.11.0-cp311-cp311-manylinux_2_28_x86_64.whl", "13.0"),  # cuda-toolkit[...]==13.0.2
        ("torch-2.15.0-cp311-cp311-manylinux_2_28_x86_64.whl", "13.2"),
    ],
)
def test_the_cuda_pin_of_recorded_torch_metadata(filename: str, cuda: str) -> None:
    text = _metadata()[filename]
    requires = [
        line.removeprefix("Requires-Dist: ")
        for line in text.splitlines()
        if line.startswith("Requires-Dist:")
    ]
    assert upstream.pinned_cuda(requires) == cuda
    assert upstream.pinned_cuda([r for r in requires if "cuda" not in r]) is None


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "imagegen", "catalog", "--check-upstream", *args],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=120,
    )


def test_cli_exit_codes_current_and_missing(index: Index) -> None:
    with_secret = index.url.replace("http://", f"http://ci:{SECRET}@")
    current = _cli("--index-url", with_secret)
    assert current.returncode == 0, current.stderr
    assert "the catalog is current" in current.stdout and SECRET not in current.stdout + current.stderr
    index.publish_torch("2.16.0", "13.4.3")
    behind = _cli("--index-url", with_secret, "--json")
    assert behind.returncode == 1, behind.stderr
    assert json.loads(behind.stdout)["missing"][0]["subject"] == "2.16"
    assert SECRET not in behind.stdout + behind.stderr and "Traceback" not in behind.stderr


def test_cli_an_unreachable_index_exits_3_with_one_message() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # let go at once: nothing listens there
    done = _cli("--index-url", f"http://ci:{SECRET}@127.0.0.1:{port}/simple")
    assert done.returncode == 3
    assert done.stderr.count("error:") == 1 and "cannot be reached" in done.stderr
    assert SECRET not in done.stdout + done.stderr and "Traceback" not in done.stderr


def test_an_index_without_the_json_api_is_unreachable_not_a_crash() -> None:
    class Html(QuietHandler):
        def do_GET(self) -> None:
            self.send_body(200, b"<html>simple</html>", "text/html")

    served = serve(Html)
    try:
        with pytest.raises(IndexUnreachableError, match="JSON simple API"):
            index_reader.read_project("torch", served.root + "/simple", headers.session())
    finally:
        served.close()


def test_index_url_without_check_upstream_is_bad_input() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "imagegen", "catalog", "--index-url", "http://127.0.0.1:9/simple"],
        capture_output=True,
        text=True,
        cwd=REPO,
    )
    assert done.returncode == 2 and "--check-upstream" in done.stderr
