"""Compile every GPU op's device code with each CUDA / HIP compiler that can be had here.

The toolkits: this machine's nvcc, the CUDA stand-in images' (``imagegen-standin/cuda:X.Y-devel``,
run with ``docker run`` on the checkout mounted read-only at its own path) and this machine's
hipcc (Debian's ROCm). Each ``.cu`` source gets the device flags ``op_builder`` gives its op for
that toolkit and a C++ standard (which follows torch: ``op_builder.context.cxx_standard``), as
``make cuda-check`` / ``make hip-check`` do for one of them. HIP compiles the unmodified sources
as HIP (``-x hip``; the kernels use only portable names, ``make hip-check`` also hipifies them).
A toolkit that is not here is listed as "not available here", never assumed.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Literal

from imagegen.compat.host import Job, include_files, job_key
from imagegen.imagespec import catalog
from op_builder import settings as op_settings
from op_builder.builder import OpBuilder
from op_builder.context import resolve_context
from op_builder.paths import PACKAGE_ROOT
from op_builder.toolchain import CudaToolkit, RocmToolkit, Toolchain, TorchBuild

# Two archs of different generations, as make cuda-check compiles: enough to reach every
# arch-dependent code path (bf16, sm_90 features) without the cost of the whole default list.
CUDA_ARCHS = "8.0;9.0"
ROCM_ARCHS = "gfx90a;gfx1030"  # one wave64, one wave32 target (make hip-check's)
STANDIN_DEVEL = "imagegen-standin/cuda:{version}-devel"
# Debian trixie's hipcc (ROCm 5.7, clang 17) in an image of its own, so this machine's apt
# sources stay as they are: scripts/compat-hip-image.sh makes it.
HIP_IMAGES: dict[str, str] = {"5.7": "imagegen-compat/hip:5.7"}
# The container compilers tried: the CUDA 12.x one this machine cannot install natively, and
# every 13.x target's from NVIDIA's wheels but 13.0 (this machine's toolkit).
STANDIN_CUDA_VERSIONS: tuple[str, ...] = (
    "12.4",
    *(
        v
        for v, t in catalog.CUDA_TARGETS.items()
        if v.startswith("13.") and v != "13.0" and catalog.standin_bases(t.name)
    ),
)
# torch releases whose C++ standard each is: the device flags are resolved for one of these.
STD_TORCH: dict[str, str] = {"c++17": "2.13.0", "c++20": "2.14.0"}


@dataclass(frozen=True)
class Toolkit:
    accelerator: Literal["cuda", "rocm"]
    version: str  # "13.0", "12.4", "5.2"
    where: str  # "this machine", or the image it runs in
    compiler: str  # path (here) or name (in the image)
    image: str | None = None

    @property
    def label(self) -> str:
        name = "nvcc" if self.accelerator == "cuda" else "hipcc"
        return f"{name} {self.version}"


@dataclass(frozen=True)
class Missing:
    """A toolkit the check would use and cannot have here, and why."""

    accelerator: Literal["cuda", "rocm"]
    version: str
    reason: str


def _docker() -> str | None:
    # Debian's client first: the newer `docker` on PATH may lack plugins, but `run` works with both.
    return "/usr/bin/docker" if Path("/usr/bin/docker").exists() else shutil.which("docker")


def image_exists(image: str) -> bool:
    docker = _docker()
    if docker is None:
        return False
    done = subprocess.run(
        [docker, "image", "inspect", "--format", "{{.Id}}", image], capture_output=True, check=False
    )
    return done.returncode == 0


def find_toolkits(toolchain: Toolchain) -> list[Toolkit]:
    """Every device compiler this machine has, locally or in a stand-in image."""
    found: list[Toolkit] = []
    if toolchain.cuda is not None:
        found.append(Toolkit("cuda", toolchain.cuda.version, "this machine", toolchain.cuda.nvcc))
    for version in STANDIN_CUDA_VERSIONS:
        image = STANDIN_DEVEL.format(version=version)
        if any(t.version == version for t in found) or not image_exists(image):
            continue
        found.append(Toolkit("cuda", version, image, "nvcc", image))
    if toolchain.rocm is not None:
        found.append(Toolkit("rocm", toolchain.rocm.version, "this machine", toolchain.rocm.hipcc))
    for version, image in HIP_IMAGES.items():
        if not any(t.accelerator == "rocm" and t.version == version for t in found) and image_exists(image):
            found.append(Toolkit("rocm", version, image, "hipcc", image))
    return found


def missing_toolkits(found: Sequence[Toolkit], wanted: Sequence[tuple[str, str, str]]) -> list[Missing]:
    """The ``wanted`` (accelerator, version, how to get it) that ``found`` lacks."""
    have = {(t.accelerator, t.version) for t in found}
    return [
        Missing(acc, version, f"not available here ({how})")  # type: ignore[arg-type]
        for acc, version, how in wanted
        if (acc, version) not in have
    ]


def _toolchain_for(toolkit: Toolkit, std: str, toolchain: Toolchain) -> Toolchain:
    torch = TorchBuild(STD_TORCH[std], None, None)
    if toolkit.accelerator == "cuda":
        home = str(Path(toolkit.compiler).parent.parent) if toolkit.image is None else "/usr/local/cuda"
        return replace(toolchain, torch=torch, cuda=CudaToolkit(home, toolkit.compiler, toolkit.version))
    return replace(toolchain, torch=torch, rocm=RocmToolkit("/usr", toolkit.compiler, toolkit.version))


def _prefix(toolkit: Toolkit) -> tuple[str, ...]:
    if toolkit.image is None:
        # Where nvcc is installed too, hipcc picks the NVIDIA platform unless told.
        return ("env", "HIP_PLATFORM=amd") if toolkit.accelerator == "rocm" else ()
    docker = _docker() or "docker"
    root = str(PACKAGE_ROOT)
    # No network, the sources read-only at the same path, so op_builder's absolute paths hold.
    platform = ("-e", "HIP_PLATFORM=amd") if toolkit.accelerator == "rocm" else ()
    run = (docker, "run", "--rm", "--network", "none", *platform)
    return (*run, "-v", f"{root}:{root}:ro", "-w", root, toolkit.image)


def jobs_for(toolkit: Toolkit, std: str, ops: Mapping[str, OpBuilder], toolchain: Toolchain) -> list[Job]:
    """One device compile per ``.cu`` source of each GPU op, with ``toolkit`` and ``std``."""
    env = (
        {op_settings.ACCELERATOR.name: "cuda", op_settings.CUDA_ARCH_LIST.name: CUDA_ARCHS}
        if toolkit.accelerator == "cuda"
        else {op_settings.ACCELERATOR.name: "rocm", op_settings.ROCM_ARCH.name: ROCM_ARCHS}
    )
    ctx = resolve_context(env, _toolchain_for(toolkit, std, toolchain))
    prefix = _prefix(toolkit)
    # In a container the object goes to its own /tmp, discarded with it.
    out = "/tmp/compat-device.o" if toolkit.image else "{obj}"
    language = ("-x", "hip") if toolkit.accelerator == "rocm" else ()
    jobs: list[Job] = []
    for name, builder in ops.items():
        if builder.target != "gpu":
            continue
        flags = builder.flags(ctx)
        includes = tuple(f"-I{d}" for d in flags.include_dirs)
        for source in flags.sources:
            if not source.endswith(".cu"):
                continue
            command = (
                *prefix,
                toolkit.compiler,
                *flags.device,
                *includes,
                *language,
                "-c",
                source,
                "-o",
                out,
            )
            portable = [a.replace(str(PACKAGE_ROOT), "<checkout>") for a in command[len(prefix) :]]
            relative = os.path.relpath(source, PACKAGE_ROOT)
            key = job_key(toolkit.label, toolkit.where, std, relative, portable)
            jobs.append(
                Job(
                    f"{toolkit.label}/{std}",
                    name,
                    relative,
                    command,
                    key,
                    depfile=toolkit.image is None,
                    coarse_deps=include_files(flags.include_dirs),
                    roots=(str(builder.source_dir().resolve()),),
                )
            )
    return jobs
