"""Integration tier: real Docker builds from local stand-in bases.

The session starts a daemon if it can (scripts/ensure-docker.sh) and makes the stand-in base
images (`imagegen standins`, cached by tag). With no engine every test here is
skipped, with the reason printed. One CPU image (cpu_adam, cpu_lion) is built once per
session through the real CLI and shared by the tests that inspect it; rebuilds reuse
BuildKit's layer and ccache caches, so only the first run on a machine compiles.

Builds that several test files make alike are made once per session here too: the CPU image
signed with an Ed25519 key, the same signed with a P-256 key and pushed, the CPU image from
sources with one op changed, an image with an op package's op, and a build that fails because one
op does not compile. No test changes them: a test that needs another image derives one under a
tag of its own.
"""

from __future__ import annotations

import contextlib
import ipaddress
import json
import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
import uuid
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ed25519

from imagegen.building.build_inputs import copy_build_inputs
from imagegen.engine import client as engine_client
from imagegen.engine.sealed import SEALED_LABEL
from op_builder import get_builder
from op_builder.paths import PACKAGE_ROOT

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


def remove_image(client: Any, tag: str) -> None:
    with contextlib.suppress(Exception):  # not made, when its build failed
        client.images.remove(tag, force=True)


# ---------------------------------------------------------------- the CPU image, signed


SIGNED_TAG = "imagegen-it/cpu-signed:" + "-".join(CPU_OPS)


def ed25519_keys(folder: Path) -> tuple[Path, Path, Path]:
    """(private key, its public key, another key's public key) in PEM, written to ``folder``."""
    key, other = ed25519.Ed25519PrivateKey.generate(), ed25519.Ed25519PrivateKey.generate()
    private = folder / "key.pem"
    private.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )
    )
    public, wrong = folder / "pub.pem", folder / "wrong.pem"
    for path, k in ((public, key), (wrong, other)):
        path.write_bytes(
            k.public_key().public_bytes(
                serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
            )
        )
    return private, public, wrong


@dataclass(frozen=True)
class Keys:
    private: Path
    public: Path
    other: Path  # another key's public half, of the same type


@dataclass(frozen=True)
class SignedImage:
    tag: str
    summary: dict[str, Any]  # `imagegen build --json`'s
    keys: Keys


@pytest.fixture(scope="session")
def signed_cpu_image(
    cpu_image: dict[str, Any], docker_client: Any, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[SignedImage]:
    """The CPU image signed with an Ed25519 key by `imagegen build --sign-key`, once for the tests
    of the proof (tests/integration/test_proof.py) and of verification from outside
    (test_verify_outside.py); its layers are the CPU image's, built first, so only the proof is
    new work. The tests verify it and derive images from it, under tags of their own."""
    keys = Keys(*ed25519_keys(tmp_path_factory.mktemp("ed25519")))
    built = imagegen(*build_args(SIGNED_TAG), "--sign-key", str(keys.private))
    try:
        assert built.returncode == 0, built.stderr[-3000:]
        yield SignedImage(SIGNED_TAG, built.json(), keys)
    finally:
        remove_image(docker_client, SIGNED_TAG)


def _openssl(*args: str) -> None:
    subprocess.run(["openssl", *args], check=True, capture_output=True)


def p256_keys(folder: Path) -> Keys:
    """cosign's default key type (cosign 3 cannot verify with Ed25519 keys by default), made as
    docs/imagegen.md says."""
    made = {}
    for name in ("key", "other"):
        _openssl(
            "genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256", "-out", str(folder / name)
        )
        _openssl("pkey", "-in", str(folder / name), "-pubout", "-out", str(folder / f"{name}.pub"))
        made[name] = folder / f"{name}.pub"
    return Keys(folder / "key", made["key"], made["other"])


PUSHED_REPOSITORY = "imagegen-it/cosign-verify"


@pytest.fixture(scope="session")
def pushed_signed_image(
    local_registry: str, docker_client: Any, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[SignedImage]:
    """The CPU image signed with a P-256 key and pushed to the local registry by `imagegen build
    --sign-key KEY --push`, once for the real cosign (test_cosign.py) and the referrers read back
    with nothing of imagegen's (test_publish.py). Its tag is ``LOCAL_REGISTRY/PUSHED_REPOSITORY:1``."""
    keys = p256_keys(tmp_path_factory.mktemp("p256"))
    tag = f"{local_registry}/{PUSHED_REPOSITORY}:1"
    started = time.monotonic()
    result = imagegen(*build_args(tag), "--sign-key", str(keys.private), "--push")
    print(f"\nimagegen build --sign-key --push: {time.monotonic() - started:.0f} s", file=sys.stderr)
    try:
        assert result.returncode == 0, result.stderr[-5000:]
        yield SignedImage(tag, result.json(), keys)
    finally:
        # The registry's port differs at each session: a tag left behind would never be reused.
        remove_image(docker_client, tag)


# ---------------------------------------------------------------- one op that does not compile


BROKEN_OP = "cpu_lion"
MISSING_HEADER = "imagegen_missing_on_purpose.h"


def op_source(op: str) -> Path:
    """The op's first source, relative to the checkout (kernels/<family>/csrc/...)."""
    return Path(get_builder(op).source_paths()[0]).relative_to(PACKAGE_ROOT)


@pytest.fixture(scope="session")
def broken_build(docker_ready: None, tmp_path_factory: pytest.TempPathFactory) -> Cli:
    """`imagegen build` of the CPU ops from a copy of the build inputs in which BROKEN_OP's first
    source starts by including a header that does not exist (a fatal error: that compiler stops at
    once, while cpu_adam's goes on, their output interleaved): the failed build's output, once for
    the tests that read what it names (test_cpu_image.py, test_parallel_build_image.py)."""
    checkout = copy_build_inputs(REPO, tmp_path_factory.mktemp("broken") / "checkout")
    source = checkout / op_source(BROKEN_OP)
    source.write_text(f'#include "{MISSING_HEADER}"\n' + source.read_text())
    return imagegen(*build_args("imagegen-it/broken:" + "-".join(CPU_OPS)), "--source", str(checkout))


# ---------------------------------------------------------------- beside an op package's op


OP_PACKAGE = REPO / "examples" / "acme_ops"
OP_PACKAGE_OPS = ("acme_rmsnorm", "cpu_adam")
OP_PACKAGE_TAG = "imagegen-it/op-package:acme_rmsnorm-cpu_adam"


@pytest.fixture(scope="session")
def op_package_image(docker_ready: None) -> dict[str, Any]:
    """cpu_adam beside examples/acme_ops's CPU op, built and verified once by `imagegen build
    --op-source`: its JSON summary. The op package's tests (test_op_package_image.py) check it,
    and the runtime layers' (test_runtime_layers.py) hold it, an image of other ops of the CPU
    image's target, to the layers it shares with the CPU image."""
    result = imagegen(*build_args(OP_PACKAGE_TAG, OP_PACKAGE_OPS), "--op-source", str(OP_PACKAGE))
    assert result.returncode == 0, f"imagegen build failed ({result.returncode}):\n{result.stderr[-5000:]}"
    summary: dict[str, Any] = result.json()
    return summary


# ---------------------------------------------------------------- the CPU image, one op changed


CHANGED_TAG = "imagegen-it/cpu-changed:" + "-".join(CPU_OPS)
CHANGED_OP = "cpu_lion"


@dataclass(frozen=True)
class ChangedImage:
    tag: str
    build: Cli  # `imagegen build --json`'s output, its build log on stderr


@pytest.fixture(scope="session")
def changed_cpu_image(docker_client: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ChangedImage]:
    """The CPU image built without verification from a copy of the build inputs in which one op's
    source (CHANGED_OP's) ends with a new comment line, as a user's op change does: the build stage
    runs again (the line is new at each session, so no cache answers for it) and the devel stage
    is the CPU image's. One build for the runtime layers' tests (test_runtime_layers.py) and the
    compile times' (test_parallel_build_image.py)."""
    checkout = copy_build_inputs(REPO, tmp_path_factory.mktemp("changed") / "checkout")
    source = checkout / op_source(CHANGED_OP)
    source.write_text(source.read_text() + f"\n// a one-line change {uuid.uuid4().hex}\n")
    built = imagegen(*build_args(CHANGED_TAG), "--no-verify", "--source", str(checkout))
    try:
        assert built.returncode == 0, built.stderr[-5000:]
        yield ChangedImage(CHANGED_TAG, built)
    finally:
        remove_image(docker_client, CHANGED_TAG)


def verify_containers(client: Any, image: str) -> list[str]:
    """The sealed containers (verify, probe) of ``image`` alone: other files' tests verify their
    images on other workers meanwhile."""
    found = client.api.containers(all=True, filters={"label": SEALED_LABEL})
    return [c["Id"] for c in found if c["Image"] == image]


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
