"""The build-wide settings of one build, resolved once from the environment and the probes.

``resolve_context`` is a pure function of an environment mapping and a probed ``Toolchain``;
the ``BuildContext`` it returns is what every op's flags are computed from (see
``builder``), and ``OpFlags`` is what one op is compiled with.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from packaging.version import InvalidVersion, Version

from op_builder import archs as arch_lib
from op_builder import settings
from op_builder.archs import CudaArch
from op_builder.devices import cuda_gpus, import_cpp_extension
from op_builder.env import env_flag, env_positive_int
from op_builder.errors import BadInputError
from op_builder.parallel_build import default_nvcc_threads, job_budget
from op_builder.stable_abi import PinnedHeaders, pinned_headers
from op_builder.toolchain import Toolchain, check_cuda_versions

Accelerator = Literal["cpu", "cuda", "rocm"]


def cxx_standard(torch_version: str | None) -> str:
    """The C++ standard torch's headers need: C++20 from torch 2.14 on, else C++17.

    torch 2.15's headers refuse C++17 outright; the toolkits paired with older
    torch (CUDA 11.8's nvcc) cannot compile C++20, so the standard follows torch.
    """
    if torch_version is None:
        return "c++17"
    try:
        release = Version(torch_version).release
    except InvalidVersion:
        return "c++17"
    return "c++20" if release[:2] >= (2, 14) else "c++17"


@dataclass(frozen=True)
class BuildContext:
    """Resolved build settings shared by every op of one build (see ``resolve_context``)."""

    accelerator: Accelerator
    toolchain: Toolchain
    cuda_archs: tuple[CudaArch, ...] = ()
    rocm_archs: tuple[str, ...] = ()
    cpu_native: bool = False
    nvcc_threads: int = 1
    cxx_std: str = "c++17"
    warnings: tuple[str, ...] = field(default=())
    # The torch whose headers the ops compile against (None when unknown): whether an op that
    # declares a stable ABI target gets a stable build (op_builder.stable_abi).
    torch_version: str | None = None
    # DS_STABLE_HEADERS: the headers stable ops compile against (None: the installed torch's).
    stable_headers: PinnedHeaders | None = None


@dataclass(frozen=True)
class OpFlags:
    """Exactly what one op is compiled with. Paths are absolute."""

    name: str
    module: str
    sources: tuple[str, ...]
    include_dirs: tuple[str, ...]
    cxx: tuple[str, ...]
    device_compiler: Literal["nvcc", "hipcc"] | None
    device: tuple[str, ...]
    archs: tuple[str, ...]
    ldflags: tuple[str, ...]
    libraries: tuple[str, ...]
    # The stable ABI target ("2.10") of a stable build; None for a module per torch release.
    stable_abi: str | None = None
    # A stable build's torch include folder when pinned (DS_STABLE_HEADERS), searched after the
    # op's own include dirs and before the installed torch's.
    torch_headers: str | None = None

    @property
    def compile_include_dirs(self) -> tuple[str, ...]:
        """The include dirs handed to the compiler: the op's, then the pinned torch headers."""
        return self.include_dirs if self.torch_headers is None else (*self.include_dirs, self.torch_headers)

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "module": self.module,
            "sources": list(self.sources),
            "include_dirs": list(self.include_dirs),
            "cxx": list(self.cxx),
            "device_compiler": self.device_compiler,
            "device": list(self.device),
            "archs": list(self.archs),
            "ldflags": list(self.ldflags),
            "libraries": list(self.libraries),
            "stable_abi": self.stable_abi,
            "torch_headers": self.torch_headers,
        }


def resolve_accelerator(env: Mapping[str, str], toolchain: Toolchain) -> Accelerator:
    """DS_ACCELERATOR when set; else what the installed torch was built for."""
    named = env.get(settings.ACCELERATOR.name, "").strip().lower()
    if named:
        if named not in ("cpu", "cuda", "rocm"):
            raise BadInputError(
                f"DS_ACCELERATOR={named!r} is not a known target",
                hint="use cuda, rocm or cpu",
            )
        return named  # type: ignore[return-value]
    torch = toolchain.torch
    if torch is not None and torch.hip:
        return "rocm"
    if torch is not None and torch.cuda:
        return "cuda"
    return "cpu"


def resolve_context(
    env: Mapping[str, str],
    toolchain: Toolchain,
    native: Callable[[], Sequence[str]] | None = None,
) -> BuildContext:
    """Read the build-wide settings once. Raises BadInputError on bad input."""
    accelerator = resolve_accelerator(env, toolchain)
    warnings: list[str] = []
    cuda_archs: tuple[arch_lib.CudaArch, ...] = ()
    rocm_archs: tuple[str, ...] = ()
    if accelerator == "cuda":
        text = env.get(settings.CUDA_ARCH_LIST.name, "").strip()
        if text:
            cuda_archs = arch_lib.parse_cuda_arch_list(text, native)
            if toolchain.cuda is not None:
                arch_lib.validate_for_toolkit(cuda_archs, toolchain.cuda.version)
        elif toolchain.cuda is not None:
            cuda_archs = arch_lib.default_cuda_archs(toolchain.cuda.version)
        torch = toolchain.torch
        if toolchain.cuda is not None and torch is not None and torch.cuda:
            warning = check_cuda_versions(toolchain.cuda.version, torch.cuda, env)
            if warning:
                warnings.append(warning)
        elif torch is not None and not torch.cuda:
            warnings.append(
                f"torch {torch.version} is not a CUDA build: GPU ops can be planned, "
                "but their bindings compile only against a CUDA build of torch"
            )
    elif accelerator == "rocm":
        text = env.get(settings.ROCM_ARCH.name, "").strip()
        rocm_archs = arch_lib.parse_rocm_arch_list(text) if text else arch_lib.DEFAULT_ROCM_ARCHS
    cross = toolchain.cross
    cpu_native = bool(env_flag(env, settings.CPU_NATIVE.name))
    if cpu_native and cross is not None:
        raise BadInputError(
            f"{settings.CPU_NATIVE.name}=1 in a cross build: -march=native would describe this "
            f"{cross.build_platform} machine, not the {cross.platform} target",
            hint=f"unset {settings.CPU_NATIVE.name} (the CPU ops pick their SIMD path at run time)",
        )
    headers_text = env.get(settings.STABLE_HEADERS.name, "").strip()
    return BuildContext(
        accelerator=accelerator,
        toolchain=toolchain,
        cuda_archs=cuda_archs,
        rocm_archs=rocm_archs,
        cpu_native=cpu_native,
        # The default follows the job budget (MAX_JOBS, else the CPUs): see default_nvcc_threads.
        nvcc_threads=env_positive_int(env, settings.NVCC_THREADS.name, default_nvcc_threads(job_budget(env))),
        cxx_std=cxx_standard(toolchain.torch.version if toolchain.torch else None),
        warnings=tuple(warnings),
        torch_version=toolchain.torch.version if toolchain.torch else None,
        stable_headers=pinned_headers(headers_text, settings.STABLE_HEADERS.name) if headers_text else None,
    )


def align_torch_cuda_home(ctx: BuildContext) -> None:
    """Point torch's extension builder at the toolkit we probed, when its own guess is unusable.

    torch guesses CUDA_HOME once, at import, from the first ``nvcc`` on PATH; a
    wrapper script such as /usr/local/bin/nvcc makes that /usr/local, which has no
    CUDA headers. This sets torch's module attribute, never the environment.
    """
    if ctx.accelerator != "cuda" or ctx.toolchain.cuda is None:
        return
    # Deferred: only a CUDA build needs torch's extension module (it pulls in setuptools).
    cpp_extension = import_cpp_extension()
    current = cpp_extension.CUDA_HOME
    if current is None or not Path(current, "include", "cuda_runtime.h").exists():
        cpp_extension.CUDA_HOME = ctx.toolchain.cuda.home


def visible_gpu_capabilities() -> list[str]:
    """Compute capabilities of visible CUDA GPUs, for the 'native' arch list (read without
    initialising CUDA where it can be: ``devices.cuda_gpus``)."""
    return sorted({"{}.{}".format(*capability) for _, capability in cuda_gpus()})
