"""`imagegen bake` through docker buildx from the stand-ins: built, verified, reported, pushed;
a compile cache in Redis on the loopback that leaves no trace in the image; a failing target
that stops only itself."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from imagegen.engine import detect_engine
from imagegen.imagespec.spec import SpecInput, build_spec
from imagegen.runs.bake import BakeRequest, bake
from imagegen.runs.run_choices import RunOptions
from tests.integration.conftest import CA_CERT, REPO, WHEELHOUSE, bridge_gateway, imagegen, run_in

pytestmark = [pytest.mark.docker, pytest.mark.timeout(3600)]

OPS = "cpu_adam,cpu_lion"
COMMON = ["--standins", "--ops", OPS, "--wheelhouse", str(WHEELHOUSE), "--ca-cert", str(CA_CERT)]


@pytest.fixture(scope="module")
def buildx(docker_ready: None) -> None:
    if detect_engine().kind != "buildx":
        pytest.skip("no docker client with buildx here (scripts/buildx-plugin.sh installs Debian's)")


@pytest.fixture(scope="module")
def redis_url(docker_client: Any) -> Iterator[str]:
    """An empty Redis (Debian's redis-server) for the module, on the docker bridge's gateway:
    buildx 0.13's bake cannot give a build the host's network, so the loopback is out of reach."""
    binary = shutil.which("redis-server")
    if binary is None:
        pytest.skip("no redis-server here (apt-get install redis-server)")
    gateway = bridge_gateway(docker_client)
    with socket.socket() as s:
        s.bind((gateway, 0))
        port = int(s.getsockname()[1])
    with tempfile.TemporaryDirectory() as folder:
        argv = [binary, "--bind", gateway, "--port", str(port), "--save", "", "--appendonly", "no"]
        argv += ["--protected-mode", "no"]
        proc = subprocess.Popen(
            [*argv, "--dir", folder], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )
        try:
            deadline = time.monotonic() + 20
            while True:
                try:
                    with socket.create_connection((gateway, port), timeout=1):
                        break
                except OSError:
                    assert proc.poll() is None and time.monotonic() < deadline, "redis-server did not start"
                    time.sleep(0.2)
            yield f"redis://{gateway}:{port}"
        finally:
            proc.terminate()
            proc.wait(timeout=10)


@pytest.fixture(scope="module")
def baked_cpu(buildx: None, redis_url: str) -> dict[str, Any]:
    """`imagegen bake cpu` with the compile cache in Redis: its JSON document."""
    result = imagegen("bake", "cpu", *COMMON, "--compile-cache", redis_url, "--json")
    assert result.returncode == 0, result.stderr[-5000:]
    data: dict[str, Any] = result.json()
    return data


def test_bake_builds_verifies_and_reports_the_cpu_target(baked_cpu: dict[str, Any]) -> None:
    assert baked_cpu["ok"] is True and baked_cpu["driver"] == "docker"
    (image,) = baked_cpu["images"]
    assert (image["target"], image["platform"], image["ok"]) == ("cpu", "linux/amd64", True)
    assert image["size_bytes"] > 100 * 2**20
    assert image["build_seconds"] > 0 and image["verify_seconds"] > 0
    assert {op["name"]: op["source"] for op in image["verify"]["ops"]} == dict.fromkeys(OPS.split(","), "aot")
    assert image["pushed"] is None  # no --push


def test_a_baked_image_carries_its_sbom_and_provenance(baked_cpu: dict[str, Any]) -> None:
    """Sealed as `imagegen build` seals: `imagegen verify` finds every op module as its SBOM says."""
    (image,) = baked_cpu["images"]
    checked = imagegen("verify", image["tag"], "--json")
    assert checked.returncode == 0, checked.stderr[-3000:]
    proof = checked.json()["proof"]
    assert proof is not None and proof["ok"] is True and proof["sbom_digest"].startswith("sha256:")


def test_the_compile_cache_counted_every_compilation(baked_cpu: dict[str, Any]) -> None:
    cache = baked_cpu["images"][0]["compile_cache"]
    # The Redis is new for this module and the compile step's text names its port, so the step
    # ran and compiled both ops; each translation unit is a hit or a miss, none an error.
    assert cache is not None and cache["errors"] == 0
    assert cache["hits"] + cache["misses"] >= 2 and cache["location"].startswith("redis")
    # By op: each op's objects (a source and its kernel each here), adding up to the whole.
    assert set(cache["ops"]) == set(OPS.split(","))
    assert sum(c["hits"] + c["misses"] for c in cache["ops"].values()) == cache["hits"] + cache["misses"]


def test_the_runtime_image_holds_no_trace_of_the_compile_cache(
    baked_cpu: dict[str, Any], docker_client: Any
) -> None:
    tag = baked_cpu["images"][0]["tag"]
    config = docker_client.api.inspect_image(tag)["Config"]
    assert not [v for v in config.get("Env") or [] if "SCCACHE" in v or "PYTORCH_NVCC" in v]
    history = json.dumps(docker_client.api.history(tag))
    assert "sccache" not in history.lower() and "compile-cache" not in history
    code, output = run_in(
        docker_client,
        tag,
        ["python", "-c", "import os, shutil; print(os.path.exists('/opt/sccache'), shutil.which('sccache'))"],
    )
    assert code == 0 and output.strip().splitlines()[-1] == "False None", output


def test_a_failing_target_stops_only_itself(buildx: None) -> None:
    def spec(**more: Any) -> Any:
        return build_spec(
            SpecInput(
                cpu=True, ops=OPS, standins=True, wheelhouse=str(WHEELHOUSE), ca_cert=str(CA_CERT), **more
            ),
        )

    good = spec()
    broken = spec(base_devel="imagegen-standin/no-such-base:1", tag="imagegen-it/bake:broken")
    report = bake([BakeRequest("cpu", good), BakeRequest("broken", broken)], RunOptions(source=REPO))
    by_target = {image.target: image for image in report.images}
    assert by_target["cpu"].ok and by_target["cpu"].verify is not None and by_target["cpu"].verify.ok
    assert not by_target["broken"].ok and by_target["broken"].error
    assert by_target["broken"].result == "build failed" and by_target["broken"].pushed is None
    assert not report.ok


# The push compresses the ~0.9 GB torch layer (about 100 s here): SLOW=1 runs it.
@pytest.mark.slow
def test_bake_pushes_the_verified_image(buildx: None, local_registry: str, docker_client: Any) -> None:
    result = imagegen("bake", "cpu", *COMMON, "--push", local_registry, "--json")
    assert result.returncode == 0, result.stderr[-5000:]
    (image,) = result.json()["images"]
    assert image["pushed"] == f"{local_registry}/{image['tag']}"
    repository, _, tag = image["tag"].rpartition(":")
    with urllib.request.urlopen(f"http://{local_registry}/v2/{repository}/tags/list", timeout=10) as response:
        assert tag in json.load(response)["tags"]
    docker_client.api.remove_image(image["pushed"])


# Two platforms, the arm64 one under qemu (its build and its verification): 20+ minutes here.
@pytest.mark.slow
def test_bake_of_the_cpu_image_for_amd64_and_arm64(buildx: None, tmp_path: Path) -> None:
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    arm64 = REPO / ".cache" / "wheelhouse-linux-arm64"
    # Linked or copied, not symbolic links: the staged context takes the files themselves.
    for wheel in [*WHEELHOUSE.glob("torch-*.whl"), *arm64.glob("torch-2.10.0-*aarch64.whl")]:
        try:
            os.link(wheel, wheels / wheel.name)
        except OSError:
            shutil.copy2(wheel, wheels / wheel.name)
    if not any(wheels.glob("*aarch64.whl")):
        pytest.skip(f"no aarch64 torch 2.10.0 wheel in {arm64} (make images PLATFORM=linux/arm64 fetches it)")
    # qemu-user has no Linux AIO: async_io is left out, as `make images` leaves it out there.
    args = ["--standins", "--ops", "cpu_adam,cpu_adagrad,cpu_lion", "--wheelhouse", str(wheels)]
    args += ["--ca-cert", str(CA_CERT), "--platform-torch", "linux/arm64=2.10.0"]
    result = imagegen("bake", "cpu", "cpu-arm64", *args)
    assert result.returncode == 0, result.stderr[-5000:]
    table = result.stdout
    assert "all passed" in table and "linux/arm64" in table and table.count("verified") == 2
