"""Images on this machine: which are here, their inspection, id and size, naming and removing
them (pushing them is ``imagegen.engine.push``'s).

The docker SDK itself is imported inside the functions that need its error classes, for the
reason ``imagegen.engine.client`` gives.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Mapping, Sequence
from typing import Any

from imagegen.engine.client import connection, docker_client, explanation
from imagegen.engine.types import Engine
from imagegen.errors import BadInputError, BuildFailedError, EngineUnavailableError


def local_images(refs: Sequence[str], env: Mapping[str, str] = os.environ) -> dict[str, bool] | None:
    """{ref: present locally}; None when no daemon answers (the caller reports that)."""
    try:
        client = docker_client(env, timeout=30)
    except EngineUnavailableError:
        return None
    import docker

    try:
        found: dict[str, bool] = {}
        for ref in refs:
            try:
                client.api.inspect_image(ref)
                found[ref] = True
            except docker.errors.ImageNotFound:
                found[ref] = False
        return found
    except docker.errors.DockerException:
        return None
    finally:
        client.close()


def find_image(image: str, timeout: float = 120) -> dict[str, Any] | None:
    """The engine's inspection of ``image`` (``docker image inspect``); None when it is not here."""
    import docker  # deferred for the reason imagegen.engine.client gives

    with connection(f"inspecting {image}", timeout) as client:
        try:
            return dict(client.api.inspect_image(image))
        except docker.errors.ImageNotFound:
            return None


def inspect_local(image: str, timeout: float = 120) -> dict[str, Any]:
    """The engine's inspection of ``image``; BadInputError when it is not here."""
    found = find_image(image, timeout)
    if found is None:
        raise BadInputError(
            f"no image {image} here", hint="build it with `imagegen build`, or `docker pull` it first"
        )
    return found


def inspect_image_id(tag: str) -> str:
    """The id of image ``tag`` (for a build that left no iidfile behind)."""
    with connection(f"inspecting {tag}") as client:
        return str(client.api.inspect_image(tag)["Id"])


def image_size(engine: Engine, tag: str) -> int:
    """Size in bytes of image ``tag`` (all layers, as ``docker images`` shows it)."""
    found = find_image(tag)
    if found is None:
        raise BadInputError(f"no image {tag} here")
    return int(found["Size"])


def tag_image(source: str, target: str) -> None:
    """Give image ``source`` the name ``target`` too (``docker tag``)."""
    import docker

    repository, version = split_tag(target)
    with connection(f"tagging {source} as {target}") as client:
        try:
            client.api.tag(source, repository, version)
        except docker.errors.APIError as exc:
            raise BuildFailedError(f"could not tag {source} as {target}: {explanation(exc)}") from exc


def split_tag(name: str) -> tuple[str, str]:
    """(repository, tag) of an image name; ``latest`` when it names none."""
    # registry:5000/repo has a port, not a tag: a tag is after the last "/".
    if ":" not in name.rsplit("/", 1)[-1]:
        return name, "latest"
    repository, _, tag = name.rpartition(":")
    return repository, tag


def remove_image(engine: Engine, tag: str, force: bool = False) -> None:
    """Remove image ``tag``; an image that is already gone is fine."""
    import docker

    with connection(f"removing {tag}") as client, contextlib.suppress(docker.errors.ImageNotFound):
        client.api.remove_image(tag, force=force)
