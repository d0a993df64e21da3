"""Build an image with the engine ``imagegen.engine_probe`` chose.

BuildKit engines (``buildx``, ``buildkit``) run the docker CLI with ``--progress=plain``;
the classic builder is driven through the Docker SDK. Either way the output is shown as it
comes (``imagegen.progress``) and, when the build fails, read by ``imagegen.build_log`` to
name the op whose compilation failed.
"""

from __future__ import annotations

import os
import tempfile
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from imagegen.build_log import describe_failure, op_sources
from imagegen.docker_sdk import sdk_client
from imagegen.engine_probe import Engine
from imagegen.errors import BadInputError
from imagegen.images import inspect_image_id
from imagegen.process import stream_process
from imagegen.progress import LogView, plain_output


@dataclass(frozen=True)
class BuildResult:
    tag: str
    image_id: str
    seconds: float
    # The build's output lines (for reports and benchmarks: which steps ran, which were cached).
    log: tuple[str, ...] = field(default=(), repr=False, compare=False)


def build_image(
    engine: Engine,
    context: Path,
    dockerfile: str,
    tag: str,
    target: str = "runtime",
    build_args: Mapping[str, str] | None = None,
    extra_contexts: Mapping[str, Path] | None = None,
    secrets: Mapping[str, Path] | None = None,
    no_cache: bool = False,
) -> BuildResult:
    """Build ``dockerfile`` (its text) in ``context`` up to stage ``target`` and tag it.

    ``extra_contexts`` (name -> directory, for ``COPY --from=name``) needs buildx;
    ``secrets`` (id -> file, for ``RUN --mount=type=secret,id=...``) needs BuildKit.
    ``no_cache`` re-runs every step (BuildKit cache mounts such as ccache are kept).
    Raises BuildFailedError naming the failed op when the log tells; on Ctrl-C the build is
    cancelled before KeyboardInterrupt propagates.
    """
    context = Path(context).resolve()
    if not context.is_dir():
        raise BadInputError(f"build context {context} is not a directory")
    if extra_contexts and engine.kind != "buildx":
        raise BadInputError(
            f"named build contexts ({', '.join(extra_contexts)}) need docker buildx; "
            f"this engine is {engine.kind}",
            hint="install the buildx plugin, or copy the files into the build context",
        )
    if secrets and engine.kind == "classic":
        raise BadInputError(
            f"build secrets ({', '.join(secrets)}) need BuildKit; this engine is the classic builder",
            hint="use a docker client with BuildKit (see `imagegen doctor`), or render with --no-buildkit",
        )
    start = time.monotonic()
    # The Dockerfile lives outside the context, so it can never be COPYed by accident and
    # writing it does not invalidate the context's cache.
    with tempfile.TemporaryDirectory(prefix="imagegen-build-") as tmp:
        request = BuildRequest(
            context=context,
            dockerfile_path=Path(tmp) / "Dockerfile",
            iidfile=Path(tmp) / "iid",
            tag=tag,
            target=target,
            build_args=dict(build_args or {}),
            extra_contexts=dict(extra_contexts or {}),
            secrets=dict(secrets or {}),
            no_cache=no_cache,
        )
        request.dockerfile_path.write_text(dockerfile)
        if engine.kind == "classic":
            image_id, lines = _build_classic(request, dockerfile)
        else:
            image_id, lines = _build_cli(engine, request)
    return BuildResult(tag=tag, image_id=image_id, seconds=time.monotonic() - start, log=tuple(lines))


@dataclass(frozen=True)
class BuildRequest:
    """One build, as the engine back ends take it."""

    context: Path
    dockerfile_path: Path
    iidfile: Path
    tag: str
    target: str = "runtime"
    build_args: Mapping[str, str] = field(default_factory=dict)
    extra_contexts: Mapping[str, Path] = field(default_factory=dict)
    secrets: Mapping[str, Path] = field(default_factory=dict)
    no_cache: bool = False


def cli_build_argv(engine: Engine, req: BuildRequest) -> list[str]:
    assert engine.client is not None
    argv = (
        [engine.client, "buildx", "build", "--load"] if engine.kind == "buildx" else [engine.client, "build"]
    )
    # Always plain: the log is parsed to name a failed op, and LogView draws the TTY view.
    argv += ["--progress=plain", "--iidfile", str(req.iidfile), "-f", str(req.dockerfile_path)]
    argv += ["-t", req.tag, "--target", req.target]
    if req.no_cache:
        argv.append("--no-cache")
    for key, value in sorted(req.build_args.items()):
        argv += ["--build-arg", f"{key}={value}"]
    for name, path in sorted(req.extra_contexts.items()):
        argv += ["--build-context", f"{name}={Path(path).resolve()}"]
    for sid, path in sorted(req.secrets.items()):
        argv += ["--secret", f"id={sid},src={Path(path).resolve()}"]
    argv.append(str(req.context))
    return argv


def _build_cli(engine: Engine, req: BuildRequest) -> tuple[str, list[str]]:
    env = {**os.environ, "DOCKER_BUILDKIT": "1"}
    view = LogView(engine.kind, plain_output())
    try:
        rc = stream_process(cli_build_argv(engine, req), env, view)
    finally:
        view.close()
    if rc != 0:
        raise describe_failure(
            view.lines, engine.kind, op_sources(), req.tag, engine_error=f"docker exited {rc}"
        )
    try:
        return req.iidfile.read_text().strip(), view.lines
    except OSError:
        return inspect_image_id(req.tag), view.lines


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


def context_excludes(context: Path) -> list[str]:
    """The .dockerignore patterns of ``context``, or DEFAULT_EXCLUDES when it has none."""
    ignore = context / ".dockerignore"
    if ignore.is_file():
        lines = (ln.strip() for ln in ignore.read_text().splitlines())
        return [ln for ln in lines if ln and not ln.startswith("#")]
    return list(DEFAULT_EXCLUDES)


def _build_classic(req: BuildRequest, dockerfile: str) -> tuple[str, list[str]]:
    from docker.utils import tar

    client = sdk_client(os.environ, timeout=None)
    view = LogView("classic", plain_output())
    image_id: str | None = None
    error: str | None = None
    name = ".imagegen.Dockerfile"
    try:
        excludes = context_excludes(req.context)
        with tar(str(req.context), exclude=excludes, dockerfile=(name, dockerfile)) as archive:
            stream = client.api.build(
                fileobj=archive,
                custom_context=True,
                dockerfile=name,
                tag=req.tag,
                target=req.target,
                buildargs=dict(req.build_args),
                nocache=req.no_cache,
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
        raise describe_failure(view.lines, "classic", op_sources(), req.tag, engine_error=error)
    return image_id or inspect_image_id(req.tag), view.lines
