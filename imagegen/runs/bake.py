"""Targets of the matrix through ``docker buildx bake``, then verified, then pushed if they pass.

``bake(targets)`` stages each target's build context (``imagegen.building.staging``), renders its
Dockerfile and one bake file naming them all (``imagegen.render.matrix.bake_file``: the bases
as build arguments, credentials of the compile cache as BuildKit secrets), and runs one
``docker buildx bake --load TARGET`` per target, all at once, on the chosen builder: BuildKit
schedules them and shares the steps they have in common, while a target that fails stops
only itself (one bake of several targets cancels the others at the first failure). An image that
shares its stable op modules with another starts once that one has compiled them
(``imagegen.runs.bake_order``). Every
image built is then verified in the sealed container (``imagegen.verify.container``) and, with a
registry, pushed through ``imagegen.oci.publish`` only when it passed.

The docker CLI that runs bake is the one the engine probe found with buildx
(``imagegen.engine.detect``); ``scripts/buildx-plugin.sh`` installs the plugin where none has it.
"""

from __future__ import annotations

import contextlib
import datetime
import re
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TextIO

from imagegen import log
from imagegen.building.build_inputs import check_sources, source_root
from imagegen.building.build_secrets import build_secrets
from imagegen.building.staging import staged_context
from imagegen.engine import Engine, detect_engine
from imagegen.engine.build_log import describe_failure, op_sources
from imagegen.engine.images import inspect_image_id, local_images
from imagegen.engine.process import cancel_sessions
from imagegen.errors import BadInputError, EngineUnavailableError, UserFacingError
from imagegen.files import write_atomic
from imagegen.imagespec.compile_cache import STATS_MARKER
from imagegen.proof.seal import context_digests
from imagegen.proof.seal import now as proof_now
from imagegen.render.dockerfile import render
from imagegen.render.matrix import BakeTarget, bake_file, base_args
from imagegen.runs.bake_inputs import BakeRequest, check_bake_file, missing_standins
from imagegen.runs.bake_order import leaders
from imagegen.runs.finish import Built, finish
from imagegen.runs.report import RunImage, RunReport, image_report
from imagegen.runs.run_choices import LOCAL, RunOptions
from imagegen.runs.torch_headers import pinned_headers

BUILDX_HINT = "install Debian's buildx plugin: `bash scripts/buildx-plugin.sh` (make system-deps does it)"


# --------------------------------------------------------------------------- the builder


def buildx_client(engine: Engine) -> str:
    """The docker CLI with buildx; EngineUnavailableError (exit 3) when the engine has none."""
    if engine.kind != "buildx" or engine.client is None:
        raise EngineUnavailableError(
            f"`imagegen bake` needs docker buildx; this engine builds with {engine.kind}",
            hint=BUILDX_HINT,
        )
    return engine.client


def parse_driver(inspect_output: str) -> str | None:
    """The driver ``docker buildx inspect`` names (its first ``Driver:`` line)."""
    for line in inspect_output.splitlines():
        key, _, value = line.partition(":")
        if key.strip() == "Driver" and value.strip():
            return value.strip()
    return None


def inspect_builder(client: str, builder: str | None, env: Mapping[str, str]) -> str:
    """The driver of ``builder`` (default: the current one); BadInputError when there is no such
    builder."""
    argv = [client, "buildx", "inspect", *([builder] if builder else [])]
    try:
        done = subprocess.run(argv, env=dict(env), capture_output=True, text=True, timeout=60, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise EngineUnavailableError(
            f"`docker buildx inspect` did not answer: {exc}", hint=BUILDX_HINT
        ) from exc
    if done.returncode != 0:
        why = (done.stderr.strip().splitlines() or ["no such builder"])[-1]
        raise BadInputError(
            f"no buildx builder {builder!r} here: {why}",
            hint="`docker buildx ls` lists them; `docker buildx create --name NAME --driver "
            "docker-container|remote|kubernetes ...` makes one (docs/imagegen.md, `imagegen bake`)",
        )
    return parse_driver(done.stdout) or "unknown"


def bake_supports_network(client: str, env: Mapping[str, str]) -> bool:
    """Whether this buildx's bake can give a target the host's network: 0.13 (Debian trixie's)
    accepts ``network`` in a bake file and ignores it, and refuses it in ``--set``."""
    with tempfile.TemporaryDirectory(prefix="imagegen-bake-probe-") as tmp:
        path = Path(tmp) / "docker-bake.hcl"
        path.write_text('target "probe" {\n  context = "."\n}\n')
        argv = [client, "buildx", "bake", "-f", str(path), "--print", "--set", "probe.network=host", "probe"]
        try:
            done = subprocess.run(argv, env=dict(env), cwd=tmp, capture_output=True, timeout=60, check=False)
        except (OSError, subprocess.TimeoutExpired):
            return False
    return done.returncode == 0


def check_host_network(requests: Sequence[BakeRequest], supported: Callable[[], bool]) -> None:
    """BadInputError when a target's compile cache is on the host's loopback and bake cannot
    give the build the host's network (the cache would be out of its reach). ``supported`` is
    asked only when some target needs the host's network (it may run a probe)."""
    for request in requests:
        cache = request.spec.compile_cache
        if cache is not None and cache.host_network and not supported():
            raise BadInputError(
                f"--compile-cache {cache.url} is on this machine's loopback, which a bake's build "
                "cannot reach: this buildx's bake has no host network for a target",
                hint="serve the cache on an address the builder reaches (a Redis bound to the docker "
                "bridge's gateway too, e.g. redis-server --bind 127.0.0.1 172.17.0.1, then "
                "--compile-cache redis://172.17.0.1:6379), or build with `imagegen build`, which can",
            )


# --------------------------------------------------------------------------- running bake


# The compile step's count, as BuildKit prints a step's output ("#19 87.81 imagegen: compile cache
# stats {...}"), not the step's header, whose command holds the same words.
_COMPILED = re.compile(r"#\d+ [\d.]+ " + re.escape(STATS_MARKER))


@dataclass
class _Run:
    """One target's ``docker buildx bake`` process and what it printed. ``compiled``: set once its
    compile step is over (the compile cache's count printed) or the process ended."""

    name: str
    proc: subprocess.Popen[bytes]
    started: float
    lines: list[str] = field(default_factory=list)
    seconds: float = 0.0
    returncode: int | None = None
    compiled: threading.Event = field(default_factory=threading.Event)


def bake_argv(client: str, bake_path: Path, target: str, builder: str | None) -> list[str]:
    argv = [client, "buildx", "bake", "-f", str(bake_path), "--progress=plain", "--load"]
    if builder:
        argv += ["--builder", builder]
    return [*argv, target]


def _pump(run: _Run, out: TextIO, lock: threading.Lock) -> None:
    assert run.proc.stdout is not None
    for raw in iter(run.proc.stdout.readline, b""):
        line = raw.decode("utf-8", "replace").rstrip("\n")
        run.lines.append(line)
        if _COMPILED.match(line):
            run.compiled.set()
        with lock:
            print(f"[{run.name}] {line}", file=out, flush=True)
    run.returncode = run.proc.wait()
    run.seconds = time.monotonic() - run.started
    run.compiled.set()


def _start(name: str, argv: Sequence[str], env: Mapping[str, str]) -> _Run:
    try:
        proc = subprocess.Popen(
            list(argv),
            env={**env, "DOCKER_BUILDKIT": "1"},
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,  # a terminal's Ctrl-C reaches us only; we cancel
        )
    except OSError as exc:
        raise EngineUnavailableError(f"cannot run {argv[0]}: {exc}", hint=BUILDX_HINT) from exc
    return _Run(name, proc, time.monotonic())


def _compiled(runs: Mapping[str, _Run], name: str | None) -> bool:
    """Whether the target ``name`` (None: no target) has compiled or ended."""
    return name is None or (name in runs and runs[name].compiled.is_set())


def run_bakes(
    argvs: Mapping[str, Sequence[str]], env: Mapping[str, str], waiting: Mapping[str, str] | None = None
) -> dict[str, _Run]:
    """Run the targets' bakes, their lines on stderr prefixed with the target: at once, but a
    target of ``waiting`` ({target: the one it waits for}, ``bake_order.leaders``) once that one
    has compiled (the compiles are then the compile cache's) or ended. On Ctrl-C or SIGTERM
    every one is cancelled (SIGINT, then killed after a grace) before it propagates."""
    waiting = dict(waiting or {})
    runs: dict[str, _Run] = {}
    lock = threading.Lock()
    threads: list[threading.Thread] = []
    try:
        while len(runs) < len(argvs):
            for name, argv in argvs.items():
                first = waiting.get(name)
                if name in runs or not _compiled(runs, first):
                    continue
                if first is not None:
                    log.info(f"{first} has compiled: starting {name}")
                runs[name] = _start(name, argv, env)
                thread = threading.Thread(target=_pump, args=(runs[name], sys.stderr, lock), daemon=True)
                thread.start()
                threads.append(thread)
            time.sleep(0.5 if len(runs) < len(argvs) else 0)  # short waits: a signal is handled between them
        for thread in threads:
            while thread.is_alive():
                thread.join(timeout=0.5)
    except BaseException:
        cancel_sessions([run.proc for run in runs.values()])
        raise
    return runs


# --------------------------------------------------------------------------- the whole run


@contextlib.contextmanager
def _staged(
    requests: Sequence[BakeRequest], root: Path, env: Mapping[str, str], digests: dict[str, Mapping[str, str]]
) -> Iterator[list[BakeTarget]]:
    """Every target's context staged, Dockerfile written and secrets ready, for the bake's length;
    ``digests`` gets each target's context digests (its provenance names them)."""
    with contextlib.ExitStack() as stack, tempfile.TemporaryDirectory(prefix="imagegen-bake-") as tmp:
        targets = []
        for request in requests:
            spec = request.spec
            context = stack.enter_context(staged_context(spec, root, pinned_headers(spec)))
            digests[request.name] = context_digests(context)
            # Outside the context, as `imagegen build` keeps it: never COPYed, no cache churn.
            dockerfile = Path(tmp) / request.name / "Dockerfile"
            dockerfile.parent.mkdir(parents=True)
            dockerfile.write_text(render(spec))
            secrets = stack.enter_context(build_secrets(spec, env))
            cache = spec.compile_cache
            targets.append(
                BakeTarget(
                    name=request.name,
                    dockerfile=str(dockerfile),
                    tag=spec.tag,
                    platform=spec.platform,
                    args=base_args(spec),
                    context=str(context),
                    secrets=tuple((sid, str(path)) for sid, path in sorted(secrets.items())),
                    network="host" if cache is not None and cache.host_network else None,
                )
            )
        yield targets


def bake(
    requests: Sequence[BakeRequest],
    run: RunOptions = LOCAL,
    builder: str | None = None,
    bake_file_out: Path | None = None,
) -> RunReport:
    """Build ``requests`` with ``docker buildx bake`` on ``builder``, verify each image built, and
    push those that passed as ``run.push`` says (``PushPlan.for_bake``: each under a registry). A
    failed target is reported, not raised.

    Raises BadInputError, before anything builds (nothing to bake, an image whose reference under
    the push's registry is not one Docker takes, a ``bake_file_out`` that cannot be written, no
    such builder, stand-in bases missing here, a compile cache on the loopback that this bake
    cannot reach), EngineUnavailableError (no daemon, no buildx).
    """
    if not requests:
        raise BadInputError("nothing to bake", hint="name targets of the matrix, e.g. `imagegen bake cpu`")
    env = run.env
    run.push.check_references([r.spec.tag for r in requests])
    check_bake_file(bake_file_out)
    root = run.source or source_root()
    check_sources(root)
    engine = detect_engine(env)
    client = buildx_client(engine)
    driver = inspect_builder(client, builder, env)
    if driver == "docker":  # the builder reads this engine's images: the stand-ins must be here
        missing_standins({r.name: r.spec for r in requests}, lambda refs: local_images(refs, env))
    check_host_network(requests, lambda: bake_supports_network(client, env))
    log.info(
        f"bake on builder {builder or '(current)'}, driver {driver}: {', '.join(r.name for r in requests)}"
    )
    digests: dict[str, Mapping[str, str]] = {}
    started = proof_now()
    with _staged(requests, root, env, digests) as targets:
        bake_text = bake_file(targets, ("# Written by `imagegen bake` for one run.", ""))
        bake_path = Path(targets[0].dockerfile).parents[1] / "docker-bake.hcl"
        bake_path.write_text(bake_text)
        if bake_file_out is not None:
            write_atomic(bake_file_out, bake_text)
        argvs = {t.name: bake_argv(client, bake_path, t.name, builder) for t in targets}
        waiting = leaders(requests)
        for name, first in waiting.items():
            log.info(f"{name} starts once {first} has compiled the stable op modules they share")
        with log.step(f"bake {len(targets)} target(s)"):
            runs = run_bakes(argvs, env, waiting)
    made = _Made(root, digests, started, proof_now())
    images = [_finish(engine, request, runs[request.name], run, made) for request in requests]
    return RunReport("bake", tuple(images), builder=builder, driver=driver)


@dataclass(frozen=True)
class _Made:
    """What the provenance of a baked image names: the checkout, each context, the bake's times."""

    root: Path
    digests: Mapping[str, Mapping[str, str]]
    started: datetime.datetime
    finished: datetime.datetime


def _finish(engine: Engine, request: BakeRequest, baked: _Run, run: RunOptions, made: _Made) -> RunImage:
    """Seal, verify (and push) one target's image, or say why its build failed."""
    spec = request.spec

    def stopped(why: str) -> RunImage:
        return RunImage(request.name, spec.platform, spec.tag, None, stopped=why, seconds=baked.seconds)

    if baked.returncode != 0:
        failure = describe_failure(
            baked.lines,
            engine.kind,
            op_sources(spec.registry),
            spec.tag,
            engine_error=f"docker exited {baked.returncode}",
        )
        return stopped(failure.message)
    try:
        # The same sequence `imagegen build` runs: seal -> size -> verify -> push what passed.
        image_id = inspect_image_id(spec.tag)
        here = Built(
            spec, image_id, render(spec), made.root, made.digests[request.name], made.started, made.finished
        )
        done = finish(engine, here, run)
    except UserFacingError as exc:  # the verifier could not run, a push failed: this target only
        return stopped(exc.message)
    # The image's report, as `imagegen build` makes it; the table's row is read from it.
    report = image_report(
        spec, engine.kind, image_id, baked.seconds, baked.lines, done, size_bytes=done.size_bytes
    )
    return RunImage(request.name, spec.platform, spec.tag, report)
