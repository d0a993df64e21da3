"""torch's headers out of a wheel on an index: ranged reads, the whole-file fallback, the cache.

A real HTTP server on loopback serves a PEP 691 index page and a wheel made here, with or
without Range support; the extracted files are compared with the bytes put in the wheel.
"""

from __future__ import annotations

import json
import zipfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from imagegen.compat import headers
from imagegen.errors import BuildFailedError
from tests._http import QuietHandler
from tests._http import serve as serve_http

WHEEL = "torch-2.5.1-cp311-cp311-manylinux1_x86_64.whl"
HEADERS = {
    "torch/include/c10/macros/Macros.h": b"#pragma once\n#define C10_MACROS 1\n",
    "torch/include/torch/extension.h": b"#pragma once\n#include <c10/macros/Macros.h>\n",
}


def _make_wheel(path: Path, with_headers: bool = True) -> None:
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_DEFLATED) as wheel:
        wheel.writestr("torch/__init__.py", b"")
        if with_headers:
            for name, data in HEADERS.items():
                wheel.writestr(name, data)
        # Stands for torch/lib: bytes that must never be read, let alone cached.
        wheel.writestr("torch/lib/libtorch_cpu.so", bytes(range(256)) * 4096)


class _Server:
    def __init__(self, wheel: Path, ranges: bool) -> None:
        self.wheel, self.ranges = wheel, ranges
        self.requests: list[str] = []
        server = self

        class Handler(QuietHandler):
            def do_GET(self) -> None:
                server.requests.append(self.headers.get("Range") or self.path)
                if self.path == "/simple/torch/":
                    body = json.dumps(
                        {
                            "files": [
                                {
                                    "filename": WHEEL,
                                    "url": server.url + "/files/" + WHEEL,
                                    "size": server.wheel.stat().st_size,
                                },
                                {
                                    "filename": WHEEL.replace("cp311-cp311", "cp312-cp312"),
                                    "url": "x",
                                    "size": 1,
                                },
                            ]
                        }
                    ).encode()
                    self.send_body(200, body, headers.SIMPLE_JSON)
                    return
                self.send_ranged(server.wheel.read_bytes(), honour_ranges=server.ranges)

        self.served = serve_http(Handler)
        self.url = self.served.root


@pytest.fixture
def serve(tmp_path: Path) -> Iterator[type[_Server]]:
    started: list[_Server] = []

    def make(wheel: Path, ranges: bool) -> _Server:
        server = _Server(wheel, ranges)
        started.append(server)
        return server

    yield make  # type: ignore[misc]
    for server in started:
        server.served.close()


def _check_cached(include: Path) -> None:
    for name, data in HEADERS.items():
        assert (include / name.removeprefix("torch/include/")).read_bytes() == data
    assert not list(include.parent.rglob("*.so")), "only torch/include is kept"


@pytest.mark.parametrize("ranges", [True, False], ids=["ranged", "whole-file"])
def test_headers_come_out_of_the_wheel_and_are_cached(tmp_path: Path, serve, ranges: bool) -> None:  # type: ignore[no-untyped-def]
    wheel = tmp_path / WHEEL
    _make_wheel(wheel)
    server = serve(wheel, ranges)
    env = {"XDG_CACHE_HOME": str(tmp_path / "cache")}
    include = headers.fetch_headers("2.5.1", server.url + "/simple", env)
    assert include == tmp_path / "cache" / "imagegen" / "torch-headers" / "2.5.1" / "include"
    _check_cached(include)
    assert headers.wheel_of("2.5.1", env) == WHEEL
    ranged = [r for r in server.requests if r.startswith("bytes=")]
    # Ranged: the tail, then the members. Refused: one try, then the whole file.
    assert len(ranged) >= 2 if ranges else len(ranged) == 1
    # No temporary folder or downloaded wheel is left behind.
    assert sorted(p.name for p in (include.parent.parent).iterdir()) == ["2.5.1"]
    # A second call is the cache's: the server is not asked again.
    count = len(server.requests)
    assert headers.fetch_headers("2.5.1", server.url + "/simple", env) == include
    assert len(server.requests) == count


def test_a_wheel_without_headers_is_an_error_and_caches_nothing(tmp_path: Path, serve) -> None:  # type: ignore[no-untyped-def]
    wheel = tmp_path / WHEEL
    _make_wheel(wheel, with_headers=False)
    server = serve(wheel, True)
    env = {"XDG_CACHE_HOME": str(tmp_path / "cache")}
    with pytest.raises(BuildFailedError, match="torch/include"):
        headers.fetch_headers("2.5.1", server.url + "/simple", env)
    assert headers.cached_include("2.5.1", env) is None


def test_a_release_the_index_lacks_is_an_error(tmp_path: Path, serve) -> None:  # type: ignore[no-untyped-def]
    wheel = tmp_path / WHEEL
    _make_wheel(wheel)
    server = serve(wheel, True)
    with pytest.raises(BuildFailedError, match=r"torch 2\.6\.0"):
        headers.fetch_headers("2.6.0", server.url + "/simple", {"XDG_CACHE_HOME": str(tmp_path)})


def test_pick_wheel_takes_cpython_3_11_x86_64_and_the_highest_build() -> None:
    files = [
        {"filename": "torch-2.10.0-cp311-cp311-manylinux_2_28_x86_64.whl", "url": "a", "size": 1},
        {"filename": "torch-2.10.0-3-cp311-cp311-manylinux_2_28_x86_64.whl", "url": "b", "size": 2},
        {"filename": "torch-2.10.0-cp311-cp311-manylinux_2_28_aarch64.whl", "url": "c", "size": 3},
        {"filename": "torch-2.10.0-cp312-cp312-manylinux_2_28_x86_64.whl", "url": "d", "size": 4},
        {
            "filename": "torch-2.10.0-4-cp311-cp311-manylinux_2_28_x86_64.whl",
            "url": "e",
            "size": 5,
            "yanked": True,
        },
        {"filename": "torch-2.1.0-cp311-cp311-manylinux1_x86_64.whl", "url": "f", "size": 6},
    ]
    picked = headers.pick_wheel("2.10.0", files)
    assert picked is not None and picked.url == "b"
    assert headers.pick_wheel("2.1.0", files) == headers.Wheel(files[-1]["filename"], "f", 6)  # type: ignore[arg-type]
    assert headers.pick_wheel("2.2.0", files) is None
