"""`imagegen verify` on images that cannot be verified: a clear failure (exit 1), never a traceback.

Exit 1, not 2: the reference is well formed and the image exists, but it cannot pass
verification (no python, or no op_builder in it), which the contract calls a failed
verification. No verify container is left behind either way.
"""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import tarfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.integration.conftest import REPO, imagegen, verify_containers
from tests.integration.derived import derive, package_files

pytestmark = [pytest.mark.docker, pytest.mark.timeout(600)]

DEBIAN = "imagegen-standin/debian:bookworm"  # made by scripts/standin-images.sh: no python
PYTHON_RUNTIME = "imagegen-standin/python:3.11-runtime"
EMPTY = "imagegen-it/empty:latest"
NO_OP_BUILDER = "imagegen-it/python-without-op-builder:latest"


@pytest.fixture(scope="module")
def odd_images(docker_client: Any) -> Iterator[None]:
    """An image with no files at all (as `docker import` of an empty tar makes), and one with a
    `python` on PATH but without this project."""
    empty = io.BytesIO()
    with tarfile.open(fileobj=empty, mode="w"):
        pass
    repository, tag = EMPTY.split(":")
    docker_client.api.import_image_from_data(empty.getvalue(), repository=repository, tag=tag)
    container = docker_client.containers.run(
        PYTHON_RUNTIME, ["ln", "-sf", "/usr/bin/python3", "/usr/local/bin/python"], detach=True
    )
    try:
        container.wait(timeout=120)
        repository, tag = NO_OP_BUILDER.split(":")
        container.commit(repository=repository, tag=tag)
    finally:
        container.remove(force=True)
    yield
    for image in (EMPTY, NO_OP_BUILDER):
        docker_client.images.remove(image, force=True)


def _no_verify_containers(client: Any, image: str) -> bool:
    return not verify_containers(client, image)


def _assert_failed(image: str, fragment: str | tuple[str, ...], client: Any, *args: str) -> None:
    fragments = (fragment,) if isinstance(fragment, str) else fragment
    result = imagegen("verify", image, *args)
    assert result.returncode == 1, result.stderr
    assert "Traceback" not in result.stdout + result.stderr
    errors = [line for line in result.stderr.splitlines() if line.startswith("error: ")]
    assert len(errors) == 1 and all(f in errors[0] for f in fragments), result.stderr
    assert "hint: " in result.stderr
    as_json = imagegen("verify", image, *args, "--json")
    assert as_json.returncode == 1
    error = as_json.json()["error"]
    assert error["exit_code"] == 1 and all(f in error["message"] for f in fragments) and error["hint"]
    assert _no_verify_containers(client, image)


@pytest.mark.parametrize("image", [DEBIAN, EMPTY])
def test_an_image_without_python_fails_verification_by_name(
    odd_images: None, docker_client: Any, image: str
) -> None:
    _assert_failed(image, "has no `python`", docker_client)


def test_an_image_without_op_builder_fails_verification_by_name(odd_images: None, docker_client: Any) -> None:
    _assert_failed(NO_OP_BUILDER, "not op_builder", docker_client)


@pytest.mark.parametrize(
    ("args", "fragment"),
    [
        (["verify", ""], "empty"),
        (["verify", "Imagegen-Standin/Debian:bookworm"], "upper-case"),
        (["verify", DEBIAN, "--timeout", "0"], "--timeout"),
        # Was "no Docker daemon answers" (exit 3): the value overflowed the socket timeouts.
        (["verify", DEBIAN, "--timeout", "99999999999"], "--timeout"),
        (["verify", "imagegen-it/no-such-image:latest"], "no image"),
    ],
)
def test_bad_verify_input_is_exit_2_with_a_live_engine(
    docker_ready: None, docker_client: Any, args: list[str], fragment: str
) -> None:
    result = imagegen(*args, "--json")
    assert result.returncode == 2, result.stderr
    error = result.json()["error"]
    assert error["exit_code"] == 2 and fragment in error["message"] and error["hint"]
    assert "Traceback" not in result.stderr
    assert _no_verify_containers(docker_client, args[1])


# ---------------------------------------------------------------- images that fail in other ways
#
# Tiny images derived from the runtime stand-in by a COPY of a few files (no RUN, no compile).
# Those "with op_builder" carry this checkout's op_builder and kernels' Python (and `packaging`,
# op_builder's one dependency) on PYTHONPATH but no torch: enough for the verifier to start, read the image's
# manifest and refuse what it cannot check.

IT_ROOT = "/opt/imagegen-it"
WITH_OP_BUILDER = "imagegen-it/with-op-builder:latest"
ENTRYPOINT = "imagegen-it/with-entrypoint:latest"
CORRUPT_MANIFEST = "imagegen-it/corrupt-manifest:latest"
UNKNOWN_OP_LABEL = "imagegen-it/unknown-op-label:latest"
SIGBUS = "imagegen-it/sigbus:latest"
CHATTY = "imagegen-it/chatty:latest"

# A `python` that dies as one with a truncated module does: it maps a file, the file is cut
# short, and reading the mapped page past the new end raises SIGBUS (delivered even to PID 1).
SIGBUS_PYTHON = b"""#!/usr/bin/python3
import mmap, os
with open("/tmp/module.so", "w+b") as f:
    f.write(b"x" * 8192)
    f.flush()
    mapped = mmap.mmap(f.fileno(), 8192)
    os.truncate(f.name, 0)
    mapped[4096]
"""
CHATTY_BYTES = 100 * 1024 * 1024
# A `python` that prints 100 MiB on one line (as a runaway start-up log does), then fails.
CHATTY_PYTHON = f"""#!/bin/sh
head -c {CHATTY_BYTES} /dev/zero | tr '\\0' y
echo
echo 'error: the model server needs MODEL_PATH' >&2
exit 1
""".encode()


@pytest.fixture(scope="module")
def failing_images(docker_client: Any) -> Iterator[None]:
    import packaging

    import op_builder

    sources = dict(package_files(Path(op_builder.__file__).parent))
    # Our ops' builders live in their op packages, which ship with op_builder in one wheel.
    sources.update(package_files(REPO / "kernels"))
    sources.update(package_files(Path(packaging.__file__).parent))
    python = {"/usr/local/bin/python": "/usr/bin/python3"}
    derive(
        docker_client, WITH_OP_BUILDER, PYTHON_RUNTIME,
        {f"{IT_ROOT}/{name}": data for name, data in sources.items()}, python,
        (f"ENV PYTHONPATH={IT_ROOT}", "LABEL io.imagegen.ops=cpu_adam"),
    )  # fmt: skip
    derive(docker_client, ENTRYPOINT, WITH_OP_BUILDER, {}, {},
            ("""ENTRYPOINT ["/bin/sh", "-c", "echo 'usage: serve MODEL' >&2; exit 64"]""",))  # fmt: skip
    manifest = {f"{IT_ROOT}/kernels/_ops/manifest.json": b'{"ops": {"cpu_adam": '}
    derive(docker_client, CORRUPT_MANIFEST, WITH_OP_BUILDER, manifest, {})
    derive(docker_client, UNKNOWN_OP_LABEL, WITH_OP_BUILDER, {}, {},
            ("LABEL io.imagegen.ops=cpu_adam,no_such_op",))  # fmt: skip
    for tag, script in ((SIGBUS, SIGBUS_PYTHON), (CHATTY, CHATTY_PYTHON)):
        path = "/usr/local/bin/python"
        derive(docker_client, tag, PYTHON_RUNTIME, {path: script}, {}, executable=(path,))
    yield
    for image in (CHATTY, SIGBUS, UNKNOWN_OP_LABEL, CORRUPT_MANIFEST, ENTRYPOINT, WITH_OP_BUILDER):
        docker_client.images.remove(image, force=True)


def test_an_image_s_entrypoint_does_not_stand_in_for_the_verifier(
    failing_images: None, docker_client: Any
) -> None:
    # The verifier itself runs, and stops where this torch-less image makes it stop; the
    # ENTRYPOINT (which would print its usage and exit 64) never runs.
    _assert_failed(
        ENTRYPOINT, "the verifier said: ModuleNotFoundError: No module named 'torch'", docker_client
    )
    result = imagegen("verify", ENTRYPOINT)
    assert "usage: serve MODEL" not in result.stderr and "exited 64" not in result.stderr


@pytest.mark.parametrize(
    ("image", "fragments"),
    [
        # Was: every op "not reported by the image".
        (CORRUPT_MANIFEST, ("stopped before checking any op", "manifest", "unreadable")),
        (UNKNOWN_OP_LABEL, ("stopped before checking any op", "unknown op 'no_such_op'")),
    ],
)
def test_the_verifier_s_own_error_is_the_message(
    failing_images: None, docker_client: Any, image: str, fragments: tuple[str, ...]
) -> None:
    _assert_failed(image, fragments, docker_client)


def test_a_verifier_killed_by_sigbus_is_named(failing_images: None, docker_client: Any) -> None:
    _assert_failed(SIGBUS, "killed by SIGBUS (exit 135)", docker_client)
    assert "truncated" in imagegen("verify", SIGBUS, "--json").json()["error"]["hint"]


def _verify_json_with_peak_rss(image: str, tmp_path: Path) -> tuple[int, str, str, int]:
    """(exit code, stdout, stderr, peak resident KiB) of ``imagegen verify IMAGE --json``."""
    with (tmp_path / "out").open("w+b") as out, (tmp_path / "err").open("w+b") as err:
        proc = subprocess.Popen(
            [sys.executable, "-m", "imagegen", "verify", image, "--json"],
            cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO), "CI": "true"}, stdout=out, stderr=err,
        )  # fmt: skip
        returncode, peak_kib = _wait_with_peak_rss(proc, timeout=300)
    return returncode, (tmp_path / "out").read_text(), (tmp_path / "err").read_text(), peak_kib


def test_an_image_s_flood_of_output_stays_out_of_memory_and_the_message(
    failing_images: None, docker_client: Any, tmp_path: Path
) -> None:
    # The yardstick, measured in the same run: the CLI failing on an image that prints little.
    # The CLI's own footprint (the SDK, rich, typer; more on a loaded machine) is not the point.
    (tmp_path / "quiet").mkdir()
    quiet_code, _, _, quiet_kib = _verify_json_with_peak_rss(CORRUPT_MANIFEST, tmp_path / "quiet")
    assert quiet_code == 1
    (tmp_path / "chatty").mkdir()
    returncode, stdout, stderr, peak_kib = _verify_json_with_peak_rss(CHATTY, tmp_path / "chatty")
    assert returncode == 1, stderr[-3000:]
    assert len(stdout) < 64 * 1024, len(stdout)
    error = json.loads(stdout)["error"]
    assert "the verifier said: the model server needs MODEL_PATH" in error["message"]
    assert "bytes of earlier output left out" in error["hint"]
    # Holding the output even once would add CHATTY_BYTES (100 MiB); the kept tail is 4 MiB
    # per stream, so half of the output is a bound a bounded reader stays far below.
    extra_kib = peak_kib - quiet_kib
    assert extra_kib < CHATTY_BYTES // 1024 // 2, (
        f"peak {peak_kib} KiB, {extra_kib} KiB over the quiet run, for {CHATTY_BYTES} bytes of output"
    )
    assert _no_verify_containers(docker_client, CHATTY)


def _wait_with_peak_rss(proc: subprocess.Popen[bytes], timeout: float) -> tuple[int, int]:
    """(exit code, peak resident KiB) of ``proc`` alone: RUSAGE_CHILDREN would be the largest of
    every child this test run has had."""
    deadline = time.monotonic() + timeout
    while True:
        pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
        if pid == proc.pid:
            proc.returncode = os.waitstatus_to_exitcode(status)
            return proc.returncode, usage.ru_maxrss
        if time.monotonic() > deadline:
            proc.kill()
            raise AssertionError(f"imagegen verify did not finish within {timeout}s")
        time.sleep(0.2)


def test_gpus_without_a_gpu_runtime_say_what_is_missing(failing_images: None, docker_client: Any) -> None:
    info = docker_client.info()
    if "nvidia" in (info.get("Runtimes") or {}):
        pytest.skip("this engine has the NVIDIA runtime")
    _assert_failed(WITH_OP_BUILDER, "could not pass GPUs (--gpus all)", docker_client, "--gpus", "all")
    hint = imagegen("verify", WITH_OP_BUILDER, "--gpus", "all", "--json").json()["error"]["hint"]
    assert "NVIDIA container toolkit" in hint and "without --gpus" in hint
