"""Images on this machine: which are here, their id and size, and removing them (pushing is
``imagegen.oci.publish``'s).

The docker SDK itself is imported inside the functions that need its error classes, for the
reason ``imagegen.engine.client`` gives.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import Any

from imagegen.engine.client import docker_client
from imagegen.engine.types import Engine
from imagegen.errors import BadInputError, EngineUnavailableError


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


def inspect_local(client: Any, image: str) -> dict[str, Any]:
    """The engine's inspection of ``image`` (through ``client``); BadInputError when it is not here."""
    import docker  # deferred for the reason imagegen.engine.client gives

    try:
        return dict(client.api.inspect_image(image))
    except docker.errors.ImageNotFound:
        raise BadInputError(
            f"no image {image} here", hint="build it with `imagegen build`, or `docker pull` it first"
        ) from None


def inspect_image_id(tag: str) -> str:
    """The id of image ``tag`` (for a build that left no iidfile behind)."""
    client = docker_client(os.environ)
    try:
        return str(client.api.inspect_image(tag)["Id"])
    finally:
        client.close()


def image_size(engine: Engine, tag: str) -> int:
    """Size in bytes of image ``tag`` (all layers, as ``docker images`` shows it)."""
    import docker

    client = docker_client(os.environ)
    try:
        return int(client.api.inspect_image(tag)["Size"])
    except docker.errors.ImageNotFound as exc:
        raise BadInputError(f"no image {tag} here") from exc
    finally:
        client.close()


def remove_image(engine: Engine, tag: str, force: bool = False) -> None:
    """Remove image ``tag``; an image that is already gone is fine."""
    import docker

    client = docker_client(os.environ)
    try:
        client.api.remove_image(tag, force=force)
    except docker.errors.ImageNotFound:
        pass
    finally:
        client.close()
