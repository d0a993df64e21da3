"""One image build as a library call: engine -> render -> stage -> build, then the one finish
sequence (``imagegen.runs.finish``: seal -> size -> verify -> push).

``build(spec)`` returns a frozen ``BuildReport``; ``imagegen build`` prints it (its
``to_json()`` is the ``--json`` summary), and the benchmarks and integration tests call the
same function instead of assembling the steps themselves.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from imagegen import log
from imagegen.building.bases import missing_base_hint
from imagegen.building.build_inputs import check_sources, source_root
from imagegen.building.build_secrets import build_secrets
from imagegen.building.staging import staged_context
from imagegen.engine import Engine, EngineKind, build_image, detect_engine, image_size
from imagegen.engine.build_log import compile_seconds, op_sources
from imagegen.errors import BuildFailedError
from imagegen.imagespec import compile_cache
from imagegen.imagespec.compile_cache import CacheStats
from imagegen.imagespec.spec import ImageSpec
from imagegen.oci.publish import Published
from imagegen.oci.push_plan import NO_PUSH, PushPlan
from imagegen.proof.seal import ProofReport, Signer, context_digests
from imagegen.proof.seal import now as proof_now
from imagegen.proof.size import SizeReport
from imagegen.render import cross
from imagegen.render.dockerfile import render
from imagegen.runs.finish import Built, Finished, finish
from imagegen.verify.container import VerifyResult


@dataclass(frozen=True)
class StepTiming:
    name: str  # "engine", "build", "size", "verify", "push"
    seconds: float

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "seconds": round(self.seconds, 1)}


@dataclass(frozen=True)
class BuildReport:
    """What one build made. ``ok`` is False only when the image was built and an op did not
    verify, or it is larger than ``max_size_bytes`` (it was then not pushed); every other
    failure is raised instead."""

    ok: bool
    tag: str
    target: str  # the image's target ("cpu", "cuda12.1"), not the Dockerfile stage
    ops: tuple[str, ...]
    archs: tuple[str, ...]
    torch: str
    python: str
    engine: EngineKind
    stage: str  # the Dockerfile stage built ("runtime" unless asked otherwise)
    image_id: str
    size_bytes: int
    build_seconds: float
    verify: VerifyResult | None  # None: not verified
    pushed: bool
    steps: tuple[StepTiming, ...]
    # The SBOM and provenance sealed into the image (None for a stage other than the runtime).
    proof: ProofReport | None = field(default=None, compare=False)
    # Seconds each op took to compile in this build (from op_builder's lines in the build log);
    # empty when the build stage came from the cache.
    compile_seconds: Mapping[str, float] = field(default_factory=dict, compare=False)
    # The build's output lines (benchmarks read which steps ran and which were cached).
    log: tuple[str, ...] = field(default=(), repr=False, compare=False)
    # sccache's hits and misses in the compile step (--compile-cache); None without a compile
    # cache, or when the build stage came from the layer cache (nothing was compiled).
    compile_cache: CacheStats | None = field(default=None, compare=False)
    # The runtime image's bytes by part (None for another stage), and the budget it was held to.
    size: SizeReport | None = None
    max_size_bytes: int | None = None
    # What the registry holds for the pushed image: its manifest's digest and the proof's referrers.
    published: Published | None = field(default=None, compare=False)

    @property
    def over_budget(self) -> bool:
        return self.max_size_bytes is not None and self.size_bytes > self.max_size_bytes

    @property
    def verify_seconds(self) -> float | None:
        return None if self.verify is None else self.verify.seconds

    @property
    def failed_ops(self) -> tuple[str, ...]:
        return () if self.verify is None else tuple(op.name for op in self.verify.ops if not op.ok)

    def to_json(self) -> dict[str, Any]:
        """The ``imagegen build --json`` summary."""
        verify_seconds = self.verify_seconds
        return {
            "ok": self.ok,
            "tag": self.tag,
            "target": self.target,
            "ops": list(self.ops),
            "archs": list(self.archs),
            "torch": self.torch,
            "python": self.python,
            "engine": self.engine,
            "size_bytes": self.size_bytes,
            "build_seconds": round(self.build_seconds, 1),
            "verify_seconds": None if verify_seconds is None else round(verify_seconds, 1),
            "verify": None if self.verify is None else self.verify.to_json(),
            "pushed": self.pushed,
            "proof": None if self.proof is None else self.proof.to_json(),
            "image_id": self.image_id,
            "stage": self.stage,
            "steps": [step.to_json() for step in self.steps],
            "compile_seconds": {op: round(s, 1) for op, s in self.compile_seconds.items()},
            "compile_cache": None if self.compile_cache is None else self.compile_cache.to_json(),
            "size": None if self.size is None else self.size.to_json(),
            "max_size_bytes": self.max_size_bytes,
            "published": None if self.published is None else self.published.to_json(),
        }


class _Steps:
    """Step headers with timings on stderr (``imagegen.log.step``), kept for the report too."""

    def __init__(self) -> None:
        self.timings: list[StepTiming] = []

    @contextmanager
    def step(self, name: str, title: str) -> Iterator[None]:
        start = time.monotonic()
        with log.step(title):
            yield
        self.timings.append(StepTiming(name, time.monotonic() - start))


def _build_args(spec: ImageSpec, verify: bool) -> dict[str, str]:
    args = {"MAX_JOBS": str(spec.max_jobs)} if spec.max_jobs else {}
    if spec.cross and verify:
        # The sealed verification right after proves what the runtime stage's check would, which
        # would run the target's code under emulation a second time.
        args[cross.CHECK_OPS_ARG] = "0"
    return args


def build(
    spec: ImageSpec,
    *,
    verify: bool = True,
    source: Path | None = None,
    engine: Engine | None = None,
    stage: str = "runtime",
    no_cache: bool = False,
    env: Mapping[str, str] = os.environ,
    signer: Signer | None = None,
    proof_dir: Path | None = None,
    max_size: int | None = None,
    push: PushPlan = NO_PUSH,
) -> BuildReport:
    """Build ``spec``'s image up to ``stage`` from the checkout at ``source`` (default: the one
    imagegen runs from), verify it, and push it as ``push`` says when every op verified.

    ``engine``: one already detected (benchmarks building several images); default: detect
    it here, and fall back to the classic variant of the Dockerfile when BuildKit is wanted
    but missing. ``no_cache`` re-runs every build step. The runtime stage is measured by part
    (``imagegen.proof.size``); with ``max_size`` (bytes), a larger image is not ``ok`` and not pushed.
    A ``stage`` short of the runtime is built and measured only: no proof, verification or push.
    Raises BadInputError, EngineUnavailableError, BuildFailedError (with how to get the base
    images when they are not here), VerificationFailedError (when the verifier cannot run).
    """
    root = source or source_root()
    check_sources(root)  # bad input before any engine work
    steps = _Steps()
    if engine is None:
        with steps.step("engine", "detect the container engine"):
            engine = detect_engine(env, prefer_buildkit=spec.buildkit)
            log.info(f"{engine.kind} builder, server {engine.server_version}")
    if spec.buildkit and engine.kind == "classic":
        log.warn("BuildKit is not available here: building the classic variant (no cache mounts)")
        spec = replace(spec, buildkit=False)
    text = render(spec)
    started = proof_now()

    secrets = build_secrets(spec, env)  # credentials as BuildKit secrets
    with steps.step("build", f"build {spec.tag}"), staged_context(spec, root) as context, secrets as found:
        try:
            result = build_image(
                engine,
                context,
                text,
                spec.tag,
                target=stage,
                build_args=_build_args(spec, verify),
                no_cache=no_cache,
                platform=spec.platform,
                secrets=found,
                network=_network(spec),
            )
        except BuildFailedError as exc:
            raise _with_base_hint(exc, spec) from None
        sources = context_digests(context) if stage == "runtime" else {}
    done = None
    if stage == "runtime":
        built = Built(spec, result.image_id, text, root, sources, started, proof_now())
        done = finish(
            engine, built, verify=verify, push=push, signer=signer,
            proof_dir=proof_dir, max_size=max_size, step=steps.step,
        )  # fmt: skip
    # A stage short of the image (benchmarks) is built and measured only: nothing to prove or push.
    size = done.size_bytes if done is not None else image_size(engine, spec.tag)
    return image_report(
        spec, engine.kind, result.image_id, result.seconds, result.log, done,
        size_bytes=size, stage=stage, steps=tuple(steps.timings), max_size=max_size,
    )  # fmt: skip


def image_report(
    spec: ImageSpec,
    engine: EngineKind,
    image_id: str,
    build_seconds: float,
    build_log: Sequence[str],
    done: Finished | None,
    *,
    size_bytes: int,
    stage: str = "runtime",
    steps: tuple[StepTiming, ...] = (),
    max_size: int | None = None,
) -> BuildReport:
    """The one report of one image, however it was built (``build``, several platforms, bake):
    its build (the engine's log and time) and what the finish sequence made of it (``done``;
    None for a stage short of the runtime image)."""
    return BuildReport(
        ok=True if done is None else done.ok,
        tag=spec.tag,
        target=spec.target,
        ops=spec.ops,
        archs=spec.archs,
        torch=spec.torch_release,
        python=spec.python,
        engine=engine,
        stage=stage,
        image_id=image_id if done is None or done.proof is None else done.proof.image_id,
        size_bytes=size_bytes,
        build_seconds=build_seconds,
        verify=None if done is None else done.verify,
        pushed=done is not None and done.published is not None,
        steps=steps,
        proof=None if done is None else done.proof,
        compile_seconds=compile_seconds(build_log),
        log=tuple(build_log),
        compile_cache=compile_cache.stats_from_log(build_log, op_sources(spec.registry))
        if spec.compile_cache
        else None,
        size=None if done is None else done.size,
        max_size_bytes=max_size,
        published=None if done is None else done.published,
    )


def _network(spec: ImageSpec) -> str | None:
    """The host's network for a build whose compile cache is on the host's loopback."""
    return "host" if spec.compile_cache is not None and spec.compile_cache.host_network else None


def _with_base_hint(exc: BuildFailedError, spec: ImageSpec) -> BuildFailedError:
    """Add how to get the base images when they are missing here (a pull failure looks alike)."""
    extra = missing_base_hint(spec)
    if extra is None:
        return exc
    hint = extra if not exc.hint else f"{extra}\n{exc.hint}"
    return BuildFailedError(exc.message, hint=hint)
