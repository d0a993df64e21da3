"""``imagegen dockerfile``: render the Dockerfile of one image."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated, Optional

import typer

from imagegen import log
from imagegen.commands._options import (
    ArchOption,
    BaseDevelOption,
    BaseRuntimeOption,
    BuildkitOption,
    BytecodeOption,
    CaCertOption,
    CompileCacheOption,
    CpuOption,
    CudaOption,
    DistroOption,
    KeepCaCertOption,
    MaxJobsOption,
    NumpyOption,
    OfflineOption,
    OpsOption,
    OpSourceOption,
    PlatformOption,
    PythonOption,
    RocmOption,
    StandinsOption,
    TorchIndexOption,
    TorchOption,
    WheelhouseOption,
)
from imagegen.commands._spec import make_spec
from imagegen.files import write_atomic
from imagegen.imagespec.image_spec import SpecInput
from imagegen.render.dockerfile import context_extras, render

OutputOption = Annotated[
    Optional[Path],
    typer.Option(
        "--output", "-o", metavar="FILE", help="Write here (atomically) instead of stdout ('-': stdout)."
    ),
]


def dockerfile(
    ops: OpsOption = None,
    op_source: OpSourceOption = None,
    cuda: CudaOption = None,
    rocm: RocmOption = None,
    cpu: CpuOption = False,
    platform: PlatformOption = None,
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
    numpy: NumpyOption = None,
    max_jobs: MaxJobsOption = None,
    compile_cache: CompileCacheOption = None,
    output: OutputOption = None,
) -> None:
    """Render the multi-stage Dockerfile (devel -> build -> runtime) for the selected ops."""
    spec = make_spec(SpecInput(
        ops=ops, cuda=cuda, rocm=rocm, cpu=cpu, platform=platform, python=python, torch=torch, arch=arch,
        distro=distro, base_devel=base_devel, base_runtime=base_runtime, standins=standins,
        torch_index=torch_index, wheelhouse=wheelhouse, offline=offline, ca_cert=ca_cert,
        keep_ca_cert=keep_ca_cert, buildkit=buildkit, bytecode=bytecode, numpy=numpy, max_jobs=max_jobs,
        compile_cache=compile_cache,
        op_sources=tuple(op_source or ()),
    ))  # fmt: skip
    text = render(spec)
    if output is None or str(output) == "-":  # '-' is stdout, as for most tools
        sys.stdout.write(text)
        return
    write_atomic(output, text)
    log.info(f"wrote {output}")
    needed = context_extras(spec)
    if needed:
        held = " and ".join(needed)
        log.info(f"build it from a context holding {held} (imagegen build stages that for you)")
