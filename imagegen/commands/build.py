"""``imagegen build``: spec -> Dockerfile -> image -> verification -> (push) -> summary."""

from __future__ import annotations

import os
from dataclasses import replace
from pathlib import Path
from typing import Annotated, Any, Optional

import typer

from imagegen import log
from imagegen.commands._context import staged_context
from imagegen.commands._images import missing_base_hint
from imagegen.commands._options import (
    ArchOption,
    BaseDevelOption,
    BaseRuntimeOption,
    BuildkitOption,
    BytecodeOption,
    CaCertOption,
    CpuOption,
    CudaOption,
    DistroOption,
    JsonOption,
    KeepCaCertOption,
    MaxJobsOption,
    OfflineOption,
    OpsOption,
    PythonOption,
    RocmOption,
    StandinsOption,
    TagOption,
    TorchIndexOption,
    TorchOption,
    WheelhouseOption,
)
from imagegen.commands._output import console, emit_json
from imagegen.commands._spec import make_spec
from imagegen.errors import BuildFailedError, VerificationFailedError
from imagegen.render import render
from imagegen.sources import check_sources, source_root
from imagegen.spec import ImageSpec

NoVerifyOption = Annotated[
    bool, typer.Option("--no-verify", help="Skip loading the ops in a sealed container.")
]
PushOption = Annotated[bool, typer.Option("--push", help="Push the tag after verification passed.")]
SourceOption = Annotated[
    Optional[Path],
    typer.Option(
        "--source", metavar="DIR", help="Project checkout to build from. Default: the one imagegen runs from."
    ),
]


def build(
    ops: OpsOption = None,
    cuda: CudaOption = None,
    rocm: RocmOption = None,
    cpu: CpuOption = False,
    python: PythonOption = None,
    torch: TorchOption = None,
    arch: ArchOption = None,
    distro: DistroOption = None,
    base_devel: BaseDevelOption = None,
    base_runtime: BaseRuntimeOption = None,
    standins: StandinsOption = None,
    torch_index: TorchIndexOption = None,
    wheelhouse: WheelhouseOption = None,
    offline: OfflineOption = None,
    ca_cert: CaCertOption = None,
    keep_ca_cert: KeepCaCertOption = False,
    buildkit: BuildkitOption = None,
    bytecode: BytecodeOption = None,
    max_jobs: MaxJobsOption = None,
    tag: TagOption = None,
    no_verify: NoVerifyOption = False,
    push: PushOption = False,
    source: SourceOption = None,
    json: JsonOption = False,
) -> None:
    """Build the image of the selected ops, verify every op loads ahead of time, print a summary."""
    spec = make_spec(
        ops=ops, cuda=cuda, rocm=rocm, cpu=cpu, python=python, torch=torch, arch=arch, distro=distro,
        base_devel=base_devel, base_runtime=base_runtime, standins=standins, torch_index=torch_index,
        wheelhouse=wheelhouse, offline=offline, ca_cert=ca_cert, keep_ca_cert=keep_ca_cert,
        buildkit=buildkit, bytecode=bytecode, max_jobs=max_jobs, tag=tag, push=push, verify=not no_verify,
    )  # fmt: skip
    root = source or source_root()
    check_sources(root)  # bad input before any engine work
    # Imported here: the engine and verifier need the docker SDK, which `ops`/`dockerfile` do not.
    from imagegen import verify as verify_lib
    from imagegen.engine import build_image
    from imagegen.engine_probe import detect_engine
    from imagegen.images import image_size, push_image

    with log.step("detect the container engine"):
        engine = detect_engine(os.environ, prefer_buildkit=spec.buildkit)
        log.info(f"{engine.kind} builder, server {engine.server_version}")
    if spec.buildkit and engine.kind == "classic":
        log.warn("BuildKit is not available here: building the classic variant (no cache mounts)")
        spec = replace(spec, buildkit=False)
    text = render(spec)
    summary: dict[str, Any] = {
        "ok": False,
        "tag": spec.tag,
        "target": spec.target,
        "ops": list(spec.ops),
        "archs": list(spec.archs),
        "torch": spec.torch_release,
        "python": spec.python,
        "engine": engine.kind,
        "size_bytes": None,
        "build_seconds": None,
        "verify_seconds": None,
        "verify": None,
        "pushed": False,
    }

    with log.step(f"build {spec.tag}"), staged_context(spec, root) as context:
        try:
            result = build_image(
                engine,
                context,
                text,
                spec.tag,
                target="runtime",
                build_args={"MAX_JOBS": str(spec.max_jobs)} if spec.max_jobs else {},
            )
        except BuildFailedError as exc:
            raise _with_base_hint(exc, spec) from None
    summary["build_seconds"] = round(result.seconds, 1)
    summary["size_bytes"] = image_size(engine, spec.tag)

    verified = None
    if not no_verify:
        with log.step(f"verify {spec.tag}"):
            verified = verify_lib.verify_image(spec.tag, ops=spec.ops)
        summary["verify"] = verified.to_json()
        summary["verify_seconds"] = round(verified.seconds, 1)
        if not verified.ok:
            _print(summary, json, verified, verify_lib)
            failed = [op.name for op in verified.ops if not op.ok]
            if json:
                # The summary above already is the whole JSON answer; exit as a failed verification.
                raise typer.Exit(VerificationFailedError.exit_code)
            raise VerificationFailedError(
                f"{spec.tag} was built but these ops did not load ahead of time: {', '.join(failed) or '?'}",
                hint="the table above has each op's error; the image was not pushed",
            )
    if spec.push:
        with log.step(f"push {spec.tag}"):
            push_image(engine, spec.tag)
        summary["pushed"] = True
    summary["ok"] = True
    _print(summary, json, verified, verify_lib)


def _with_base_hint(exc: BuildFailedError, spec: ImageSpec) -> BuildFailedError:
    """Add how to get the base images when they are missing here (a pull failure looks alike)."""
    extra = missing_base_hint(spec)
    if extra is None:
        return exc
    hint = extra if not exc.hint else f"{extra}\n{exc.hint}"
    return BuildFailedError(exc.message, hint=hint)


def _mib(size: object) -> str:
    return f"{int(size) / 2**20:.0f} MiB" if isinstance(size, int) else "-"


def _print(summary: dict[str, Any], as_json: bool, verified: Any, verify_lib: Any) -> None:
    if as_json:
        emit_json(summary)
        return
    out = console()
    if verified is not None and verify_lib is not None:
        out.print(verify_lib.render_table(verified))
    rows = [
        ("tag", summary["tag"]),
        ("size", _mib(summary["size_bytes"])),
        ("ops", ", ".join(summary["ops"])),
        ("archs", ";".join(summary["archs"]) or "-"),
        ("torch", summary["torch"]),
        ("python", summary["python"]),
        ("build", f"{summary['build_seconds']}s ({summary['engine']})"),
        ("verify", "skipped" if summary["verify_seconds"] is None else f"{summary['verify_seconds']}s"),
        ("pushed", "yes" if summary["pushed"] else "no"),
    ]
    width = max(len(k) for k, _ in rows)
    for key, value in rows:
        out.print(f"{key.ljust(width)}  {value}", markup=False)
