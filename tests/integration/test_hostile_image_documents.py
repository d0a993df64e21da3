"""An image whose proof and labels imagegen did not make, read through the engine: its SBOM file
(the one its label names) is not UTF-8 JSON, and its base-image label is a reference the engine
refuses (`Foo/bar`). `imagegen sbom` (text, --json, -o) and `imagegen size` fail by name, exit 1,
never with a traceback. The image is imported from a tar of two files: nothing runs, nothing
compiles, and no stand-in base is needed."""

from __future__ import annotations

import io
import tarfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from imagegen.engine import client as engine_client
from imagegen.errors import EngineUnavailableError
from imagegen.proof.documents import PROOF_DIR, SBOM, sha256_digest
from imagegen.proof.size import BASE_LABEL, TARGET_LABEL
from tests.integration.conftest import imagegen

pytestmark = [pytest.mark.docker, pytest.mark.timeout(600)]

IMAGE = "imagegen-it/hostile-proof:latest"
BAD_SBOM = b"\xff\xfe not UTF-8, not JSON"


@pytest.fixture(scope="module")
def hostile_image() -> Iterator[str]:
    try:
        client: Any = engine_client.docker_client(timeout=120)
    except EngineUnavailableError as exc:
        pytest.skip(f"no Docker engine: {exc.message}")
    archive = io.BytesIO()
    with tarfile.open(fileobj=archive, mode="w") as tar:
        info = tarfile.TarInfo(f"{PROOF_DIR.lstrip('/')}/{SBOM.filename}")
        info.size = len(BAD_SBOM)
        tar.addfile(info, io.BytesIO(BAD_SBOM))
    labels = {SBOM.label: sha256_digest(BAD_SBOM), TARGET_LABEL: "cpu", BASE_LABEL: "Foo/bar"}
    repository, tag = IMAGE.split(":")
    client.api.import_image_from_data(
        archive.getvalue(),
        repository=repository,
        tag=tag,
        changes=[f"LABEL {k}={v}" for k, v in labels.items()],
    )
    try:
        yield IMAGE
    finally:
        client.images.remove(IMAGE, force=True)
        client.close()


def _failed(args: tuple[str, ...], fragment: str) -> None:
    result = imagegen(*args, timeout=300)
    assert result.returncode == 1, result.stderr
    assert "Traceback" not in result.stdout + result.stderr
    errors = [line for line in result.stderr.splitlines() if line.startswith("error: ")]
    assert len(errors) == 1 and fragment in errors[0], result.stderr
    assert "hint: " in result.stderr
    as_json = imagegen(*args, "--json", timeout=300)
    assert as_json.returncode == 1 and fragment in as_json.json()["error"]["message"], as_json.stdout


def test_an_image_with_a_hostile_proof_fails_by_name(hostile_image: str, tmp_path: Path) -> None:
    _failed(("sbom", hostile_image), "its SBOM is not a JSON object")
    out = tmp_path / "sbom.json"
    _failed(("sbom", hostile_image, "-o", str(out)), "its SBOM is not a JSON object")
    assert not out.exists()
    # The base label names no image the engine would look up; the image has no python to measure.
    _failed(("size", hostile_image), "could not measure")
