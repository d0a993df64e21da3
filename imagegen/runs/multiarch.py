"""One image for several platforms: each built and verified, then pushed together under one tag.

``build_platforms(specs, tag=...)`` runs ``imagegen.runs.pipeline.build`` for each platform's spec (each
under its own local tag, ``TAG-amd64``, ``TAG-arm64``: Docker's image store holds one image per
tag), nothing pushed yet. Only when every platform built, verified and fit its budget are they
pushed, each by its own tag with its proof attached to its own manifest
(``imagegen.oci.publish.publish_image``), and then one OCI image index listing each platform's
manifest goes under ``tag`` (``imagegen.oci.publish.publish_index``). A platform that fails leaves
nothing pushed; a failure while pushing leaves the platforms' own tags but no index under ``tag``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from imagegen import log
from imagegen.engine import detect_engine
from imagegen.errors import BadInputError
from imagegen.imagespec.spec import ImageSpec
from imagegen.oci.publish import Published, publish_image, publish_index
from imagegen.oci.push_plan import NO_PUSH
from imagegen.registry.manifest import Descriptor
from imagegen.runs import pipeline
from imagegen.runs.report import ImageReport, RunImage, RunReport
from imagegen.runs.run_choices import LOCAL, RunOptions


def platform_tag(tag: str, platform: str) -> str:
    """``registry/name:1`` for linux/arm64 -> ``registry/name:1-arm64`` (``latest-arm64`` untagged)."""
    name, version = tag, "latest"
    if ":" in tag.rsplit("/", 1)[-1]:
        name, _, version = tag.rpartition(":")
    suffix = "-".join(platform.split("/")[1:])
    return f"{name}:{version}-{suffix}"


def build_platforms(specs: Sequence[ImageSpec], tag: str | None, run: RunOptions = LOCAL) -> RunReport:
    """Build and verify each spec (one per platform), then, as ``run.push`` says (an index: made by
    ``PushPlan.for_build``, which checked its rule), push them and their index under its tag,
    only when every platform passed. Each platform's build pushes nothing itself."""
    platforms = tuple(spec.platform for spec in specs)
    if len(set(platforms)) != len(platforms):
        raise BadInputError(f"a platform is named twice: {', '.join(platforms)}")
    engine = detect_engine(run.env, prefer_buildkit=all(s.buildkit for s in specs))
    each = replace(run, push=NO_PUSH)
    reports = []
    for spec in specs:
        local = replace(spec, tag=platform_tag(tag, spec.platform) if tag else spec.tag)
        with log.step(f"{spec.platform}: {local.tag}"):
            reports.append(pipeline.build(local, each, engine=engine))
    if run.push.kind != "index" or not all(r.ok for r in reports):
        return _run(specs, reports, tag, None)
    assert run.push.target is not None and tag == run.push.target  # PushPlan.for_build
    published: list[tuple[str, Published]] = []
    for platform, report in zip(platforms, reports):
        with log.step(f"push {report.tag}"):
            documents = None if report.proof is None else report.proof.documents
            done = publish_image(engine, report.tag, report.verify, documents, run.signer)
        assert done is not None  # verified: every report is ok
        published.append((platform, done))
    with log.step(f"push the index {tag}"):
        index = publish_index(tag, published, run.signer)
    reports = [replace(r, pushed=True, published=p) for r, (_, p) in zip(reports, published)]
    return _run(specs, reports, tag, index)


def _run(
    specs: Sequence[ImageSpec], reports: Sequence[ImageReport], tag: str | None, index: Descriptor | None
) -> RunReport:
    images = tuple(RunImage.of(spec, report) for spec, report in zip(specs, reports))
    return RunReport("platforms", images, tag=tag, index=index)
