"""The one Docker SDK client factory: everything in imagegen that talks to the daemon uses it,
and only from inside ``imagegen.engine`` (a banned import elsewhere: imagegen/.ruff.toml).

Failures to connect become ``EngineUnavailableError`` here, once, with the one message a
user sees for them (``no Docker daemon answers: why``) and the way to start a daemon; what the
engine refuses later, in the middle of the work, becomes an ``ImagegenError`` (``connection``).
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING

from imagegen import settings
from imagegen.errors import EngineUnavailableError, ImagegenError

if TYPE_CHECKING:
    import docker

ENSURE_DOCKER_HINT = (
    "start a daemon with scripts/ensure-docker.sh (installs and starts docker.io on Debian as root), "
    "or point DOCKER_HOST at one you can reach"
)
NO_DAEMON = "no Docker daemon answers"
BAD_DOCKER_HOST_HINT = (
    "set DOCKER_HOST to unix:///var/run/docker.sock, tcp://HOST:PORT (a port from 1 to 65535) or "
    "ssh://USER@HOST, or unset it to use the local socket"
)


def docker_client(env: Mapping[str, str] = os.environ, timeout: float | None = 120) -> docker.DockerClient:
    """A client of the daemon ``env`` points at (``DOCKER_HOST``, else the local socket).

    ``timeout=None``: no read timeout, for a classic build that can be silent for minutes
    while a kernel compiles. Raises EngineUnavailableError when no daemon answers.
    """
    # Imported here, not at module top: the docker SDK is the CLI extra's and is slow to
    # import; `imagegen ops` / `dockerfile` and the pure parts of the engine never need it.
    try:
        import docker
    except ImportError as exc:
        raise EngineUnavailableError(
            "the docker Python package is missing", hint="pip install 'imagegen[cli]'"
        ) from exc
    check_docker_host(env)
    try:
        return docker.from_env(environment=dict(env), timeout=timeout)
    except docker.errors.DockerException as exc:
        raise daemon_unavailable(first_line(str(exc))) from exc


@contextlib.contextmanager
def connection(
    doing: str, timeout: float | None = 120, env: Mapping[str, str] = os.environ
) -> Iterator[docker.DockerClient]:
    """A client (``docker_client``'s), closed on leaving.

    The SDK errors its caller leaves unhandled leave as the project's: a daemon that goes away
    in the middle (a connection refused or reset) is the error of one that does not answer at
    all; a reply that does not come in ``timeout``, or anything else the engine refuses, an
    ``ImagegenError`` saying what it was ``doing`` ("inspecting IMAGE"). So no caller outside
    the engine needs to know the SDK's exceptions.
    """
    client = docker_client(env, timeout)
    import docker
    import requests

    try:
        yield client
    except requests.exceptions.ConnectionError as exc:
        raise daemon_unavailable(first_line(str(exc))) from exc
    except requests.exceptions.Timeout as exc:
        raise ImagegenError(
            f"the Docker engine did not answer {doing} within {timeout:.0f}s",
            hint="check the engine (`docker info`, its log) and run the command again",
        ) from exc
    except docker.errors.DockerException as exc:
        raise ImagegenError(
            f"the Docker engine failed {doing}: {explanation(exc)}",
            hint="check the engine (`docker info`, its log) and run the command again",
        ) from exc
    finally:
        client.close()


def explanation(exc: Exception) -> str:
    """What the engine said about a refused request (the SDK's ``explanation``), else the error's text."""
    return first_line(str(getattr(exc, "explanation", None) or exc))


def check_docker_host(env: Mapping[str, str]) -> None:
    """EngineUnavailableError naming ``DOCKER_HOST`` when it is not an address the SDK can use.

    The SDK parses it with urllib, which raises ValueError (not a DockerException) for a bad
    port or bracket (``tcp://host:abc``, ``http://[::1``); parsed here, first, so every such
    value is the one error that names the variable instead of a traceback or "no daemon".
    """
    host = env.get(settings.DOCKER_HOST.name)
    if not host:  # unset or empty: the SDK uses the local socket
        return
    import docker
    from docker.utils import parse_host

    try:
        parse_host(host, False, tls=bool(env.get(settings.DOCKER_TLS_VERIFY.name)))
    except (ValueError, docker.errors.DockerException) as exc:
        raise EngineUnavailableError(
            f"DOCKER_HOST={host!r} is not a Docker daemon address: {first_line(str(exc))}",
            hint=BAD_DOCKER_HOST_HINT,
        ) from exc


def daemon_unavailable(why: str | None) -> EngineUnavailableError:
    """The error for a daemon that does not answer, ``why`` (the SDK's reason) said once."""
    message = f"{NO_DAEMON}: {why}" if why else NO_DAEMON
    return EngineUnavailableError(message, hint=ENSURE_DOCKER_HINT)


def first_line(text: str) -> str:
    return text.strip().splitlines()[0] if text.strip() else text
