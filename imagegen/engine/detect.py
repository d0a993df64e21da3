"""Find what can build here: probe the daemon and every docker client, then decide purely.

Three ways to build, best first:

- ``buildx``:   ``docker buildx build`` (BuildKit, named build contexts, secrets; ``imagegen bake``
  needs it). Debian's plugin (trixie's ``docker-buildx``, one binary in a cli-plugins folder)
  serves every client on PATH, Debian 20.10's and newer ones alike: ``scripts/buildx-plugin.sh``;
- ``buildkit``: a docker client with BuildKit built in (Docker 18.09-22.x) run with
  ``DOCKER_BUILDKIT=1``. Newer clients route that variable to buildx and fail when the
  buildx plugin is missing, so every client on PATH is *probed* with a tiny build;
- ``classic``:  the daemon's classic builder through the Docker SDK (no secrets, no cache
  mounts, slower rebuilds).

Probing (``probe_engine``) and deciding (``choose_engine``) are separate so the decision is
a pure function tests can feed with probe results.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from imagegen import log, settings
from imagegen.engine.client import (
    ENSURE_DOCKER_HINT,
    NO_DAEMON,
    daemon_unavailable,
    docker_client,
    first_line,
)
from imagegen.engine.types import Engine
from imagegen.errors import EngineUnavailableError

PROBE_TIMEOUT_S = 20.0


@dataclass(frozen=True)
class ClientProbe:
    """What one docker CLI on PATH can do. ``None``: not probed (an earlier client won)."""

    path: str
    buildx: bool | None = None
    builtin_buildkit: bool | None = None


@dataclass(frozen=True)
class EngineProbe:
    server_version: str | None  # None: no daemon answered
    server_error: str | None  # why not, as the user reads it ("no Docker daemon answers: ...")
    clients: tuple[ClientProbe, ...]
    server_hint: str | None = None  # how to fix it, when not the usual "start a daemon"


def docker_clients(env: Mapping[str, str]) -> tuple[str, ...]:
    """Every ``docker`` executable on PATH, in PATH order, one per real file."""
    found: list[str] = []
    seen: set[str] = set()
    for directory in env.get("PATH", os.defpath).split(os.pathsep):
        candidate = os.path.join(directory or ".", "docker")
        if not (os.path.isfile(candidate) and os.access(candidate, os.X_OK)):
            continue
        real = os.path.realpath(candidate)
        if real not in seen:
            seen.add(real)
            found.append(candidate)
    return tuple(found)


def _run_probe(argv: Sequence[str], env: Mapping[str, str], stdin: str | None = None) -> bool:
    try:
        done = subprocess.run(
            list(argv),
            input=stdin,
            env=dict(env),
            capture_output=True,
            text=True,
            timeout=PROBE_TIMEOUT_S,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired):
        return False
    return done.returncode == 0


def probe_buildx(client: str, env: Mapping[str, str]) -> bool:
    return _run_probe([client, "buildx", "version"], env)


def probe_builtin_buildkit(client: str, env: Mapping[str, str]) -> bool:
    """Build ``FROM scratch`` with ``DOCKER_BUILDKIT=1`` into a discarded tarball.

    This is the only reliable test: a client newer than 23.0 accepts the variable and then
    fails for want of the buildx plugin, and an old daemon may lack the BuildKit session API.
    """
    probe_env = {**env, "DOCKER_BUILDKIT": "1"}
    argv = [client, "build", "--quiet", "--output", "type=tar,dest=/dev/null", "-"]
    return _run_probe(argv, probe_env, stdin="FROM scratch\n")


def probe_server(env: Mapping[str, str]) -> tuple[str | None, EngineUnavailableError | None]:
    """(server version, None) when a daemon answers, else (None, the error saying why not)."""
    try:
        client = docker_client(env, timeout=10)
    except EngineUnavailableError as exc:
        return None, exc
    try:
        version = client.version()
    except Exception as exc:  # the SDK raises requests / docker errors alike
        return None, daemon_unavailable(first_line(str(exc)))
    finally:
        client.close()
    return str(version.get("Version", "unknown")), None


def probe_engine(env: Mapping[str, str] = os.environ, prefer_buildkit: bool = True) -> EngineProbe:
    """Probe the daemon and the docker clients, stopping at the first BuildKit-capable one."""
    server_version, error = probe_server(env)
    paths = docker_clients(env)
    if error is not None:
        return EngineProbe(None, error.message, tuple(ClientProbe(p) for p in paths), error.hint)
    if not prefer_buildkit or _buildkit_disabled(env):
        return EngineProbe(server_version, None, tuple(ClientProbe(p) for p in paths))
    probes = [ClientProbe(p, buildx=probe_buildx(p, env)) for p in paths]
    if not any(p.buildx for p in probes):
        for i, p in enumerate(probes):
            builtin = probe_builtin_buildkit(p.path, env)
            probes[i] = ClientProbe(p.path, buildx=False, builtin_buildkit=builtin)
            if builtin:
                break
    return EngineProbe(server_version, None, tuple(probes))


def _buildkit_disabled(env: Mapping[str, str]) -> bool:
    # Docker's own switch: DOCKER_BUILDKIT=0 asks for the classic builder.
    return env.get(settings.DOCKER_BUILDKIT.name, "").strip().lower() in {"0", "false", "no"}


def choose_engine(
    probe: EngineProbe, prefer_buildkit: bool = True, env: Mapping[str, str] = os.environ
) -> tuple[Engine, tuple[str, ...]]:
    """The engine to build with and why (reasons worth telling the user). Pure.

    Raises EngineUnavailableError when no daemon answered.
    """
    if probe.server_version is None:
        # server_error already is the whole sentence (the client factory wrote it): adding
        # "no Docker daemon answers" in front again said it twice.
        raise EngineUnavailableError(
            probe.server_error or NO_DAEMON, hint=probe.server_hint or ENSURE_DOCKER_HINT
        )
    version = probe.server_version
    if not prefer_buildkit:
        return Engine("classic", None, version), ("BuildKit not wanted (--no-buildkit): classic builder",)
    if _buildkit_disabled(env):
        return Engine("classic", None, version), ("DOCKER_BUILDKIT=0 is set: classic builder",)
    for c in probe.clients:
        if c.buildx:
            return Engine("buildx", c.path, version), ()
    for c in probe.clients:
        if c.builtin_buildkit:
            return Engine("buildkit", c.path, version), ()
    if probe.clients:
        tried = ", ".join(c.path for c in probe.clients)
        why = (
            f"no docker client here has buildx or built-in BuildKit (tried {tried}; "
            "`bash scripts/buildx-plugin.sh` installs Debian's buildx plugin)"
        )
    else:
        why = "no docker CLI on PATH"
    return Engine("classic", None, version), (
        f"{why}: using the classic builder (no build secrets or cache mounts, slower rebuilds)",
    )


def detect_engine(env: Mapping[str, str] = os.environ, prefer_buildkit: bool = True) -> Engine:
    """Probe, choose, and say once why when the choice is a fallback."""
    engine, reasons = choose_engine(probe_engine(env, prefer_buildkit), prefer_buildkit, env)
    for reason in reasons:
        # A fallback the user did not ask for is a warning; one they asked for is just info.
        if engine.kind == "classic" and prefer_buildkit and not _buildkit_disabled(env):
            log.warn(reason)
        else:
            log.info(reason)
    return engine
