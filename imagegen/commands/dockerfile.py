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
    CpuOption,
    CudaOption,
    DistroOption,
    KeepCaCertOption,
    MaxJobsOption,
    OfflineOption,
    OpsOption,
    PythonOption,
    RocmOption,
    StandinsOption,
    TorchIndexOption,
    TorchOption,
    WheelhouseOption,
)
from imagegen.commands._spec import make_spec
from imagegen.files import write_atomic
from imagegen.render import render
from imagegen.spec import SpecInput

OutputOption = Annotated[
    Optional[Path],
    typer.Option(
        "--output", "-o", metavar="FILE", help="Write here (atomically) instead of stdout ('-': stdout)."
    ),
]


def dockerfile(
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
    output: OutputOption = None,
) -> None:
    """Render the multi-stage Dockerfile (devel -> build -> runtime) for the selected ops."""
    spec = make_spec(SpecInput(
        ops=ops, cuda=cuda, rocm=rocm, cpu=cpu, python=python, torch=torch, arch=arch, distro=distro,
        base_devel=base_devel, base_runtime=base_runtime, standins=standins, torch_index=torch_index,
        wheelhouse=wheelhouse, offline=offline, ca_cert=ca_cert, keep_ca_cert=keep_ca_cert,
        buildkit=buildkit, bytecode=bytecode, max_jobs=max_jobs,
    ))  # fmt: skip
    text = render(spec)
    if output is None or str(output) == "-":  # '-' is stdout, as for most tools
        sys.stdout.write(text)
        return
    write_atomic(output, text)
    log.info(f"wrote {output}")
    if spec.ca_cert is not None or spec.wheelhouse is not None:
        log.info(
            "build it from a context holding "
            + " and ".join(
                p
                for p, on in (("_imagegen/ca.crt", spec.ca_cert), ("_imagegen/wheelhouse/", spec.wheelhouse))
                if on
            )
            + " (imagegen build stages that for you)"
        )
