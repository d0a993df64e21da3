"""The engine's calls for the rest of imagegen (inspect, tag, copy out, push) and the one
translation of the SDK's errors into the project's, played against a fake client: what the SDK
raises never reaches a caller outside imagegen.engine, and every connection is closed."""

from __future__ import annotations

import io
import tarfile
from collections.abc import Iterator
from typing import Any

import docker
import pytest
import requests

from imagegen.engine import client as engine_client
from imagegen.engine import image_files, images, push
from imagegen.engine.types import Engine
from imagegen.errors import (
    BadInputError,
    BuildFailedError,
    EngineUnavailableError,
    ImagegenError,
    VerificationFailedError,
)


def _api_error(status: int, explanation: str) -> docker.errors.APIError:
    response = type("Response", (), {"status_code": status, "reason": "Server Error"})()
    return docker.errors.APIError("engine error", response=response, explanation=explanation)  # type: ignore[arg-type]


class FakeApi:
    """``client.api`` holding the images in ``known`` and the files of ``archive`` at ``folder``."""

    def __init__(self, known: dict[str, dict[str, Any]] | None = None) -> None:
        self.known = known or {}
        self.calls: list[tuple[Any, ...]] = []
        self.archive: bytes | None = None
        self.folder = "/proof"
        self.containers_made: set[str] = set()
        self.push_items: list[dict[str, str]] = []
        self.refuse: Exception | None = None

    def inspect_image(self, image: str) -> dict[str, Any]:
        if self.refuse is not None:
            raise self.refuse
        if image not in self.known:
            raise docker.errors.ImageNotFound(f"No such image: {image}")
        return self.known[image]

    def tag(self, image: str, repository: str, tag: str) -> bool:
        self.calls.append(("tag", image, repository, tag))
        if image not in self.known:
            raise docker.errors.ImageNotFound(f"No such image: {image}")
        return True

    def create_container(self, image: str, command: list[str], name: str, labels: dict[str, str]) -> None:
        assert labels == {"io.imagegen.verify": "1"} and command == ["true"]
        self.containers_made.add(name)

    def get_archive(self, name: str, path: str) -> tuple[Iterator[bytes], dict[str, Any]]:
        if self.archive is None or path != self.folder:
            raise docker.errors.NotFound(f"Could not find the file {path} in container {name}")
        data = self.archive
        return iter([data[:100], data[100:]]), {}

    def remove_container(self, name: str, force: bool) -> None:
        assert force
        if name not in self.containers_made:
            raise docker.errors.NotFound("No such container")
        self.containers_made.discard(name)

    def containers(self, **kwargs: Any) -> list[dict[str, str]]:
        return []

    def push(self, repository: str, tag: str, stream: bool, decode: bool) -> Iterator[dict[str, str]]:
        self.calls.append(("push", repository, tag))
        if self.refuse is not None:
            raise self.refuse
        return iter(self.push_items)


class FakeClient:
    def __init__(self, api: FakeApi) -> None:
        self.api = api
        self.closed = False

    def close(self) -> None:
        self.closed = True


@pytest.fixture
def api(monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeApi]:
    fake = FakeApi()
    opened: list[FakeClient] = []

    def docker_client(env: Any = None, timeout: float | None = 120) -> FakeClient:
        opened.append(FakeClient(fake))
        return opened[-1]

    monkeypatch.setattr(engine_client, "docker_client", docker_client)
    yield fake
    assert opened and all(c.closed for c in opened), "a connection was left open"


# ------------------------------------------------------------------ the translation


@pytest.mark.parametrize(
    ("raised", "expected", "fragment"),
    [
        (_api_error(500, "layer store is broken"), ImagegenError,
         "the Docker engine failed inspecting img: layer store is broken"),
        (requests.exceptions.ConnectionError("Connection aborted."), EngineUnavailableError,
         "no Docker daemon answers: Connection aborted."),
        (requests.exceptions.ReadTimeout("read timed out"), ImagegenError,
         "the Docker engine did not answer inspecting img within 120s"),
    ],
)  # fmt: skip
def test_what_the_sdk_raises_leaves_the_engine_as_the_projects_error(
    api: FakeApi, raised: Exception, expected: type[Exception], fragment: str
) -> None:
    api.refuse = raised
    with pytest.raises(expected) as caught:
        images.find_image("img")
    assert not isinstance(caught.value, (docker.errors.DockerException, requests.RequestException))
    assert isinstance(caught.value, ImagegenError) and caught.value.message.startswith(fragment)
    assert caught.value.hint


def test_the_projects_own_errors_pass_through_unchanged(api: FakeApi) -> None:
    error = VerificationFailedError("the verifier says no")
    with pytest.raises(VerificationFailedError) as caught, engine_client.connection("verifying img"):
        raise error
    assert caught.value is error


# ------------------------------------------------------------------ images


def test_an_image_not_here_is_none_or_bad_input(api: FakeApi) -> None:
    api.known["here:1"] = {"Id": "sha256:1", "Size": 7}
    assert images.find_image("here:1") == {"Id": "sha256:1", "Size": 7}
    assert images.find_image("gone:1") is None
    with pytest.raises(BadInputError, match="no image gone:1 here") as caught:
        images.inspect_local("gone:1")
    assert caught.value.hint and "imagegen build" in caught.value.hint
    assert images.image_size(Engine("classic", None, "28"), "here:1") == 7


@pytest.mark.parametrize(
    ("name", "split"),
    [
        ("registry:5000/team/app:v1", ("registry:5000/team/app", "v1")),
        ("registry:5000/team/app", ("registry:5000/team/app", "latest")),  # a port, not a tag
        ("app:cpu", ("app", "cpu")),
        ("app", ("app", "latest")),
    ],
)
def test_a_name_splits_into_repository_and_tag(name: str, split: tuple[str, str]) -> None:
    assert images.split_tag(name) == split


def test_tagging_names_the_image_and_a_refusal_is_a_build_failure(api: FakeApi) -> None:
    api.known["src:1"] = {"Id": "sha256:1"}
    images.tag_image("src:1", "registry:5000/src:1")
    assert api.calls == [("tag", "src:1", "registry:5000/src", "1")]
    with pytest.raises(BuildFailedError, match="could not tag gone:1 as registry:5000/gone:1: No such image"):
        images.tag_image("gone:1", "registry:5000/gone:1")


# ------------------------------------------------------------------ files copied out


def _tar(files: dict[str, bytes]) -> bytes:
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w") as tar:
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
        folder = tarfile.TarInfo("proof/empty")
        folder.type = tarfile.DIRTYPE
        tar.addfile(folder)
    return out.getvalue()


def test_files_are_copied_out_of_a_container_that_is_then_removed(api: FakeApi) -> None:
    api.archive = _tar({"proof/sbom.json": b"{}" * 100, "proof/provenance.json": b"[]"})
    found = image_files.copy_files("img", "/proof", purpose="proof")
    assert found == {"proof/sbom.json": b"{}" * 100, "proof/provenance.json": b"[]"}
    assert api.containers_made == set()


def test_nothing_at_the_path_is_none_and_the_container_is_still_removed(api: FakeApi) -> None:
    assert image_files.copy_files("img", "/elsewhere") is None
    assert api.containers_made == set()


# ------------------------------------------------------------------ pushing through the SDK


SDK_ONLY = Engine("classic", None, "28")


def test_a_push_the_registry_refuses_is_a_build_failure_with_its_output(
    api: FakeApi, capsys: pytest.CaptureFixture[str]
) -> None:
    api.push_items = [
        {"status": "Preparing"},
        {"error": "denied: requested access to the resource is denied"},
    ]
    with pytest.raises(BuildFailedError, match="pushing registry:5000/app:v1 failed: denied") as caught:
        push.push_image(SDK_ONLY, "registry:5000/app:v1")
    assert api.calls == [("push", "registry:5000/app", "v1")]
    assert caught.value.hint and "Preparing" in caught.value.hint
    assert "Preparing" in capsys.readouterr().err


def test_a_push_the_engine_refuses_at_once_is_a_build_failure(api: FakeApi) -> None:
    api.refuse = _api_error(404, "An image does not exist locally with the tag: registry:5000/app")
    with pytest.raises(BuildFailedError, match="pushing registry:5000/app failed: An image does not exist"):
        push.push_image(SDK_ONLY, "registry:5000/app")
    assert api.calls == [("push", "registry:5000/app", "latest")]


def test_a_push_that_goes_through_returns(api: FakeApi) -> None:
    api.push_items = [{"status": "Pushed"}, {"status": "v1: digest: sha256:ab size: 1"}]
    push.push_image(SDK_ONLY, "registry:5000/app:v1")
