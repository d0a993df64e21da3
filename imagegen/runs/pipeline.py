"""One image build as a library call: engine -> render -> stage -> build, then the one finish
sequence (``imagegen.runs.finish``: seal -> size -> verify -> push).

``build(spec)`` returns a frozen ``imagegen.runs.report.ImageReport``;
``imagegen build`` prints it (``--json``: in the run's report, ``imagegen.runs.report.RunReport``),
and the benchmarks and integration tests call the same function instead of assembling the steps
themselves.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace

from imagegen import log
from imagegen.building.bases import missing_base_hint
from imagegen.building.build_inputs import check_sources, source_root
from imagegen.building.build_secrets import build_secrets
from imagegen.building.staging import staged_context
from imagegen.engine import Engine, build_image, detect_engine, image_size
from imagegen.errors import BuildFailedError
from imagegen.imagespec.spec import ImageSpec
from imagegen.proof.seal import context_digests
from imagegen.proof.seal import now as proof_now
from imagegen.render import cross
from imagegen.render.dockerfile import render
from imagegen.runs.finish import Built, finish
from imagegen.runs.report import ImageReport, StepTiming, image_report
from imagegen.runs.run_choices import LOCAL, RunOptions
from imagegen.runs.torch_headers import pinned_headers

# The name benchmarks and tests have always called the image's report by.


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


def build(spec: ImageSpec, run: RunOptions = LOCAL, engine: Engine | None = None) -> ImageReport:
    """Build ``spec``'s image up to ``run.stage`` from the checkout at ``run.source`` (default: the
    one imagegen runs from), verify it, and push it as ``run.push`` says when every op verified.

    ``engine``: one already detected (benchmarks building several images); default: detect
    it here, and fall back to the classic variant of the Dockerfile when BuildKit is wanted
    but missing. ``run.no_cache`` re-runs every build step. The runtime stage is measured by part
    (``imagegen.proof.size``); with ``run.max_size`` (bytes), a larger image is not ``ok`` and not
    pushed. A stage short of the runtime is built and measured only: no proof, verification or push.
    Raises BadInputError, EngineUnavailableError, BuildFailedError (with how to get the base
    images when they are not here), VerificationFailedError (when the verifier cannot run).
    """
    root = run.source or source_root()
    check_sources(root)  # bad input before any engine work
    steps = _Steps()
    if engine is None:
        with steps.step("engine", "detect the container engine"):
            engine = detect_engine(run.env, prefer_buildkit=spec.buildkit)
            log.info(f"{engine.kind} builder, server {engine.server_version}")
    if spec.buildkit and engine.kind == "classic":
        log.warn("BuildKit is not available here: building the classic variant (no cache mounts)")
        spec = replace(spec, buildkit=False)
    text = render(spec)
    started = proof_now()

    secrets = build_secrets(spec, run.env)  # credentials as BuildKit secrets
    headers = pinned_headers(spec)
    staged = staged_context(spec, root, headers)
    with steps.step("build", f"build {spec.tag}"), staged as context, secrets as found:
        try:
            result = build_image(
                engine,
                context,
                text,
                spec.tag,
                target=run.stage,
                build_args=_build_args(spec, run.verify),
                no_cache=run.no_cache,
                platform=spec.platform,
                secrets=found,
                network=_network(spec),
            )
        except BuildFailedError as exc:
            raise _with_base_hint(exc, spec) from None
        sources = context_digests(context) if run.stage == "runtime" else {}
    done = None
    if run.stage == "runtime":
        built = Built(spec, result.image_id, text, root, sources, started, proof_now())
        done = finish(engine, built, run, step=steps.step)
    # A stage short of the image (benchmarks) is built and measured only: nothing to prove or push.
    size = done.size_bytes if done is not None else image_size(engine, spec.tag)
    return image_report(
        spec, engine.kind, result.image_id, result.seconds, result.log, done,
        size_bytes=size, stage=run.stage, steps=tuple(steps.timings), max_size=run.max_size,
    )  # fmt: skip


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
