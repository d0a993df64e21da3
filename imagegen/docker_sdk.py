"""The Docker SDK client every module that talks to the daemon shares, and its failure hint."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

from imagegen.errors import EngineUnavailableError

if TYPE_CHECKING:
    import docker

ENSURE_DOCKER_HINT = (
    "start a daemon with scripts/ensure-docker.sh (installs and starts docker.io on Debian as root), "
    "or point DOCKER_HOST at one you can reach"
)


def sdk_client(env: Mapping[str, str], timeout: float | None = 120) -> docker.DockerClient:
    try:
        import docker
    except ImportError as exc:  # the CLI extra brings it
        raise EngineUnavailableError(
            "the docker Python package is missing", hint="pip install 'imagegen[cli]'"
        ) from exc
    try:
        # timeout=None: a classic build can be silent for minutes while a kernel compiles.
        return docker.from_env(environment=dict(env), timeout=timeout)
    except docker.errors.DockerException as exc:
        raise EngineUnavailableError(
            f"no Docker daemon answers: {first_line(str(exc))}", hint=ENSURE_DOCKER_HINT
        ) from exc


def first_line(text: str) -> str:
    return text.strip().splitlines()[0] if text.strip() else text
