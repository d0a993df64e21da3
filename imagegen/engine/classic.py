"""The classic backend: the daemon's classic builder, driven through the Docker SDK.

No build secrets, no cache mounts; the context is sent as a tar archive, so what it must
leave out (a checkout's virtual environment, VCS data) is excluded here.
"""

from __future__ import annotations

import os
from pathlib import Path

from imagegen.engine.backend import BuildRequest
from imagegen.engine.build_log import describe_failure, op_sources
from imagegen.engine.client import docker_client
from imagegen.engine.images import inspect_image_id
from imagegen.engine.progress import LogView, plain_output

# Used for the classic builder when the context has no .dockerignore: a checkout's virtual
# environment and VCS data would otherwise be sent to the daemon on every build.
DEFAULT_EXCLUDES = (
    ".git",
    ".venv",
    "venv",
    "**/__pycache__",
    "**/*.pyc",
    "build",
    "dist",
    "*.egg-info",
    ".mypy_cache",
    ".ruff_cache",
    ".pytest_cache",
    "bench/results",
    ".cache",
)

# The name the Dockerfile gets inside the context archive.
_DOCKERFILE_NAME = ".imagegen.Dockerfile"


def context_excludes(context: Path) -> list[str]:
    """The .dockerignore patterns of ``context``, or DEFAULT_EXCLUDES when it has none."""
    ignore = context / ".dockerignore"
    if ignore.is_file():
        lines = (ln.strip() for ln in ignore.read_text().splitlines())
        return [ln for ln in lines if ln and not ln.startswith("#")]
    return list(DEFAULT_EXCLUDES)


class ClassicSdkBackend:
    """Builds with the daemon's classic builder (``APIClient.build``)."""

    def build(self, request: BuildRequest) -> tuple[str, list[str]]:
        # Deferred like every docker SDK import (see imagegen.engine.client); the client
        # factory below has already reported a missing package by the time this runs.
        client = docker_client(os.environ, timeout=None)
        from docker.utils import tar

        view = LogView("classic", plain_output())
        image_id: str | None = None
        error: str | None = None
        dockerfile = request.dockerfile_path.read_text()
        try:
            excludes = context_excludes(request.context)
            with tar(
                str(request.context), exclude=excludes, dockerfile=(_DOCKERFILE_NAME, dockerfile)
            ) as archive:
                stream = client.api.build(
                    fileobj=archive,
                    custom_context=True,
                    dockerfile=_DOCKERFILE_NAME,
                    tag=request.tag,
                    target=request.target,
                    buildargs=dict(request.build_args),
                    nocache=request.no_cache,
                    platform=request.platform,
                    rm=True,
                    forcerm=True,  # intermediate containers go away on failure too
                    decode=True,
                )
                for item in stream:
                    if "stream" in item:
                        view.feed(str(item["stream"]).rstrip("\n"))
                    if "aux" in item and isinstance(item["aux"], dict) and "ID" in item["aux"]:
                        image_id = str(item["aux"]["ID"])
                    if "error" in item:
                        error = str(item["error"]).strip()
                        view.feed(error)
        except BaseException:
            # Closing the connection is how a client cancels a classic build: the daemon then
            # kills and (forcerm) removes the step's container.
            client.close()
            view.close()
            raise
        view.close()
        client.close()
        if error is not None:
            raise describe_failure(view.lines, "classic", op_sources(), request.tag, engine_error=error)
        return image_id or inspect_image_id(request.tag), view.lines
