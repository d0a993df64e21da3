"""``imagegen build``: options -> spec -> ``imagegen.runs.pipeline.build`` -> the report, printed."""

from __future__ import annotations

import json as json_module
from collections.abc import Mapping, Sequence
from dataclasses import replace

from imagegen.commands._options import JsonOption, by_platform, table_options
from imagegen.commands._output import console, emit_json
from imagegen.commands._spec import make_spec
from imagegen.errors import VerificationFailedError
from imagegen.files import write_atomic
from imagegen.imagespec.checks import platform_list
from imagegen.imagespec.spec import ImageSpec, SpecInput
from imagegen.oci.push_plan import PushPlan
from imagegen.proof.size import check_budget
from imagegen.runs import multiarch, pipeline
from imagegen.runs.bake_inputs import check_platform_options
from imagegen.runs.report import ImageReport, RunReport
from imagegen.runs.run_choices import LOCAL, RunOptions
from imagegen.verify.table import render_table


@table_options("build")
def build(
    image: SpecInput,
    platform_torch: tuple[str, ...] = (),
    platform_wheelhouse: tuple[str, ...] = (),
    no_verify: bool = False,
    push: bool = False,
    run: RunOptions = LOCAL,  # --source, --sign-key, --max-size (their rows, packed)
    json: JsonOption = False,
) -> None:
    """Build the image of the selected ops, verify every op loads ahead of time, print a summary.

    --platform A,B: one image per platform, each verified; with --push, pushed together under
    --tag as one image index only when every platform passed."""
    platforms = platform_list(image.platform)  # image: flag > IMAGEGEN_* > default, resolved once
    torch_for = by_platform("--platform-torch", platform_torch, "linux/arm64=2.10.0")
    wheels_for = by_platform("--platform-wheelhouse", platform_wheelhouse, "linux/arm64=DIR")
    several = len(platforms) > 1
    check_platform_options(
        {"--platform-torch": torch_for, "--platform-wheelhouse": wheels_for}, set(platforms), "build"
    )
    # The push rule, before any spec's work: where this run pushes, if anywhere.
    plan = PushPlan.for_build(push=push, verify=not no_verify, tag=image.tag, platforms=len(platforms))
    specs = [
        make_spec(
            image.replace(
                platform=p,
                torch=torch_for.get(p, image.torch),
                wheelhouse=wheels_for.get(p, image.wheelhouse),
                # A cross build's own torch is the build platform's: --wheelhouse holds it when
                # --platform-wheelhouse gave the target another.
                build_wheelhouse=image.build_wheelhouse or image.wheelhouse,
            )
        )
        for p in platforms
    ]
    run = replace(run, push=plan)
    if several:
        _build_platforms(specs, image.tag, run, json)
        return
    report = pipeline.build(specs[0], run)
    if json:
        emit_json(RunReport.one_image(specs[0], report).to_json())
    else:
        _print(report)
    _keep_report(report)
    _check_report(report, run.max_size, json)


def _build_platforms(specs: Sequence[ImageSpec], tag: str | None, run: RunOptions, json: bool) -> None:
    result = multiarch.build_platforms(specs, tag, run)
    if json:
        emit_json(result.to_json())
    else:
        for report in result.reports:
            console().print(f"\n{report.platform}", markup=False)
            _print(report)
        if result.index is not None:
            console().print(f"\nindex  {result.tag}@{result.index.digest}", markup=False)
    for report in result.reports:
        _keep_report(report)
    failed = [r.platform for r in result.reports if r.verify is not None and not r.verify.ok]
    if failed:
        raise VerificationFailedError(
            f"{', '.join(failed)} failed verification; no platform was pushed",
            hint="each platform's table above has its ops' results",
            reported=json,
        )
    for report in result.reports:
        _check_report(report, run.max_size, json)


def _check_report(report: ImageReport, budget: int | None, json: bool) -> None:
    """Exit 1 (after the report was printed) for an op that did not verify or an image over budget."""
    if report.verify is not None and not report.verify.ok:
        why = report.verify.failure_summary()
        raise VerificationFailedError(
            f"{report.tag} was built but failed verification: {why}",
            hint="the table above has each op's load, self-test and device-code results; not pushed",
            reported=json,  # the summary printed above already is the whole JSON answer
        )
    if budget is not None and report.size is not None:
        check_budget(report.size, budget, reported=json)  # the JSON summary above has every part


def _keep_report(report: ImageReport) -> None:
    """The image's own report as JSON beside its SBOM and provenance on the host."""
    if report.proof is not None:
        summary = json_module.dumps(report.to_json(), indent=2) + "\n"
        write_atomic(report.proof.directory / "build.json", summary)


def _mib(size: int) -> str:
    return f"{size / 2**20:.0f} MiB"


def _compile_cell(seconds: Mapping[str, float]) -> str:
    """Each op's compile time in this build; a layer-cached build compiled nothing."""
    if not seconds:
        return "-"
    return ", ".join(f"{op} {s:.1f}s" for op, s in seconds.items())


def _cache_cell(report: ImageReport) -> str:
    """sccache's hits and misses in this build (--compile-cache); "-" when nothing was counted."""
    stats = report.compile_cache
    if stats is None:
        return "-"
    by_op = ", ".join(f"{op} {c.hits}/{c.hits + c.misses}" for op, c in stats.ops.items())
    return f"{stats.hits} hits, {stats.misses} misses ({stats.location})" + (
        f"; hits by op: {by_op}" if by_op else ""
    )


def _print(report: ImageReport) -> None:
    out = console()
    if report.verify is not None:
        out.print(render_table(report.verify))
    verify_seconds = report.verify_seconds
    rows = [
        ("tag", report.tag),
        ("size", _mib(report.size_bytes)),
        ("ops", ", ".join(report.ops)),
        ("archs", ";".join(report.archs) or "-"),
        ("torch", report.torch),
        ("python", report.python),
        ("build", f"{report.build_seconds:.1f}s ({report.engine})"),
        ("compile", _compile_cell(report.compile_seconds)),
        ("compile cache", _cache_cell(report)),
        ("verify", "skipped" if verify_seconds is None else f"{verify_seconds:.1f}s"),
        ("pushed", "yes" if report.pushed else "no"),
        ("proof", "-" if report.proof is None else str(report.proof.directory)),
    ]
    width = max(len(k) for k, _ in rows)
    for key, value in rows:
        out.print(f"{key.ljust(width)}  {value}", markup=False)
    if report.size is not None:
        out.print("")
        for line in report.size.lines():
            out.print(line, markup=False)
