"""Build an image with the engine ``imagegen.engine.detect`` chose.

The engine's kind picks the backend once (``backend_for``): BuildKit engines (``buildx``,
``buildkit``) run the docker CLI (``imagegen.engine.buildkit``), the classic builder is
driven through the Docker SDK (``imagegen.engine.classic``). Either way the output is shown
as it comes (``imagegen.engine.progress``) and, when the build fails, read by
``imagegen.engine.build_log`` to name the op whose compilation failed.
"""

from __future__ import annotations

import tempfile
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from imagegen.engine.backend import BuildBackend, BuildRequest
from imagegen.engine.buildkit import BuildKitCliBackend
from imagegen.engine.classic import ClassicSdkBackend
from imagegen.engine.types import Engine
from imagegen.errors import BadInputError


@dataclass(frozen=True)
class BuildResult:
    tag: str
    image_id: str
    seconds: float
    # The build's output lines (for reports and benchmarks: which steps ran, which were cached).
    log: tuple[str, ...] = field(default=(), repr=False, compare=False)


def backend_for(engine: Engine) -> BuildBackend:
    """The backend that builds with ``engine``: the docker CLI for BuildKit, else the SDK."""
    if engine.kind == "classic":
        return ClassicSdkBackend()
    return BuildKitCliBackend(engine)


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
    platform: str | None = None,
    network: str | None = None,
) -> BuildResult:
    """Build ``dockerfile`` (its text) in ``context`` up to stage ``target`` and tag it.

    ``extra_contexts`` (name -> directory, for ``COPY --from=name``) needs buildx;
    ``secrets`` (id -> file, for ``RUN --mount=type=secret,id=...``) needs BuildKit.
    ``no_cache`` re-runs every step (BuildKit cache mounts such as ccache are kept).
    ``platform`` (``linux/arm64``) builds for that platform; None: the engine's own.
    ``network`` ("host") is the network of the RUN steps; None: the builder's default.
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
    backend = backend_for(engine)
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
            platform=platform,
            network=network,
        )
        request.dockerfile_path.write_text(dockerfile)
        image_id, lines = backend.build(request)
    return BuildResult(tag=tag, image_id=image_id, seconds=time.monotonic() - start, log=tuple(lines))
