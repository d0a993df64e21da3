"""``imagegen bake``: targets of the standard matrix through ``docker buildx bake``, each image
verified and, with ``--push``, pushed when it passed; one table (or JSON document) of them all."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Annotated, Optional

import typer
from rich.table import Table

from imagegen import log
from imagegen.commands._options import JsonOption, by_platform, table_options
from imagegen.commands._output import console, emit_json
from imagegen.commands._spec import make_spec
from imagegen.errors import BadInputError, BuildFailedError
from imagegen.imagespec import catalog, compile_cache
from imagegen.imagespec.spec import SpecInput
from imagegen.oci.push_plan import PushPlan
from imagegen.render.matrix import STANDARD_MATRIX
from imagegen.runs.bake import bake
from imagegen.runs.bake_inputs import BakeRequest, check_platform_options
from imagegen.runs.bake_order import uncached_followers
from imagegen.runs.report import RunImage, RunReport
from imagegen.runs.run_choices import LOCAL, RunOptions
from op_builder.suggest import did_you_mean

TargetsArgument = Annotated[
    Optional[list[str]],
    typer.Argument(
        metavar="[TARGETS]...",
        help="Targets of dockerfiles/docker-bake.hcl (cpu, cpu-arm64, cuda13-0, ...). Default: all of them.",
        show_default=False,
    ),
]


def _matrix_targets() -> dict[str, tuple[catalog.Accelerator, str | None, str]]:
    """Bake target name -> (accelerator, version, platform), as `imagegen matrix` names them."""
    found = {}
    for accelerator, version, platform in STANDARD_MATRIX:
        name = "cpu" if accelerator == "cpu" else f"{accelerator}{version}"
        name += catalog.platform_tag_suffix(platform)
        found[name.replace(".", "-")] = (accelerator, version, platform)
    return found


@table_options("bake")  # every option but --json: the table's rows (--push REGISTRY: push_registry)
def bake_command(
    image: SpecInput,
    targets: TargetsArgument = None,
    builder: str | None = None,
    push_registry: str | None = None,
    platform_torch: tuple[str, ...] = (),
    platform_wheelhouse: tuple[str, ...] = (),
    torch_releases: str | None = None,
    no_verify: bool = False,
    bake_file: Path | None = None,
    run: RunOptions = LOCAL,  # --source (its row, packed)
    json: JsonOption = False,
) -> None:
    """Bake targets of the matrix with docker buildx, verify every image, push those that pass."""
    plan = PushPlan.for_bake(push_registry, verify=not no_verify)  # the push rule, before anything else
    known = _matrix_targets()
    names = list(dict.fromkeys(targets or known))
    for name in names:
        if name not in known:
            raise BadInputError(
                f"no target {name!r} in the matrix",
                hint=did_you_mean(name, known) or "targets: " + ", ".join(known),
            )
    torch_for = by_platform("--platform-torch", platform_torch, "linux/arm64=2.10.0")
    wheels_for = by_platform("--platform-wheelhouse", platform_wheelhouse, "linux/arm64=DIR")
    check_platform_options(
        {"--platform-torch": torch_for, "--platform-wheelhouse": wheels_for},
        {known[n][2] for n in names},
        "bake",
    )
    releases = torch_releases_of(torch_releases, image.torch, torch_for)
    requests = _requests(image, names, known, releases, torch_for, wheels_for)
    uncached = uncached_followers(requests)
    if uncached and image.compile_cache is None:
        log.info(
            f"--compile-cache local (a BuildKit cache mount), so that {', '.join(uncached)} take the stable "
            "op modules that the image of the newest torch compiles from it rather than compiling them again"
        )
        # The specs as made, the cache given to each (made again, they would print their warnings twice).
        local = compile_cache.parse("local")
        requests = [replace(r, spec=replace(r.spec, compile_cache=local)) for r in requests]
    run = replace(run, push=plan)
    report = bake(requests, run, builder=builder, bake_file_out=bake_file)
    if json:
        emit_json(report.to_json())
    else:
        console().print(_table(report))
    if not report.ok:
        failed = [done for done in report.images if not done.ok]
        raise BuildFailedError(
            f"{len(failed)} of {len(report.images)} target(s) failed: "
            + "; ".join(f"{done.target}: {done.error or done.result}" for done in failed),
            hint="the log above has each target's build lines, prefixed with its name; "
            "nothing that failed was pushed",
            reported=json,
        )


def torch_releases_of(given: str | None, torch: str | None, torch_for: Mapping[str, str]) -> tuple[str, ...]:
    """``--torch-releases``' releases, in order; () without it. BadInputError for an empty or
    repeated item, and with ``--torch`` or ``--platform-torch`` (which torch would a target get?)."""
    if given is None:
        return ()
    releases = tuple(item.strip() for item in given.split(","))
    if not all(releases):
        raise BadInputError(
            f"--torch-releases {given!r}: an empty item", hint="e.g. --torch-releases 2.14.1,2.15.0"
        )
    repeated = sorted({r for r in releases if releases.count(r) > 1})
    if repeated:
        raise BadInputError(
            f"--torch-releases names {', '.join(repeated)} twice", hint="name each release once"
        )
    for option, value in (("--torch", torch), ("--platform-torch", ", ".join(torch_for) or None)):
        if value is not None:
            raise BadInputError(
                f"--torch-releases and {option} ({value}) both choose the torch of the images",
                hint=f"give the releases with --torch-releases alone, or one torch with {option}",
            )
    return releases


def release_target(target: str, release: str) -> str:
    """The name of ``target``'s image of one ``--torch-releases`` release (cuda13-0-torch2-14-1)."""
    return f"{target}-torch{release.replace('.', '-')}"


def _requests(
    image: SpecInput,
    names: Sequence[str],
    known: Mapping[str, tuple[catalog.Accelerator, str | None, str]],
    releases: Sequence[str],
    torch_for: Mapping[str, str],
    wheels_for: Mapping[str, str],
) -> list[BakeRequest]:
    """One request per target, or per target and release of ``--torch-releases`` (its name
    ending in the release); image: flag > IMAGEGEN_* > default (for bake, --ops all), resolved
    once. BadInputError for two images under one tag (2.14 and 2.14.1, say)."""
    requests = []
    for name in names:
        accelerator, version, platform = known[name]
        for release in releases or (None,):
            inp = image.replace(
                cpu=accelerator == "cpu",
                cuda=version if accelerator == "cuda" else None,
                rocm=version if accelerator == "rocm" else None,
                platform=platform, torch=release or torch_for.get(platform, image.torch),
                wheelhouse=wheels_for.get(platform, image.wheelhouse),
                # A cross-compiled (arm64) target's own torch is the builder's: --wheelhouse holds it.
                build_wheelhouse=image.wheelhouse,
            )  # fmt: skip
            own = name if release is None else release_target(name, release)
            requests.append(BakeRequest(own, make_spec(inp)))
    tags: dict[str, str] = {}
    for request in requests:
        other = tags.setdefault(request.spec.tag, request.name)
        if other != request.name:
            raise BadInputError(
                f"{other} and {request.name} would both be {request.spec.tag}",
                hint="name each torch release once in --torch-releases (X.Y is its newest patch X.Y.Z)",
            )
    return requests


def _seconds(value: float | None) -> str:
    return "-" if value is None else f"{value:.0f}s"


def _size(image: RunImage) -> str:
    return "-" if image.size_bytes is None else f"{image.size_bytes / 2**20:.0f} MiB"


def _table(report: RunReport) -> Table:
    verdict = "all passed" if report.ok else "FAILED"
    title = f"imagegen bake: {verdict} (builder {report.builder or 'current'}, {report.driver})"
    table = Table(title=title, title_justify="left")
    for column in ("target", "platform", "tag", "size", "build", "compiled", "verify", "result"):
        table.add_column(column, overflow="fold")
    for image in report.images:
        result = (image.pushed and f"pushed {image.pushed}") or image.result
        table.add_row(
            image.target, image.platform, image.tag, _size(image), _seconds(image.build_seconds),
            _compiled(image), _seconds(image.verify_seconds),
            result if image.ok else f"{result}: {image.error or ''}",
        )  # fmt: skip
    counted = [
        image.report.compile_cache for image in report.images if image.report and image.report.compile_cache
    ]
    if counted:
        table.caption = (
            f"compiled {sum(c.misses for c in counted)} translation unit(s) for {len(counted)} image(s), "
            f"{sum(c.hits for c in counted)} more from the compile cache"
        )
        table.caption_justify = "left"
    return table


def _compiled(image: RunImage) -> str:
    """What the image's build compiled: "-" without a compile cache's count (none, or nothing
    compiled: the build stage came from the layer cache)."""
    stats = None if image.report is None else image.report.compile_cache
    return "-" if stats is None else f"{stats.misses} (+{stats.hits} cached)"
