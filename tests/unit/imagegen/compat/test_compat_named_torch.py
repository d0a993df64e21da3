"""``make compat TORCH=X.Y``: a torch release the catalog does not know yet, looked up on the index.

A local HTTP server answers torch's page of the JSON simple API (PEP 691, API 1.1 with its
``versions`` list) as the index does, with releases past the catalog's own; nothing here reaches
the network and nothing is compiled (the compile step is replaced where a test would reach it).
"""

from __future__ import annotations

import json
import socket
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType, SimpleNamespace
from typing import Any

import pytest
from packaging.version import Version

from imagegen.compat import check, device, headers, host, pch, results
from imagegen.errors import BadInputError
from op_builder.plan import probe_host
from op_builder.registry import ALL_OPS
from tests._http import QuietHandler, serve
from tests._script_module import load_script

REPO = Path(__file__).resolve().parents[4]
# Past any release the catalog lists, so no target admits them.
NEW = ("2.98.0", "2.98.1", "2.99.0")
UNLISTED = ("2.98.2rc1", "2.99.1.dev20990101", "2.99.0.post1")


def _answer() -> dict[str, Any]:
    """torch's page as the index answers it (one wheel per release is enough here)."""
    versions = ["2.14.1", "2.15.0", *NEW, *UNLISTED]
    return {
        "meta": {"api-version": "1.1"},
        "name": "torch",
        "versions": versions,
        "files": [
            {
                "filename": f"torch-{v}-cp311-cp311-manylinux_2_28_x86_64.whl",
                "url": f"../../files/torch-{v}-cp311-cp311-manylinux_2_28_x86_64.whl",
                "hashes": {"sha256": "0" * 64},
                "size": 1,
            }
            for v in versions
        ],
    }


class _Index:
    def __init__(self) -> None:
        self.requests: list[str] = []
        index = self

        class Handler(QuietHandler):
            def do_GET(self) -> None:
                index.requests.append(self.path)
                if self.path != "/simple/torch/":
                    self.send_body(404, b"", "text/plain")
                    return
                self.send_body(200, json.dumps(_answer()).encode(), headers.SIMPLE_JSON)

        self.served = serve(Handler)
        self.url = self.served.root + "/simple"


@pytest.fixture
def index() -> Iterator[_Index]:
    served = _Index()
    yield served
    served.served.close()


@pytest.fixture
def closed_port() -> str:
    """An index URL nothing listens on: the port was bound, then let go."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return f"http://127.0.0.1:{port}/simple"


@pytest.fixture(scope="module")
def script() -> ModuleType:
    return load_script(REPO / "scripts" / "compat.py", "compat_script")


def _admitted() -> tuple[str, ...]:
    return check.full_selection().cpu_minors


@pytest.mark.parametrize(
    ("named", "minor", "release"),
    [("2.98", "2.98", "2.98.1"), ("2.98.0", "2.98", "2.98.0"), ("2.99", "2.99", "2.99.0")],
    ids=["minor-newest-final-patch", "exact-release", "minor-skips-post-and-dev"],
)
def test_a_release_the_catalog_lacks_resolves_on_the_index(
    index: _Index, named: str, minor: str, release: str
) -> None:
    assert minor not in _admitted()
    selection = check.torch_selection([named], index.url)
    assert selection.releases == {minor: release}
    assert selection.release_of(minor) == release
    # Both the CPU ops and the GPU bindings compile against it.
    assert selection.cpu_minors == (minor,) and selection.gpu_minors == (minor,)
    assert index.requests == ["/simple/torch/"]


def test_a_mixed_list_keeps_the_catalogs_minors_as_they_were(index: _Index) -> None:
    full = check.full_selection()
    cpu_only = [m for m in full.cpu_minors if m not in full.gpu_minors]
    gpu = full.gpu_minors[-1]
    named = [gpu, "2.98", *cpu_only[:1]]
    selection = check.torch_selection(named, index.url, device=True)
    assert set(selection.cpu_minors) == {gpu, "2.98", *cpu_only[:1]}
    assert set(selection.gpu_minors) == {gpu, "2.98"}
    assert selection.releases == {"2.98": "2.98.1"} and selection.device
    # The catalog's minors resolve through the catalog, as before.
    assert selection.release_of(gpu) == check.release_of(gpu)


def test_the_catalogs_minors_alone_never_read_the_index(closed_port: str) -> None:
    admitted = _admitted()
    selection = check.torch_selection([admitted[0], admitted[-1]], closed_port)
    assert selection.cpu_minors == (admitted[0], admitted[-1]) and not selection.releases


@pytest.mark.parametrize(
    ("named", "says"),
    [
        ("2.97", "torch 2.97: no such final release"),
        ("2.98.2", "torch 2.98.2: no such final release"),
        ("2.98.2rc1", "not a final torch release"),
        ("2.98,2.98.0", "names torch 2.98 twice"),
        ("banana", "not a final torch release"),
        ("2", "not a final torch release"),
    ],
)
def test_what_the_index_does_not_publish_is_bad_input(index: _Index, named: str, says: str) -> None:
    with pytest.raises(BadInputError, match=says):
        check.torch_selection(named.split(","), index.url)


def test_another_patch_of_a_catalog_minor_is_refused(closed_port: str) -> None:
    # The catalog proves a minor at its newest release; another patch would stand in for it.
    minor = next(m for m in _admitted() if Version(check.release_of(m)).micro > 0)
    with pytest.raises(BadInputError, match=f"admits torch {minor}, checked at {check.release_of(minor)}"):
        check.torch_selection([f"{minor}.0"], closed_port)


def test_the_script_exits_2_with_one_line_for_a_release_not_on_the_index(
    script: ModuleType, index: _Index, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code = script.main(["--torch", "2.97", "--index-url", index.url, "--results", str(tmp_path / "r.json")])
    err = capsys.readouterr().err
    assert code == 2
    assert err.count("\n") == 1 and err.startswith("compat: torch 2.97: no such final release")
    assert "2.99.0" in err  # the newest there, as the hint
    assert not (tmp_path / "r.json").exists()


def test_the_script_exits_3_without_a_traceback_when_the_index_is_unreachable(
    script: ModuleType, closed_port: str, capsys: pytest.CaptureFixture[str]
) -> None:
    code = script.main(["--torch", "2.98", "--index-url", closed_port])
    err = capsys.readouterr().err
    assert code == 3
    assert err.count("\n") == 1 and "cannot be reached" in err and "--index-url" in err
    assert "Traceback" not in err


def test_the_script_hands_the_resolved_release_to_the_check(
    script: ModuleType,
    index: _Index,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    seen: list[check.Selection] = []

    def fake_check(selection: check.Selection, *args: object, **kwargs: object) -> SimpleNamespace:
        seen.append(selection)
        return SimpleNamespace(data={}, failures=[])

    monkeypatch.setattr(script.check, "check", fake_check)
    admitted = _admitted()[-1]
    argv = ["--torch", f"{admitted},2.98.0", "--device", "--index-url", index.url]
    assert script.main([*argv, "--results", str(tmp_path / "r.json")]) == 0
    (selection,) = seen
    assert selection.releases == {"2.98": "2.98.0"} and selection.device
    assert "2.98" in selection.gpu_minors and admitted in selection.cpu_minors
    assert "torch 2.98 is 2.98.0 on the index" in capsys.readouterr().out


def test_check_host_compiles_the_gpu_bindings_against_a_release_outside_the_catalog(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, closed_port: str
) -> None:
    include = tmp_path / "include"
    include.mkdir()
    compiled: list[host.Job] = []

    def fake_run(jobs: list[host.Job], *args: object, **kwargs: object) -> list[host.Outcome]:
        compiled.extend(jobs)
        return [host.Outcome(j.torch, j.op, j.source, True, 0.0, j.key) for j in jobs]

    monkeypatch.setattr(headers, "fetch_headers", lambda release, *a, **k: include)
    monkeypatch.setattr(check, "device_cuda_include", lambda toolchain: include)
    monkeypatch.setattr(pch, "wants_pch", lambda jobs: [False] * len(jobs))
    monkeypatch.setattr(host, "run_jobs", fake_run)
    run = check.Run({}, None, say=lambda line: None)
    selection = check.Selection(("2.98",), ("2.98",), device=False, releases={"2.98": "2.98.1"})
    env = {"XDG_CACHE_HOME": str(tmp_path / "cache")}
    check.check_host(run, selection, ALL_OPS, probe_host({}), closed_port, env, use_cache=False)
    entry = run.data["host"]["2.98"]
    assert entry["torch"] == "2.98.1" and entry["std"] == "c++20"
    targets = {s["target"] for s in entry["sources"]}
    assert targets == {"cpu", "gpu"}
    assert {j.torch for j in compiled} == {"2.98.1"}
    assert all("-std=c++20" in j.command for j in compiled)


def test_a_minor_outside_the_catalog_needs_its_release_and_gets_the_newest_toolkits() -> None:
    with pytest.raises(ValueError, match="no release in the catalog"):
        check.release_of("2.98")
    releases = {"2.98": "2.98.1"}
    assert check.release_of("2.98", releases) == "2.98.1"
    assert check.stds_for(["2.98"], releases) == ["c++20"]
    toolkits = [
        device.Toolkit("cuda", "12.4", "img", "nvcc", "img"),
        device.Toolkit("cuda", "13.0", "this machine", "nvcc"),
        device.Toolkit("rocm", "5.2", "this machine", "hipcc"),
        device.Toolkit("rocm", "5.7", "img", "hipcc", "img"),
    ]
    # The newest nvcc and hipcc compile its standard; the older ones keep the targets' own.
    assert "2.98" in check._targets_minors("cuda", "13.0", toolkits, ["2.98"])
    assert "2.98" in check._targets_minors("rocm", "5.7", toolkits, ["2.98"])
    assert check._targets_minors("rocm", "5.2", toolkits, ["2.98"]) == []
    older = check._targets_minors("cuda", "12.4", toolkits, ["2.98"])
    assert "2.98" not in older and check.stds_for(older, releases) == ["c++17"]
    assert check.stds_for(check._targets_minors("rocm", "5.2", toolkits, ["2.98"]), releases) == ["c++17"]


def test_the_markdown_row_of_a_minor_no_target_admits_says_so() -> None:
    source = {"op": "cpu_adam", "target": "cpu", "source": "kernels/csrc/adam/cpu_adam.cpp", "ok": True}
    binding = {**source, "op": "fused_adam", "target": "gpu", "source": "kernels/csrc/adam/fused_adam.cpp"}
    data = {
        "host": {
            "2.98": {
                "torch": "2.98.1",
                "wheel": "torch-2.98.1.whl",
                "std": "c++20",
                "sources": [source, binding],
            },
        },
    }
    row = next(line for line in results.markdown(data).splitlines() if line.startswith("| 2.98.1 "))
    assert row == "| 2.98.1 | `torch-2.98.1.whl` | c++20 | 1/1 ok | 1/1 ok | - |"
    # A catalog minor's row names its targets, so the dash above is the row's own answer.
    minor = _admitted()[-1]
    catalog_data = {"host": {minor: {**data["host"]["2.98"], "torch": check.release_of(minor)}}}
    catalog_row = next(
        line
        for line in results.markdown(catalog_data).splitlines()
        if line.startswith(f"| {check.release_of(minor)} ")
    )
    assert not catalog_row.endswith("| - |") and "cpu" in catalog_row
