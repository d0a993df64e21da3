"""One build, as a backend takes it, and the Protocol every build backend meets.

Two backends: ``imagegen.engine.buildkit`` (the docker CLI, for the ``buildx`` and
``buildkit`` engines) and ``imagegen.engine.classic`` (the daemon's classic builder through
the Docker SDK). ``imagegen.engine.build.backend_for`` picks one from the probed engine.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol


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
    # The OCI platform to build for ("linux/arm64"); None: the engine's own. It picks the
    # variant of each multi-platform base, and another architecture's RUN steps go through
    # the host's binfmt emulation (qemu-user-static).
    platform: str | None = None
    # "host": RUN steps share the host's network namespace (a compile cache on its loopback);
    # None: the builder's default network.
    network: str | None = None


class BuildBackend(Protocol):
    """Runs one build, showing its output as it comes.

    Returns (image id, the build's output lines). Raises BuildFailedError naming the failed
    op when the log tells; on Ctrl-C the build is cancelled before KeyboardInterrupt propagates.
    """

    def build(self, request: BuildRequest) -> tuple[str, list[str]]: ...
