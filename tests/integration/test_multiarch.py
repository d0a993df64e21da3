"""One verified image for two platforms: `imagegen build --platform linux/amd64,linux/arm64 --push`
builds and verifies each (arm64 under qemu here), pushes them and one OCI image index under the
tag only when both passed, each platform's SBOM and provenance referring to its own manifest.

Slow: the arm64 image is built and verified under emulation (built once for the module; with the
build cache warm a few minutes, cold 10-20 on 2 cores; docs/containers.md has the figures).
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from typing import Any

import pytest

from tests.integration import oci_reader
from tests.integration.conftest import CA_CERT, CPU_OPS, REPO, WHEELHOUSE, imagegen
from tests.integration.test_publish import PROOF_FILES, image_files

pytestmark = [pytest.mark.docker, pytest.mark.slow]

PLATFORMS = ("linux/amd64", "linux/arm64")
REPOSITORY = "imagegen-it/multi"
# The index's aarch64 CPU builds of torch stop at 2.10 (scripts/images.py's ARM64_TORCH); amd64
# takes the wheelhouse's.
ARM64_TORCH = "2.10.0"
ARM64_WHEELHOUSE = REPO / ".cache" / "wheelhouse-linux-arm64"
INDEX = "application/vnd.oci.image.index.v1+json"


def _arm64_inputs() -> None:
    """The arm64 stand-ins (cached by tag) and torch's aarch64 wheel, as `make images` makes them."""
    made = subprocess.run(
        [sys.executable, "-m", "imagegen", "standins", "--platform", "linux/arm64"],
        cwd=REPO, capture_output=True, text=True, timeout=3600,
    )  # fmt: skip
    assert made.returncode == 0, made.stderr[-3000:]
    if not list(ARM64_WHEELHOUSE.glob(f"torch-{ARM64_TORCH}-*aarch64*.whl")):
        sys.path.insert(0, str(REPO / "scripts"))
        from images import arm64_wheel_command

        fetched = subprocess.run(
            arm64_wheel_command(ARM64_TORCH, str(ARM64_WHEELHOUSE)), capture_output=True, text=True
        )
        assert fetched.returncode == 0, fetched.stderr[-3000:]


def _build(tag: str, *extra: str) -> Any:
    return imagegen(
        "build", "--cpu", "--platform", ",".join(PLATFORMS), "--ops", ",".join(CPU_OPS), "--standins",
        "--wheelhouse", str(WHEELHOUSE), "--ca-cert", str(CA_CERT),
        "--platform-torch", f"linux/arm64={ARM64_TORCH}",
        "--platform-wheelhouse", f"linux/arm64={ARM64_WHEELHOUSE}",
        "--tag", tag, "--push", "--json", *extra, timeout=5400,
    )  # fmt: skip


@pytest.fixture(scope="module")
def pushed(local_registry: str) -> dict[str, Any]:
    """Both platforms built, verified and pushed once; the CLI's JSON and how long it took."""
    _arm64_inputs()
    started = time.monotonic()
    result = _build(f"{local_registry}/{REPOSITORY}:1")
    seconds = time.monotonic() - started
    print(f"\nimagegen build --platform {','.join(PLATFORMS)} --push: {seconds:.0f} s", file=sys.stderr)
    assert result.returncode == 0, result.stderr[-5000:]
    summary: dict[str, Any] = result.json()
    return summary


def test_the_tag_is_an_index_of_the_platforms_that_were_verified(
    pushed: dict[str, Any], local_registry: str, docker_client: Any
) -> None:
    assert pushed["ok"] is True and pushed["pushed"] is True
    media_type, body = oci_reader.manifest(local_registry, REPOSITORY, "1")
    assert media_type == INDEX and oci_reader.digest(body) == pushed["index"]["digest"]
    index = json.loads(body)
    by_platform = {f"{m['platform']['os']}/{m['platform']['architecture']}": m for m in index["manifests"]}
    assert set(by_platform) == set(PLATFORMS)
    reports = {r["platform"]: r for r in pushed["platforms"]}
    for platform in PLATFORMS:
        report = reports[platform]
        assert report["verify"]["ok"] is True, platform
        assert report["tag"] == f"{local_registry}/{REPOSITORY}:1-{platform.split('/')[1]}"
        digest = report["published"]["digest"]
        # The index names the manifest that was pushed for the platform ...
        assert by_platform[platform]["digest"] == digest
        # ... which docker recorded when it pushed the local image that was verified ...
        local = docker_client.api.inspect_image(report["tag"])
        assert f"{local_registry}/{REPOSITORY}@{digest}" in local["RepoDigests"]
        assert local["Id"] == report["image_id"] and local["Architecture"] == platform.split("/")[1]
        # ... and whose config is that image (an image's id is its config's digest).
        _, manifest = oci_reader.manifest(local_registry, REPOSITORY, digest)
        assert json.loads(manifest)["config"]["digest"] == report["image_id"]


def test_each_platform_carries_its_own_proof(
    pushed: dict[str, Any], local_registry: str, docker_client: Any
) -> None:
    torch = {"linux/amd64": None, "linux/arm64": ARM64_TORCH}
    for report in pushed["platforms"]:
        digest = report["published"]["digest"]
        documents = oci_reader.documents_referring_to(local_registry, REPOSITORY, digest)
        files = image_files(docker_client, report["tag"])
        for media_type, name in PROOF_FILES.items():
            assert documents[media_type] == files[name], (report["platform"], name)
        # Each platform's SBOM names its own torch: 2.10.0 on arm64, the wheelhouse's on amd64.
        sbom = json.loads(documents["application/vnd.cyclonedx+json"])
        versions = {c["version"] for c in sbom.get("components", []) if c.get("name") == "torch"}
        # The installed distribution's version may carry the build's local label (2.13.0+cpu).
        assert {v.split("+")[0] for v in versions} == {report["torch"].split("+")[0]}, report["platform"]
        if torch[report["platform"]]:
            assert report["torch"] == torch[report["platform"]]
    assert pushed["platforms"][0]["torch"] != pushed["platforms"][1]["torch"]
    # The proof is the platforms', not the index's.
    status, _, _ = oci_reader.get(
        f"http://{local_registry}/v2/{REPOSITORY}/manifests/sha256-{pushed['index']['digest'].split(':')[1]}"
    )
    assert status == 404


def test_a_platform_that_fails_leaves_nothing_pushed(pushed: dict[str, Any], local_registry: str) -> None:
    # A size budget between the two images' sizes: the larger platform fails, the other passes.
    sizes = sorted(r["size_bytes"] for r in pushed["platforms"])
    assert sizes[0] < sizes[1]
    tag = f"{local_registry}/{REPOSITORY}:failing"
    result = _build(tag, "--max-size", str((sizes[0] + sizes[1]) // 2))
    assert result.returncode == 1, result.stderr[-3000:]
    summary = result.json()
    assert summary["ok"] is False and summary["pushed"] is False and summary["index"] is None
    assert sorted(r["ok"] for r in summary["platforms"]) == [False, True]
    for ref in ("failing", "failing-amd64", "failing-arm64"):
        status, _, _ = oci_reader.get(f"http://{local_registry}/v2/{REPOSITORY}/manifests/{ref}")
        assert status == 404, ref
