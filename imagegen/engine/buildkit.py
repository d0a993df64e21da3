"""The BuildKit backend: ``docker buildx build --load`` or ``DOCKER_BUILDKIT=1 docker build``.

The docker CLI runs with ``--progress=plain`` in its own session (``imagegen.engine.process``)
so its log can be parsed to name a failed op, and Ctrl-C cancels the build cleanly.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from imagegen.engine.backend import BuildRequest
from imagegen.engine.build_log import describe_failure, op_sources
from imagegen.engine.images import inspect_image_id
from imagegen.engine.process import stream_process
from imagegen.engine.progress import LogView, plain_output
from imagegen.engine.types import Engine


def cli_build_argv(engine: Engine, req: BuildRequest) -> list[str]:
    assert engine.client is not None
    argv = (
        [engine.client, "buildx", "build", "--load"] if engine.kind == "buildx" else [engine.client, "build"]
    )
    # Always plain: the log is parsed to name a failed op, and LogView draws the TTY view.
    argv += ["--progress=plain", "--iidfile", str(req.iidfile), "-f", str(req.dockerfile_path)]
    argv += ["-t", req.tag, "--target", req.target]
    if req.platform is not None:
        argv += ["--platform", req.platform]
    if req.no_cache:
        argv.append("--no-cache")
    if req.network is not None:
        argv += ["--network", req.network]
    for key, value in sorted(req.build_args.items()):
        argv += ["--build-arg", f"{key}={value}"]
    for name, path in sorted(req.extra_contexts.items()):
        argv += ["--build-context", f"{name}={Path(path).resolve()}"]
    for sid, path in sorted(req.secrets.items()):
        argv += ["--secret", f"id={sid},src={Path(path).resolve()}"]
    argv.append(str(req.context))
    return argv


@dataclass(frozen=True)
class BuildKitCliBackend:
    """Builds through ``engine.client`` (a docker CLI with buildx or BuildKit built in)."""

    engine: Engine

    def build(self, request: BuildRequest) -> tuple[str, list[str]]:
        env = {**os.environ, "DOCKER_BUILDKIT": "1"}
        view = LogView(self.engine.kind, plain_output())
        try:
            rc = stream_process(cli_build_argv(self.engine, request), env, view)
        finally:
            view.close()
        if rc != 0:
            raise describe_failure(
                view.lines, self.engine.kind, op_sources(), request.tag, engine_error=f"docker exited {rc}"
            )
        try:
            return request.iidfile.read_text().strip(), view.lines
        except OSError:
            return inspect_image_id(request.tag), view.lines
