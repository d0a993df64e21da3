"""The container engine: find what can build here, then build, size, push and remove images.

Three ways to build, best first:

- ``buildx``:   ``docker buildx build`` (BuildKit, named build contexts, secrets);
- ``buildkit``: a docker client with BuildKit built in (Docker 18.09-22.x) run with
  ``DOCKER_BUILDKIT=1``. Newer clients route that variable to buildx and fail when the
  buildx plugin is missing, so every client on PATH is *probed* with a tiny build;
- ``classic``:  the daemon's classic builder through the Docker SDK (no secrets, no cache
  mounts, slower rebuilds).

Probing (``probe_engine``) and deciding (``choose_engine``) are separate so the decision is
a pure function tests can feed with probe results. The build log is parsed by the pure
functions in the "build log" section to name the op whose compilation failed.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any, Literal

from imagegen import log
from imagegen.errors import BadInputError, BuildFailedError, EngineUnavailableError

if TYPE_CHECKING:
    import docker

EngineKind = Literal["buildx", "buildkit", "classic"]

ENSURE_DOCKER_HINT = (
    "start a daemon with scripts/ensure-docker.sh (installs and starts docker.io on Debian as root), "
    "or point DOCKER_HOST at one you can reach"
)
PROBE_TIMEOUT_S = 20.0
# Lines of compiler output put into a failed build's hint.
EXCERPT_LINES = 30
# Seconds a cancelled docker CLI gets to stop its build before it is killed.
CANCEL_GRACE_S = 15.0


@dataclass(frozen=True)
class Engine:
    kind: EngineKind
    client: str | None  # the docker CLI used; None when the SDK alone drives the classic builder
    server_version: str


@dataclass(frozen=True)
class BuildResult:
    tag: str
    image_id: str
    seconds: float
    # The build's output lines (for reports and benchmarks: which steps ran, which were cached).
    log: tuple[str, ...] = field(default=(), repr=False, compare=False)


# --------------------------------------------------------------------------- detection


@dataclass(frozen=True)
class ClientProbe:
    """What one docker CLI on PATH can do. ``None``: not probed (an earlier client won)."""

    path: str
    buildx: bool | None = None
    builtin_buildkit: bool | None = None


@dataclass(frozen=True)
class EngineProbe:
    server_version: str | None  # None: no daemon answered
    server_error: str | None
    clients: tuple[ClientProbe, ...]


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


def probe_server(env: Mapping[str, str]) -> tuple[str | None, str | None]:
    """(server version, None) when a daemon answers, else (None, why not)."""
    try:
        client = _sdk_client(env, timeout=10)
    except EngineUnavailableError as exc:
        return None, exc.message
    try:
        version = client.version()
    except Exception as exc:  # the SDK raises requests / docker errors alike
        return None, _first_line(str(exc))
    finally:
        client.close()
    return str(version.get("Version", "unknown")), None


def probe_engine(env: Mapping[str, str] = os.environ, prefer_buildkit: bool = True) -> EngineProbe:
    """Probe the daemon and the docker clients, stopping at the first BuildKit-capable one."""
    server_version, server_error = probe_server(env)
    paths = docker_clients(env)
    if server_version is None or not prefer_buildkit or _buildkit_disabled(env):
        return EngineProbe(server_version, server_error, tuple(ClientProbe(p) for p in paths))
    probes = [ClientProbe(p, buildx=probe_buildx(p, env)) for p in paths]
    if not any(p.buildx for p in probes):
        for i, p in enumerate(probes):
            builtin = probe_builtin_buildkit(p.path, env)
            probes[i] = ClientProbe(p.path, buildx=False, builtin_buildkit=builtin)
            if builtin:
                break
    return EngineProbe(server_version, server_error, tuple(probes))


def _buildkit_disabled(env: Mapping[str, str]) -> bool:
    # Docker's own switch: DOCKER_BUILDKIT=0 asks for the classic builder.
    return env.get("DOCKER_BUILDKIT", "").strip().lower() in {"0", "false", "no"}


def choose_engine(
    probe: EngineProbe, prefer_buildkit: bool = True, env: Mapping[str, str] = os.environ
) -> tuple[Engine, tuple[str, ...]]:
    """The engine to build with and why (reasons worth telling the user). Pure.

    Raises EngineUnavailableError when no daemon answered.
    """
    if probe.server_version is None:
        detail = f": {probe.server_error}" if probe.server_error else ""
        raise EngineUnavailableError(f"no Docker daemon answers{detail}", hint=ENSURE_DOCKER_HINT)
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
        why = f"no docker client here has buildx or built-in BuildKit (tried {tried})"
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


# --------------------------------------------------------------------------- build log (pure)

_BK_OUTPUT = re.compile(r"^#(\d+) \d+(?:\.\d+)? (.*)$")
_BK_HEADER = re.compile(r"^#(\d+) \[([^\]]+)\] (.*)$")
_BK_ERROR = re.compile(r"^#(\d+) ERROR: (.*)$")
_BK_STATE = re.compile(r"^#\d+ (?:DONE|CACHED|ERROR|CANCELED)\b")
_BK_DIGEST = re.compile(r"^#\d+ sha256:[0-9a-f]+$")
_CLASSIC_STEP = re.compile(r"^Step \d+/\d+ : (.*)$")
# A compiler / ninja / nvcc error naming a file under kernels/csrc.
_CSRC_PATH = re.compile(r"kernels/csrc/([\w./+-]+?)\.(?:cpp|cc|cu|cuh|hip|h|hpp|c|o)\b")
# gcc/clang "file:12:3: error:", nvcc "file(12): error", ninja "FAILED:", the linker, setuptools.
_ERROR_LINE = re.compile(
    r":\d+(?::\d+)?: (?:fatal )?error\b|\(\d+\): (?:catastrophic )?error\b|^\s*FAILED: "
    r"|undefined reference|Error compiling|^\s*error: command"
)
_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
_INCLUDED_FROM = re.compile(r"^\s*(?:In file included|from) .*kernels/csrc/")
_OP_MARKERS = (
    re.compile(r"\bbuilding op[: ]+['\"]?([a-z][a-z0-9_]*)"),
    # setuptools' own line per extension: building 'kernels._ops.cpu_adam' extension
    re.compile(r"building '(?:[\w.]*\.)?([a-z][a-z0-9_]*)' extension"),
)
_BASE_MISSING = re.compile(
    r"pull access denied|failed to resolve source metadata|repository does not exist"
    r"|manifest unknown|failed to do request|no such host|not found: manifest",
    re.IGNORECASE,
)


def failing_step_output(lines: Sequence[str], kind: EngineKind) -> tuple[str | None, list[str]]:
    """(title of the step that failed, that step's output lines without log prefixes).

    BuildKit interleaves parallel steps (``#8 12.3 text``), so only the failed step's own
    lines are kept; a step cancelled because a sibling failed is not "the" failure. The
    classic builder runs one step at a time: its last step is the one that failed.
    When the failing step cannot be told, every line is returned.
    """
    if kind == "classic":
        title: str | None = None
        start = 0
        for i, line in enumerate(lines):
            m = _CLASSIC_STEP.match(line)
            if m:
                title, start = m.group(1), i + 1
        body = [
            ln for ln in lines[start:] if not ln.startswith((" ---> ", "Removing intermediate container"))
        ]
        return title, body

    titles: dict[str, str] = {}
    failed: str | None = None
    for line in lines:
        header = _BK_HEADER.match(line)
        if header:
            titles.setdefault(header.group(1), f"[{header.group(2)}] {header.group(3)}")
            continue
        err = _BK_ERROR.match(line)
        if err and failed is None and "context canceled" not in err.group(2):
            failed = err.group(1)
    if failed is None:
        return None, [_strip_buildkit(ln) for ln in lines]
    body = [m.group(2) for m in map(_BK_OUTPUT.match, lines) if m and m.group(1) == failed]
    return titles.get(failed), body


def _strip_buildkit(line: str) -> str:
    m = _BK_OUTPUT.match(line)
    return m.group(2) if m else line


def ops_for_source(path: str, sources_by_op: Mapping[str, Sequence[str]]) -> tuple[str, ...]:
    """Ops compiling ``path`` (relative to kernels/csrc, with or without extension)."""
    stem = os.path.splitext(path)[0]
    return tuple(
        sorted(
            op
            for op, sources in sources_by_op.items()
            if any(os.path.splitext(s)[0] == stem for s in sources)
        )
    )


def find_failed_op(output: Sequence[str], sources_by_op: Mapping[str, Sequence[str]]) -> str | None:
    """The op whose compilation failed, judged from the failed step's output.

    The first error line that names a source of exactly one op decides; for an error in a
    shared header, the "In file included from" lines just above it name the source. Failing
    that, the op being built when the first error appeared (setuptools' "building '...'
    extension" line, or op_builder's "building op NAME").
    """
    current: str | None = None
    for i, line in enumerate(output):
        for marker in _OP_MARKERS:
            m = marker.search(line)
            if m and m.group(1) in sources_by_op:
                current = m.group(1)
        if not _ERROR_LINE.search(line):
            continue
        candidates = [line]
        # Walk up the include chain (at most a screenful) to the source that pulled the header in.
        j = i - 1
        while j >= 0 and i - j <= 20 and _INCLUDED_FROM.match(output[j]):
            candidates.append(output[j])
            j -= 1
        for text in candidates:
            for path in _CSRC_PATH.findall(text):
                ops = ops_for_source(path, sources_by_op)
                if len(ops) == 1:
                    return ops[0]
        if current is not None:
            return current
    return current


def compiler_excerpt(output: Sequence[str], limit: int = EXCERPT_LINES) -> list[str]:
    """About ``limit`` lines worth reading: from just before the first compiler error, else the tail."""
    for i, line in enumerate(output):
        if _ERROR_LINE.search(line) and not line.lstrip().startswith("FAILED: "):
            start = max(0, i - 3)
            # Include the "In file included from" chain above the error in full.
            while start > 0 and _INCLUDED_FROM.match(output[start - 1]):
                start -= 1
            return list(output[start : start + limit])
    return list(output[-limit:])


def describe_failure(
    lines: Sequence[str],
    kind: EngineKind,
    sources_by_op: Mapping[str, Sequence[str]],
    tag: str,
    engine_error: str | None = None,
) -> BuildFailedError:
    """Turn a failed build's log into one message naming the op (if known) and a hint."""
    title, output = failing_step_output(lines, kind)
    op = find_failed_op(output, sources_by_op)
    excerpt = compiler_excerpt(output)
    joined = "\n".join([*lines[-40:], engine_error or ""])
    if op is not None:
        message = f"building {tag} failed: op {op} did not compile"
    elif _BASE_MISSING.search(joined):
        return BuildFailedError(
            f"building {tag} failed: a base image is not available locally and could not be pulled",
            hint=(
                "no registry may be reachable from here: build local stand-ins with "
                "scripts/standin-images.sh and pass --base-devel/--base-runtime\n" + "\n".join(lines[-5:])
            ),
        )
    elif title:
        message = f"building {tag} failed at step {title}"
    else:
        message = f"building {tag} failed" + (f": {engine_error}" if engine_error else "")
    hint = "last lines of the build output:\n" + "\n".join(excerpt) if excerpt else None
    return BuildFailedError(message, hint=hint)


def op_sources() -> dict[str, tuple[str, ...]]:
    """Sources of every known op, relative to kernels/csrc (imported late: op_builder probes nothing)."""
    from op_builder import ALL_OPS, get_builder

    return {name: tuple(get_builder(name).sources) for name in ALL_OPS}


# --------------------------------------------------------------------------- build log display


def _plain_output(env: Mapping[str, str] = os.environ) -> bool:
    return not sys.stderr.isatty() or env.get("CI", "").strip().lower() in {"1", "true", "yes"}


class _LogView:
    """Show the build as it runs: every line in CI, a compact per-step view on a TTY."""

    def __init__(self, kind: EngineKind, plain: bool) -> None:
        self.kind = kind
        self.plain = plain
        self.lines: list[str] = []
        self._step_started = time.monotonic()
        self._step_title: str | None = None
        self._status: Any = None
        if not plain:
            from rich.console import Console

            self._console = Console(file=sys.stderr, highlight=False)
            self._status = self._console.status("starting the build")
            self._status.start()

    def feed(self, raw: str) -> None:
        # The classic builder wraps a step's stderr in colour codes.
        for line in _ANSI.sub("", raw).splitlines():
            self.lines.append(line)
            self._show(line)

    def _show(self, line: str) -> None:
        if self.kind == "classic":
            self._classic_timing(line)
        if self.plain:
            print(line, file=sys.stderr, flush=True)
            return
        from rich.markup import escape

        if _BK_DIGEST.match(line):
            return  # BuildKit's step digests say nothing to a person
        if self.kind == "classic":
            if _CLASSIC_STEP.match(line):
                self._console.print(f"[bold]{escape(line)}[/bold]", no_wrap=True, overflow="ellipsis")
        elif _BK_HEADER.match(line) or _BK_STATE.match(line):
            self._console.print(escape(line), no_wrap=True, overflow="ellipsis")
        text = _strip_buildkit(line).strip()
        if text:
            self._status.update(escape(text[: self._console.width - 4]))

    def _classic_timing(self, line: str) -> None:
        # The classic builder prints no timings; add one per step so slow steps show.
        m = _CLASSIC_STEP.match(line)
        if not m:
            return
        now = time.monotonic()
        if self._step_title is not None:
            self._say(f"    ({now - self._step_started:.1f}s)")
        self._step_title, self._step_started = m.group(1), now

    def _say(self, text: str) -> None:
        if self.plain:
            print(text, file=sys.stderr, flush=True)
        else:
            from rich.markup import escape

            self._console.print(f"[dim]{escape(text)}[/dim]")

    def close(self) -> None:
        if self.kind == "classic" and self._step_title is not None:
            self._say(f"    ({time.monotonic() - self._step_started:.1f}s)")
            self._step_title = None
        if self._status is not None:
            self._status.stop()
            self._status = None


# --------------------------------------------------------------------------- build


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
    # Always plain: the log is parsed to name a failed op, and _LogView draws the TTY view.
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
    view = _LogView(engine.kind, _plain_output())
    try:
        rc = _stream_process(cli_build_argv(engine, req), env, view)
    finally:
        view.close()
    if rc != 0:
        raise describe_failure(
            view.lines, engine.kind, op_sources(), req.tag, engine_error=f"docker exited {rc}"
        )
    try:
        return req.iidfile.read_text().strip(), view.lines
    except OSError:
        return _image_id(req.tag), view.lines


def _stream_process(argv: Sequence[str], env: Mapping[str, str], view: _LogView) -> int:
    """Run ``argv``, feeding its merged output to ``view``; on Ctrl-C cancel it, then re-raise.

    The child gets its own session so a terminal's Ctrl-C reaches only us: we then send it
    SIGINT ourselves (the docker CLI cancels the build, and BuildKit stops its step
    containers), wait a little, and kill it if it lingers.
    """
    try:
        proc = subprocess.Popen(
            list(argv),
            env=dict(env),
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
    except OSError as exc:
        raise EngineUnavailableError(f"cannot run {argv[0]}: {exc}", hint=ENSURE_DOCKER_HINT) from exc
    assert proc.stdout is not None
    try:
        for raw in _lines(proc.stdout):
            view.feed(raw)
        return proc.wait()
    except BaseException:
        _cancel(proc)
        raise


def _lines(stream: IO[bytes]) -> Iterator[str]:
    for raw in iter(stream.readline, b""):
        yield raw.decode("utf-8", "replace").rstrip("\n")


def _cancel(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is not None:
        return
    with contextlib.suppress(ProcessLookupError):
        proc.send_signal(signal.SIGINT)
    try:
        proc.wait(timeout=CANCEL_GRACE_S)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


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

    client = _sdk_client(os.environ, timeout=None)
    view = _LogView("classic", _plain_output())
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
    return image_id or _image_id(req.tag), view.lines


# --------------------------------------------------------------------------- images


def _sdk_client(env: Mapping[str, str], timeout: float | None = 120) -> docker.DockerClient:
    try:
        import docker
    except ImportError as exc:  # the CLI extra brings it
        raise EngineUnavailableError(
            "the docker Python package is missing", hint="pip install 'imagegen[cli]'"
        ) from exc
    try:
        # timeout=None: a classic build can be silent for minutes while a kernel compiles.
        return docker.from_env(environment=dict(env), timeout=timeout)
    except docker.errors.DockerException as exc:
        raise EngineUnavailableError(
            f"no Docker daemon answers: {_first_line(str(exc))}", hint=ENSURE_DOCKER_HINT
        ) from exc


def _first_line(text: str) -> str:
    return text.strip().splitlines()[0] if text.strip() else text


def _image_id(tag: str) -> str:
    client = _sdk_client(os.environ)
    try:
        return str(client.api.inspect_image(tag)["Id"])
    finally:
        client.close()


def image_size(engine: Engine, tag: str) -> int:
    """Size in bytes of image ``tag`` (all layers, as ``docker images`` shows it)."""
    import docker

    client = _sdk_client(os.environ)
    try:
        return int(client.api.inspect_image(tag)["Size"])
    except docker.errors.ImageNotFound as exc:
        raise BadInputError(f"no image {tag} here") from exc
    finally:
        client.close()


def remove_image(engine: Engine, tag: str, force: bool = False) -> None:
    """Remove image ``tag``; an image that is already gone is fine."""
    import docker

    client = _sdk_client(os.environ)
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
    view = _LogView("buildkit", plain=True)
    try:
        rc = _stream_process([client, "push", tag], os.environ, view)
    finally:
        view.close()
    if rc != 0:
        raise BuildFailedError(f"pushing {tag} failed", hint=_push_hint(view.lines))


def _push_sdk(tag: str) -> None:
    client = _sdk_client(os.environ, timeout=None)
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
