"""Integration tier: real Docker builds from local stand-in bases.

The session starts a daemon if it can (scripts/ensure-docker.sh) and makes the stand-in base
images (`imagegen standins`, cached by tag). With no engine every test here is
skipped, with the reason printed. One CPU image (cpu_adam, cpu_lion) is built once per
session through the real CLI and shared by the tests that inspect it; rebuilds reuse
BuildKit's layer and ccache caches, so only the first run on a machine compiles.
"""

from __future__ import annotations

import ipaddress
import json
import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from imagegen.engine import client as engine_client

REPO = Path(__file__).resolve().parents[2]
WHEELHOUSE = Path(os.environ.get("IMAGEGEN_IT_WHEELHOUSE", "/opt/wheels"))
CA_CERT = Path(os.environ.get("IMAGEGEN_IT_CA_CERT", "/etc/ssl/certs/ca-certificates.crt"))
STANDIN_DEVEL = "imagegen-standin/python:3.11-devel"
STANDIN_RUNTIME = "imagegen-standin/python:3.11-runtime"
CPU_OPS = ("cpu_adam", "cpu_lion")
CPU_TAG = "imagegen-it/cpu:" + "-".join(CPU_OPS)


def _skip_reason() -> str | None:
    """Why this tier cannot run here, or None. Starts the daemon and makes the stand-ins."""
    ensure = subprocess.run([str(REPO / "scripts" / "ensure-docker.sh")], capture_output=True, text=True)
    if ensure.returncode != 0:
        return "no Docker engine: " + (ensure.stderr.strip().splitlines() or ["ensure-docker.sh failed"])[-1]
    standins = subprocess.run(
        [sys.executable, "-m", "imagegen", "standins"], capture_output=True, text=True, timeout=900, cwd=REPO
    )
    if standins.returncode != 0:
        # An engine that answers but cannot make the bases is a failure, not a skip.
        pytest.fail("imagegen standins failed:\n" + standins.stderr[-3000:])
    if not any(WHEELHOUSE.glob("torch-*.whl")):
        return f"no torch wheel in {WHEELHOUSE} (set IMAGEGEN_IT_WHEELHOUSE)"
    return None


@pytest.fixture(scope="session")
def docker_ready() -> None:
    reason = _skip_reason()
    if reason is not None:
        # Printed as well as recorded: a skipped tier must be visible in a CI log.
        print(f"\nintegration tests skipped: {reason}", file=sys.stderr)
        pytest.skip(reason)


@pytest.fixture(scope="session")
def docker_client(docker_ready: None) -> Iterator[Any]:
    # The client imagegen itself uses (same DOCKER_HOST handling and no-daemon error).
    client = engine_client.docker_client(timeout=300)
    yield client
    client.close()


@dataclass(frozen=True)
class Cli:
    returncode: int
    stdout: str
    stderr: str

    def json(self) -> Any:
        return json.loads(self.stdout)


def imagegen(*args: str, cwd: Path = REPO, timeout: float = 1800) -> Cli:
    """Run the real CLI (`python -m imagegen`) from ``cwd``; stderr is echoed for the test log."""
    env = {**os.environ, "PYTHONPATH": str(cwd), "CI": "true"}
    done = subprocess.run(
        [sys.executable, "-m", "imagegen", *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    sys.stderr.write(done.stderr[-20000:])
    return Cli(done.returncode, done.stdout, done.stderr)


def build_args(tag: str, ops: Sequence[str] = CPU_OPS) -> list[str]:
    return [
        "build", "--cpu", "--ops", ",".join(ops),
        "--base-devel", STANDIN_DEVEL, "--base-runtime", STANDIN_RUNTIME,
        "--wheelhouse", str(WHEELHOUSE), "--ca-cert", str(CA_CERT),
        "--tag", tag, "--json",
    ]  # fmt: skip


@pytest.fixture(scope="session")
def cpu_image(docker_ready: None) -> dict[str, Any]:
    """The CPU image, built and verified once by `imagegen build`; its JSON summary."""
    result = imagegen(*build_args(CPU_TAG))
    assert result.returncode == 0, f"imagegen build failed ({result.returncode}):\n{result.stderr[-5000:]}"
    summary: dict[str, Any] = result.json()
    return summary


def run_in(client: Any, image: str, command: Sequence[str], **options: Any) -> tuple[int, str]:
    """Run ``command`` in a throwaway container; (exit code, stdout + stderr)."""
    container = client.containers.create(image, command=list(command), **options)
    try:
        container.start()
        status = container.wait(timeout=300)
        output = container.logs(stdout=True, stderr=True).decode("utf-8", "replace")
        return int(status["StatusCode"]), output
    finally:
        container.remove(force=True)


# ---------------------------------------------------------------- a registry on localhost


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _registry_binary() -> str | None:
    found = shutil.which("docker-registry") or shutil.which("registry")
    if found or os.geteuid() != 0 or shutil.which("apt-get") is None:
        return found
    # Debian's distribution registry; small, and the only registry reachable here.
    subprocess.run(
        ["apt-get", "install", "-y", "-qq", "docker-registry"],
        env={**os.environ, "DEBIAN_FRONTEND": "noninteractive"},
        capture_output=True,
        check=False,
    )
    return shutil.which("docker-registry")


@pytest.fixture(scope="session")
def local_registry(docker_ready: None, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """host:port of a throwaway registry on 127.0.0.1 (Docker trusts 127.0.0.0/8 over plain HTTP)."""
    binary = _registry_binary()
    if binary is None:
        pytest.skip("no docker-registry binary (apt-get install docker-registry)")
    root = tmp_path_factory.mktemp("registry")
    address = f"127.0.0.1:{_free_port()}"
    config = root / "config.yml"
    config.write_text(
        "version: 0.1\n"
        "log:\n  level: warn\n"
        f"storage:\n  filesystem:\n    rootdirectory: {root / 'data'}\n"
        f"http:\n  addr: {address}\n"
    )
    log = (root / "registry.log").open("w")
    proc = subprocess.Popen([binary, "serve", str(config)], stdout=log, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                with urllib.request.urlopen(f"http://{address}/v2/", timeout=2) as response:
                    if response.status == 200:
                        break
            except OSError:
                pass
            if proc.poll() is not None or time.monotonic() > deadline:
                pytest.fail(
                    "the local registry did not start:\n" + (root / "registry.log").read_text()[-2000:]
                )
            time.sleep(0.2)
        yield address
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        log.close()


def bridge_gateway(docker_client: Any) -> str:
    """The docker bridge's address on this host: what a build's RUN steps reach the host by. The
    daemon names it as the subnet's gateway, or (dockerd 20.10 here) only the subnet, whose first
    address the bridge then takes."""
    config = docker_client.api.inspect_network("bridge")["IPAM"]["Config"][0]
    if config.get("Gateway"):
        return str(config["Gateway"])
    return str(next(ipaddress.ip_network(config["Subnet"]).hosts()))
