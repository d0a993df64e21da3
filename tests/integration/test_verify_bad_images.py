"""`imagegen verify` on images that cannot be verified: a clear failure (exit 1), never a traceback.

Exit 1, not 2: the reference is well formed and the image exists, but it cannot pass
verification (no python, or no op_builder in it), which the contract calls a failed
verification. No verify container is left behind either way.
"""

from __future__ import annotations

import io
import tarfile
from collections.abc import Iterator
from typing import Any

import pytest

from imagegen.verify import VERIFY_LABEL
from tests.integration.conftest import imagegen

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


def _no_verify_containers(client: Any) -> bool:
    return not client.api.containers(all=True, quiet=True, filters={"label": VERIFY_LABEL})


def _assert_failed(image: str, fragment: str, client: Any) -> None:
    result = imagegen("verify", image)
    assert result.returncode == 1, result.stderr
    assert "Traceback" not in result.stdout + result.stderr
    errors = [line for line in result.stderr.splitlines() if line.startswith("error: ")]
    assert len(errors) == 1 and fragment in errors[0], result.stderr
    assert "hint: " in result.stderr
    as_json = imagegen("verify", image, "--json")
    assert as_json.returncode == 1
    error = as_json.json()["error"]
    assert error["exit_code"] == 1 and fragment in error["message"] and error["hint"]
    assert _no_verify_containers(client)


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
    assert _no_verify_containers(docker_client)
