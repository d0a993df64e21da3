"""Images on this machine: which are here, their id and size, removing and pushing them.

The docker SDK itself is imported inside the functions that need its error classes, for the
reason ``imagegen.engine.client`` gives.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterable, Mapping, Sequence

from imagegen.engine.client import docker_client
from imagegen.engine.process import stream_process
from imagegen.engine.progress import LogView
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


def push_image(engine: Engine, tag: str) -> None:
    """Push ``tag`` to the registry its name points at (CLI when there is one: credential helpers)."""
    if engine.client is not None:
        _push_cli(engine.client, tag)
    else:
        _push_sdk(tag)


def _push_cli(client: str, tag: str) -> None:
    view = LogView("buildkit", plain=True)
    try:
        rc = stream_process([client, "push", tag], os.environ, view)
    finally:
        view.close()
    if rc != 0:
        raise BuildFailedError(f"pushing {tag} failed", hint=_push_hint(view.lines))


def _push_sdk(tag: str) -> None:
    client = docker_client(os.environ, timeout=None)
    lines: list[str] = []
    try:
        repository, _, version = tag.rpartition(":") if _has_tag(tag) else (tag, "", "latest")
        for item in client.api.push(repository, tag=version, stream=True, decode=True):
            text = str(item.get("error") or item.get("status") or "")
            if text:
                lines.append(text)
                print(text, file=sys.stderr, flush=True)
            if "error" in item:
                raise BuildFailedError(f"pushing {tag} failed: {item['error']}", hint=_push_hint(lines))
    finally:
        client.close()


def _has_tag(name: str) -> bool:
    # registry:5000/repo has a port, not a tag: a tag is after the last "/".
    return ":" in name.rsplit("/", 1)[-1]


def _push_hint(lines: Iterable[str]) -> str:
    tail = list(lines)[-10:]
    return "check the registry address and `docker login`; last output:\n" + "\n".join(tail)
