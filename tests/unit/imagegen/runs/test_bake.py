"""`imagegen bake`'s parts that need no build: the bake file (read back by buildx itself where it
is installed), the builder's driver, the command's bad input."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from imagegen.cli import app
from imagegen.commands.bake import _matrix_targets
from imagegen.errors import BadInputError
from imagegen.imagespec.spec import SpecInput, build_spec
from imagegen.oci.push_plan import remote_tag
from imagegen.render.matrix import BakeTarget, bake_file, render_bake, standard_entries
from imagegen.runs.bake import (
    BakeRequest,
    check_host_network,
    parse_driver,
)
from imagegen.runs.report import ImageReport, RunImage, RunReport

REPO = Path(__file__).resolve().parents[4]


def _targets(secret: Path) -> list[BakeTarget]:
    secret.write_text("export SCCACHE_REDIS_PASSWORD=x\n")  # buildx checks that it exists
    return [
        BakeTarget(
            name="cpu",
            dockerfile="/tmp/x/cpu/Dockerfile",
            tag="imagegen:cpu-x",
            platform="linux/amd64",
            args=(("BASE_DEVEL", "imagegen-standin/python:3.11-devel"), ("MAX_JOBS", "2")),
            context="/ctx/slot-1",
            secrets=(("compile-cache", str(secret)),),
            network="host",
        ),
        BakeTarget(
            name="cpu-arm64",
            dockerfile="/tmp/x/cpu-arm64/Dockerfile",
            tag="imagegen:cpu-arm64-x",
            platform="linux/arm64",
            args=(("BASE_DEVEL", 'odd"${name}'),),
        ),
    ]


def _buildx() -> str | None:
    for client in (shutil.which("docker"), "/usr/bin/docker"):
        if client and os.path.exists(client):
            done = subprocess.run([client, "buildx", "version"], capture_output=True, check=False)
            if done.returncode == 0:
                return client
    return None


def _printed(text: str, tmp_path: Path, env: dict[str, str] | None = None) -> dict[str, Any]:
    """The bake file as buildx reads it (`docker buildx bake --print`): an independent parser."""
    client = _buildx()
    if client is None:
        pytest.skip("no docker client with buildx here (scripts/buildx-plugin.sh)")
    path = tmp_path / "docker-bake.hcl"
    path.write_text(text)
    done = subprocess.run(
        [client, "buildx", "bake", "-f", str(path), "--print"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env={**os.environ, **(env or {})},
        check=False,
    )
    assert done.returncode == 0, done.stderr
    data: dict[str, Any] = json.loads(done.stdout)
    return data


def test_buildx_reads_the_targets_args_secrets_and_network(tmp_path: Path) -> None:
    secret = tmp_path / "compile-cache"
    data = _printed(bake_file(_targets(secret)), tmp_path)
    assert data["group"]["default"]["targets"] == ["cpu", "cpu-arm64"]
    cpu = data["target"]["cpu"]
    assert cpu["args"] == {"BASE_DEVEL": "imagegen-standin/python:3.11-devel", "MAX_JOBS": "2"}
    assert cpu["context"] == "/ctx/slot-1" and cpu["target"] == "runtime"
    assert cpu["tags"] == ["imagegen:cpu-x"] and cpu["platforms"] == ["linux/amd64"]
    assert cpu["secret"] == [f"id=compile-cache,src={secret}"]
    assert 'network    = "host"' in bake_file(_targets(secret))  # buildx 0.13 does not print it
    # A value with a quote and "${" stays the literal text: no HCL template, no broken string.
    assert data["target"]["cpu-arm64"]["args"] == {"BASE_DEVEL": 'odd"${name}'}
    assert "secret" not in data["target"]["cpu-arm64"]


def test_cache_export_only_when_cache_dir_is_set(tmp_path: Path) -> None:
    # The docker driver refuses any cache export, so by default there is none.
    targets = _targets(tmp_path / "compile-cache")
    plain = _printed(bake_file(targets), tmp_path)["target"]["cpu"]
    assert "cache-to" not in plain and "cache-from" not in plain
    exported = _printed(bake_file(targets), tmp_path, {"CACHE_DIR": "/cache"})["target"]["cpu"]
    assert exported["cache-to"] == ["type=local,dest=/cache/cpu,mode=max"]
    assert exported["cache-from"] == ["type=local,src=/cache/cpu"]


def test_the_committed_bake_file_passes_the_bases_as_arguments(tmp_path: Path) -> None:
    entries = standard_entries()
    data = _printed(render_bake(entries), tmp_path)
    for entry in entries:
        target = data["target"][entry.bake_target]
        assert target["args"]["BASE_DEVEL"] == entry.spec.base_devel
        assert target["args"]["BASE_RUNTIME"] == entry.spec.base_runtime
        assert "cache-to" not in target
    dockerfile = (REPO / "dockerfiles" / "cpu" / "Dockerfile").read_text()
    first_from = dockerfile.index("\nFROM ")
    assert dockerfile.index("\nARG BASE_DEVEL=") < first_from
    assert dockerfile.index("\nARG BASE_RUNTIME=") < first_from


def test_the_commands_target_names_are_the_matrixs() -> None:
    assert list(_matrix_targets()) == [entry.bake_target for entry in standard_entries()]


def test_the_driver_is_read_from_buildx_inspect() -> None:
    output = (
        "Name:          default\nDriver:        docker\n\nNodes:\nName:      default\nStatus:    running\n"
    )
    assert parse_driver(output) == "docker"
    assert parse_driver("Name: x\nDriver: docker-container\n") == "docker-container"
    assert parse_driver("Name: x\n") is None


def test_a_pushed_reference_is_the_tag_under_the_registry() -> None:
    assert remote_tag("127.0.0.1:5000", "imagegen:cpu-x") == "127.0.0.1:5000/imagegen:cpu-x"
    assert remote_tag("registry.example/team/", "imagegen:cpu-x") == "registry.example/team/imagegen:cpu-x"


def test_the_report_is_ok_only_when_every_image_is() -> None:
    built = ImageReport(
        ok=True, tag="t:1", target="cpu", platform="linux/amd64", ops=("cpu_adam",), archs=(),
        torch="2.13.0", python="3.11", engine="buildx", stage="runtime", image_id="sha256:abc",
        size_bytes=10, build_seconds=1.0, verify=None, pushed=False, steps=(),
    )  # fmt: skip
    good = RunImage("cpu", "linux/amd64", "t:1", built)
    bad = RunImage("cpu-arm64", "linux/arm64", "t:2", None, stopped="boom", seconds=3.0)
    report = RunReport("bake", (good, bad), driver="docker")
    data = report.to_json()
    assert data["ok"] is False and [i["ok"] for i in data["images"]] == [True, False]
    assert set(data["images"][0]) >= {
        "target",
        "platform",
        "tag",
        "ok",
        "size_bytes",
        "build_seconds",
        "verify_seconds",
    }
    assert data["images"][1]["result"] == "build failed" and data["images"][1]["error"] == "boom"
    assert RunReport("bake", (good,)).ok and not RunReport("bake", ()).ok


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["bake", "cpuu"], "no target 'cpuu'"),
        (["bake", "cpu", "--platform-torch", "linux/arm64"], "OS/ARCH=VALUE"),
        (["bake", "cpu", "--platform-wheelhouse", "linux/arm64="], "OS/ARCH=VALUE"),
        (["bake", "cpu-arm64", "--platform-wheelhouse", "linux/arm64=/no/such/dir"], "/no/such/dir"),
        (["bake", "cpu", "--platform-torch", "linux/sparc=2.10.0"], "not a platform"),
        (["bake", "cpu", "--push", "127.0.0.1:5000", "--no-verify"], "only after verification"),
        (["bake", "cpu", "--compile-cache", "ftp://x"], "no 'ftp' backend"),
    ],
)
def test_bad_input_is_exit_2_before_any_build(args: list[str], says: str) -> None:
    result = CliRunner().invoke(app, [*args, "--json"])
    assert result.exit_code == 2, result.output
    assert says in json.loads(result.stdout)["error"]["message"]


def _request(cache: str | None) -> BakeRequest:
    return BakeRequest("cpu", build_spec(SpecInput(cpu=True, ops="cpu_adam", compile_cache=cache)))


def test_a_loopback_cache_is_refused_where_bake_has_no_host_network() -> None:
    with pytest.raises(BadInputError) as caught:
        check_host_network([_request(None), _request("redis://127.0.0.1:6379")], supported=lambda: False)
    assert "loopback" in caught.value.message and caught.value.hint is not None
    assert "172.17.0.1" in caught.value.hint
    # Reachable caches, or a bake that can give the host's network, pass.
    check_host_network([_request("redis://172.17.0.1:6379"), _request("local")], supported=lambda: False)
    check_host_network([_request("redis://127.0.0.1:6379")], supported=lambda: True)
    # No target on the loopback: bake is not probed at all.
    check_host_network([_request("local"), _request(None)], supported=lambda: pytest.fail("probed"))


def test_bake_without_buildx_is_exit_3_with_how_to_install_it() -> None:
    from imagegen.engine import Engine
    from imagegen.errors import EngineUnavailableError
    from imagegen.runs.bake import buildx_client

    assert buildx_client(Engine("buildx", "/usr/bin/docker", "20.10")) == "/usr/bin/docker"
    for engine in (Engine("buildkit", "/usr/bin/docker", "20.10"), Engine("classic", None, "20.10")):
        with pytest.raises(EngineUnavailableError) as caught:
            buildx_client(engine)
        assert caught.value.exit_code == 3 and "buildx-plugin.sh" in (caught.value.hint or "")
