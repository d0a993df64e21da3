"""The reports of the runs, defined once: what became of one image (``ImageReport``) and what one
run made (``RunReport``), whose ``to_json()`` is every ``--json`` of ``imagegen build`` (one
platform or several) and ``imagegen bake``.

Every run's document has the same keys (``ok``, ``images``, ``index``, ``builder``, ``driver``),
and every entry of ``images`` the same keys with the same meaning, whichever command printed it,
so that one reader serves all three. Each command also keeps the keys it printed before the
shapes were joined, at the same place with the same meaning: ``imagegen build``'s flat image
object at the top level, ``platforms`` for several platforms. Where such an old key means
something else than the entry's key of the same name (``target``, ``pushed``), the entry takes
bake's meaning (bake's ``images`` came first), and the old key stays as it was
(docs/imagegen.md, "One shape for every `--json` of a run").
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from imagegen.engine import EngineKind
from imagegen.engine.build_log import compile_seconds, op_sources
from imagegen.imagespec import compile_cache
from imagegen.imagespec.compile_cache import CacheStats
from imagegen.imagespec.spec import ImageSpec
from imagegen.oci.publish import Published
from imagegen.proof.seal import ProofReport
from imagegen.proof.size import SizeReport, format_bytes
from imagegen.registry.manifest import Descriptor
from imagegen.render.matrix import MatrixEntry
from imagegen.runs.finish import Finished
from imagegen.verify.container import VerifyResult


@dataclass(frozen=True)
class StepTiming:
    name: str  # "engine", "build", "size", "verify", "push"
    seconds: float

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "seconds": round(self.seconds, 1)}


@dataclass(frozen=True)
class ImageReport:
    """What became of one image that was built: verified, pushed, or why not. ``ok`` is False
    only when an op did not verify, or the image is larger than ``max_size_bytes`` (it was then
    not pushed); a run reports an image that stopped short of this report in its ``RunImage``.
    ``imagegen.runs.pipeline.build`` returns one."""

    ok: bool
    tag: str
    target: str  # the image's target in the catalog ("cpu", "cuda12.1"), not the Dockerfile stage
    platform: str  # "linux/amd64"
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
        """The image's own object: ``imagegen build --json``'s top level for one platform, each
        entry of ``platforms`` for several, and ``build.json`` beside the image's proof."""
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
            "build_seconds": _round(self.build_seconds),
            "verify_seconds": _round(self.verify_seconds),
            "verify": None if self.verify is None else self.verify.to_json(),
            "pushed": self.pushed,
            "proof": None if self.proof is None else self.proof.to_json(),
            "image_id": self.image_id,
            "stage": self.stage,
            "steps": [step.to_json() for step in self.steps],
            "compile_seconds": _compile_json(self.compile_seconds),
            "compile_cache": None if self.compile_cache is None else self.compile_cache.to_json(),
            "size": None if self.size is None else self.size.to_json(),
            "max_size_bytes": self.max_size_bytes,
            "published": None if self.published is None else self.published.to_json(),
            "platform": self.platform,
        }


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
) -> ImageReport:
    """The one report of one image, however it was built (``build``, several platforms, bake):
    its build (the engine's log and time) and what the finish sequence made of it (``done``;
    None for a stage short of the runtime image)."""
    return ImageReport(
        ok=True if done is None else done.ok,
        tag=spec.tag,
        target=spec.target,
        platform=spec.platform,
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


# The keys of an entry of ``images`` taken from the image's report as they are (null when it
# stopped before one), after bake's own keys and ``catalog_target``.
_FROM_THE_REPORT = (
    "ops", "archs", "torch", "python", "engine", "proof", "image_id", "stage", "steps",
    "size", "max_size_bytes", "published",
)  # fmt: skip


@dataclass(frozen=True)
class RunImage:
    """One image of a run: what it was for (its name in the matrix, its platform, its tag) and
    what became of it: its ``report`` once it was built and finished, or, without one, where it
    stopped (``stopped``: its build failed, or sealing, verifying or pushing it could not run)."""

    target: str  # the image's name in the matrix, as bake names its targets ("cuda13-0-arm64")
    platform: str
    tag: str
    report: ImageReport | None
    stopped: str | None = None  # why there is no report
    seconds: float | None = None  # how long a build that left no report ran

    @classmethod
    def of(cls, spec: ImageSpec, report: ImageReport) -> RunImage:
        """An image ``imagegen build`` made from ``spec``, named as bake would name it."""
        return cls(MatrixEntry(spec).bake_target, spec.platform, report.tag, report)

    @property
    def ok(self) -> bool:
        return self.report is not None and self.report.ok

    @property
    def pushed(self) -> str | None:
        """The reference pushed (None: not pushed)."""
        published = None if self.report is None else self.report.published
        return None if published is None else published.reference

    @property
    def result(self) -> str:
        """One word for the table: pushed, verified, over budget, verify failed, build failed."""
        report = self.report
        if report is None:
            # Also when the finish sequence raised after the build: bake's table has always
            # called both "build failed", with the error beside it.
            return "build failed" if self.seconds is not None else "failed"
        if report.ok:
            return "pushed" if self.pushed else "verified"
        return "over budget" if report.over_budget else "verify failed"

    @property
    def error(self) -> str | None:
        report = self.report
        if report is None:
            return self.stopped
        if report.verify is not None and not report.verify.ok:
            return report.verify.failure_summary()
        if report.over_budget:
            over = report.size_bytes - (report.max_size_bytes or 0)
            return f"{format_bytes(report.size_bytes)}, {format_bytes(over)} over --max-size"
        return None

    @property
    def size_bytes(self) -> int | None:
        return None if self.report is None else self.report.size_bytes

    @property
    def build_seconds(self) -> float | None:
        return self.seconds if self.report is None else self.report.build_seconds

    @property
    def verify_seconds(self) -> float | None:
        return None if self.report is None else self.report.verify_seconds

    @property
    def verify(self) -> VerifyResult | None:
        return None if self.report is None else self.report.verify

    def to_json(self) -> dict[str, Any]:
        """An entry of ``images``: bake's keys first, as bake has printed them, then the rest of
        the image's report (null, or {} for ``compile_seconds``, when it stopped before one)."""
        report = self.report
        image = {} if report is None else report.to_json()
        return {
            "target": self.target,
            "platform": self.platform,
            "tag": self.tag,
            "ok": self.ok,
            "result": self.result,
            "size_bytes": self.size_bytes,
            "build_seconds": _round(self.build_seconds),
            "verify_seconds": _round(self.verify_seconds),
            "pushed": self.pushed,
            "error": self.error,
            "compile_seconds": image.get("compile_seconds", {}),
            "compile_cache": image.get("compile_cache"),
            "verify": image.get("verify"),
            "catalog_target": None if report is None else report.target,
            **{key: image.get(key) for key in _FROM_THE_REPORT},
        }


RunKind = Literal["build", "platforms", "bake"]


@dataclass(frozen=True)
class RunReport:
    """What one run made: its images, and what only some runs have: the index pushed over
    several platforms (under ``tag``), bake's builder and its driver. ``kind`` says which
    command's own keys ``to_json`` keeps beside the shared ones."""

    kind: RunKind
    images: tuple[RunImage, ...]
    tag: str | None = None  # several platforms: the tag of their index (None: their own tags only)
    index: Descriptor | None = None  # several platforms: the index pushed under ``tag``
    builder: str | None = None  # bake: the buildx builder (None: the current one)
    driver: str | None = None  # bake: that builder's driver

    @classmethod
    def one_image(cls, spec: ImageSpec, report: ImageReport) -> RunReport:
        return cls("build", (RunImage.of(spec, report),))

    @property
    def ok(self) -> bool:
        return bool(self.images) and all(image.ok for image in self.images)

    @property
    def reports(self) -> tuple[ImageReport, ...]:
        """The images' reports (a build's images all have one: it raises where bake reports)."""
        return tuple(image.report for image in self.images if image.report is not None)

    def to_json(self) -> dict[str, Any]:
        shared = {
            "ok": self.ok,
            "images": [image.to_json() for image in self.images],
            "index": None if self.index is None else _descriptor(self.index),
            "builder": self.builder,
            "driver": self.driver,
        }
        if self.kind == "build":
            (report,) = self.reports
            return {**report.to_json(), **shared}  # the image's keys, as one platform printed them
        if self.kind == "platforms":
            pushed = self.index is not None  # the index: each platform's entry says its own push
            platforms = [{"platform": i.platform, **i.report.to_json()} for i in self.images if i.report]
            return {"ok": self.ok, "tag": self.tag, "pushed": pushed, **shared, "platforms": platforms}
        return shared


def _descriptor(descriptor: Descriptor) -> dict[str, Any]:
    return {"digest": descriptor.digest, "media_type": descriptor.media_type, "size": descriptor.size}


def _round(seconds: float | None) -> float | None:
    return None if seconds is None else round(seconds, 1)


def _compile_json(seconds: Mapping[str, float]) -> dict[str, float]:
    return {op: round(s, 1) for op, s in seconds.items()}
