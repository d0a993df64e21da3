"""The arm64 CPU image, cross-compiled on this amd64 machine and verified under qemu: every op
`aot`, every module aarch64 code, async_io kept with its self-test "not checkable under emulation".

Slow tier (`make test SLOW=1`): it needs the arm64 stand-ins (`imagegen standins --platform
linux/arm64`, minutes under qemu when cold) and torch 2.10.0's aarch64 wheel
(`make images PLATFORM=linux/arm64` fetches it into .cache/wheelhouse-linux-arm64).
"""

from __future__ import annotations

import json
import platform
import subprocess
from pathlib import Path

import pytest

from tests.integration.conftest import CA_CERT, REPO, WHEELHOUSE, imagegen

pytestmark = [pytest.mark.docker, pytest.mark.slow, pytest.mark.timeout(2400)]

ARM64_WHEELHOUSE = REPO / ".cache" / "wheelhouse-linux-arm64"
TAG = "imagegen-it/cross:cpu-arm64"


def test_the_arm64_cpu_image_is_cross_compiled_and_verifies(docker_ready: None, tmp_path: Path) -> None:
    if platform.machine() != "x86_64":
        pytest.skip("proves the cross build of an amd64 machine")
    if not list(ARM64_WHEELHOUSE.glob("torch-2.10.0-*aarch64.whl")):
        pytest.skip(
            f"no aarch64 torch 2.10.0 wheel in {ARM64_WHEELHOUSE} "
            "(make images PLATFORM=linux/arm64 fetches it)"
        )
    imagegen("standins", "--platform", "linux/arm64")
    args = ["--cpu", "--platform", "linux/arm64", "--standins", "--ops", "cpu_adam,async_io", "--tag", TAG]
    args += ["--wheelhouse", str(ARM64_WHEELHOUSE), "--build-wheelhouse", str(WHEELHOUSE)]
    result = imagegen("build", *args, "--ca-cert", str(CA_CERT), "--json")
    report = json.loads(result.stdout)
    verify = report["verify"]
    assert verify["ok"], verify
    ops = {op["name"]: op for op in verify["ops"]}
    assert set(ops) == {"cpu_adam", "async_io"}
    assert all(op["source"] == "aot" and op["machine"] == "aarch64" for op in ops.values()), ops
    assert ops["cpu_adam"]["selftest"]["ok"]
    assert ops["async_io"]["selftest"]["skipped"].startswith("not checkable under emulation: qemu-user")
    # The build said which step ran the target's code, and the image's manifest names its platform.
    assert "the only step that runs linux/arm64's code" in result.stderr
    manifest = subprocess.run(
        [
            "docker",
            "run",
            "--rm",
            "--platform",
            "linux/arm64",
            "--entrypoint",
            "sh",
            TAG,
            "-c",
            "cat /opt/venv/lib/python3.11/site-packages/kernels/_ops/manifest.json",
        ],
        capture_output=True,
        text=True,
        check=True,
        timeout=600,
    )
    assert json.loads(manifest.stdout)["platform"] == "linux/arm64"
