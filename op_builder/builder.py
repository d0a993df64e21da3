"""Base classes for op builders: declarative data in, compile flags and extensions out.

An op is a small subclass that only sets class attributes (name, sources, limits,
system libraries). Flag assembly lives here, once, as pure methods of a
``BuildContext`` (``context``); probing lives in ``toolchain``, selection in ``plan``,
loading in ``loader``.
"""

from __future__ import annotations

import hashlib
import importlib.util
import inspect
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any, ClassVar, Literal

from op_builder import archs as arch_lib
from op_builder import settings, stable_abi
from op_builder.archs import ArchLimits, CudaArch
from op_builder.context import BuildContext, OpFlags, align_torch_cuda_home, cxx_standard
from op_builder.cross import native_platform, retarget_extension
from op_builder.loader import included_files, load_op
from op_builder.paths import PACKAGE_ROOT
from op_builder.stable_abi import PinnedHeaders
from op_builder.toolchain import LibrarySpec

if TYPE_CHECKING:
    from setuptools import Extension

Target = Literal["cpu", "gpu"]


@dataclass(frozen=True)
class SystemLibrary:
    """A C library an op links against, and the Debian packages that provide it."""

    name: str  # linker name: "aio" for -laio
    header: str
    symbol: str  # a function the probe program takes the address of
    build_packages: tuple[str, ...]
    runtime_packages: tuple[str, ...]


def _common_cxx(ctx: BuildContext) -> tuple[str, ...]:
    return ("-O3", f"-std={ctx.cxx_std}", "-g0")


# Source paths reach a module through __FILE__ (torch's checks name where they failed): written
# relative to the folder above the op's package (and torch's headers to the one above torch),
# they are the same wherever the build ran and wherever torch is installed, and so is the module.
PREFIX_MAP = "-ffile-prefix-map="


def _relative_paths(source_dir: Path) -> tuple[str, ...]:
    roots = [PACKAGE_ROOT, source_dir.parent]
    torch_spec = importlib.util.find_spec("torch")  # found, not imported
    if torch_spec is not None and torch_spec.origin is not None:
        roots.append(Path(torch_spec.origin).parent.parent)
    return tuple(f"{PREFIX_MAP}{root}{os.sep}=" for root in dict.fromkeys(roots))


def _release(version: str) -> tuple[int, int]:
    found = stable_abi.release(version)
    return found if found is not None else (0, 0)


def _compiled_against(flags: OpFlags, pinned: PinnedHeaders) -> OpFlags:
    """``flags`` for compiling against the pinned torch headers instead of the installed torch's:
    their C++ standard, and their paths written as the installed torch's would be."""
    std = f"-std={cxx_standard(pinned.version)}"
    prefix_map = f"{PREFIX_MAP}{pinned.include}{os.sep}=torch{os.sep}include{os.sep}"

    def restd(items: tuple[str, ...]) -> tuple[str, ...]:
        return tuple(std if item.startswith("-std=") else item for item in items)

    return replace(
        flags,
        cxx=(*restd(flags.cxx), prefix_map),
        device=restd(flags.device),
        # The C++ library first: searched after torch's libraries, a CUDA build's libtorch.so,
        # which exports some of libstdc++'s symbols, would become a library the module needs
        # (and a CPU build's would not): the module would follow the torch it was linked with.
        libraries=("stdc++", *flags.libraries),
        torch_headers=str(pinned.include),
    )


class OpBuilder:
    """Declarative description of one op. Subclasses set the class attributes."""

    name: ClassVar[str]
    target: ClassVar[Target]
    description: ClassVar[str] = ""
    # Sources and include dirs are relative to ``source_dir()``: ``source_root`` when set, else the
    # folder of the module that defines the builder (an op package's, ours: kernels/<family>).
    source_root: ClassVar[Path | None] = None
    sources: ClassVar[tuple[str, ...]] = ()
    include_dirs: ClassVar[tuple[str, ...]] = ("includes",)
    system_libraries: ClassVar[tuple[SystemLibrary, ...]] = ()
    runtime_packages: ClassVar[tuple[str, ...]] = ()  # Debian packages needed to run
    defines: ClassVar[tuple[str, ...]] = ()
    # The op's self-test, "module:function" taking an op_builder.selftest.SelfTestContext.
    selftest: ClassVar[str | None] = None
    # The oldest torch ("2.10") a stable build of this op loads on: its binding is written once
    # against kernels/includes/op_abi.h. None: a module per torch release (op_builder.stable_abi).
    stable_abi: ClassVar[str | None] = None

    # ---- identity
    @property
    def module_name(self) -> str:
        """Where the ahead-of-time build puts the compiled module."""
        return f"kernels._ops.{self.name}"

    @property
    def build_variable(self) -> str:
        return settings.build_variable(self.name)

    def source_dir(self) -> Path:
        root = type(self).source_root
        if root is not None:
            return Path(root)
        return Path(inspect.getfile(type(self))).resolve().parent

    def source_paths(self) -> tuple[str, ...]:
        return tuple(str(self.source_dir() / s) for s in self.sources)

    def include_paths(self) -> tuple[str, ...]:
        """The include dirs that exist (an op package need not have an ``includes`` folder)."""
        # Normalized: ours name the shared kernels/includes as "../includes".
        dirs = (Path(os.path.normpath(self.source_dir() / d)) for d in self.include_dirs)
        return tuple(str(d) for d in dirs if d.is_dir())

    def system_library_specs(self) -> tuple[LibrarySpec, ...]:
        """What the toolchain probe checks for this op: (name, header, symbol) per library."""
        return tuple((lib.name, lib.header, lib.symbol) for lib in self.system_libraries)

    def build_packages(self) -> tuple[str, ...]:
        return tuple(p for lib in self.system_libraries for p in lib.build_packages)

    def all_runtime_packages(self) -> tuple[str, ...]:
        libs = tuple(p for lib in self.system_libraries for p in lib.runtime_packages)
        return tuple(dict.fromkeys(self.runtime_packages + libs))

    # ---- decisions (pure functions of the context)
    def incompatibility(self, ctx: BuildContext) -> str | None:
        """Why this op cannot be built in ``ctx``, or None when it can."""
        if ctx.toolchain.cxx is None:
            return "no C++ compiler found (set CXX or install g++)"
        cross = ctx.toolchain.cross
        for lib in self.system_libraries:
            found = ctx.toolchain.libraries.get(lib.name)
            if found is None or not found.ok:
                why = found.reason if found is not None else "not probed"
                # A cross build links the target's library: Debian's multiarch package of it.
                packages = [f"{p}:{cross.debian_arch}" if cross else p for p in lib.build_packages]
                return f"lib{lib.name} is missing ({why}); install {' '.join(packages)} (Debian/Ubuntu)"
        return None

    def archs_for(self, ctx: BuildContext) -> tuple[str, ...]:
        """The arch names this op is compiled for (empty for CPU ops)."""
        return ()

    def flags(self, ctx: BuildContext) -> OpFlags:
        raise NotImplementedError

    def _op_flags(
        self,
        ctx: BuildContext,
        cxx: Sequence[str],
        device_compiler: Literal["nvcc", "hipcc"] | None,
        device: tuple[str, ...],
        archs: tuple[str, ...],
        ldflags: tuple[str, ...],
    ) -> OpFlags:
        """The flags of this op: the common C++ flags then ``cxx``, made a stable build's where
        the op and the build's torch allow one."""
        flags = OpFlags(
            name=self.name,
            module=self.module_name,
            sources=self.source_paths(),
            include_dirs=self.include_paths(),
            cxx=(*_common_cxx(ctx), *_relative_paths(self.source_dir()), *cxx),
            device_compiler=device_compiler,
            device=device,
            archs=archs,
            ldflags=ldflags,
            libraries=tuple(lib.name for lib in self.system_libraries),
        )
        return self._with_stable_abi(ctx, flags)

    def stable_target(self, ctx: BuildContext) -> str | None:
        """The stable ABI target this build uses, or None for a per-torch module."""
        cross = ctx.toolchain.cross
        platform = cross.platform if cross is not None else native_platform()
        return stable_abi.stable_target(self.stable_abi, ctx.torch_version, ctx.accelerator, platform)

    def _with_stable_abi(self, ctx: BuildContext, flags: OpFlags) -> OpFlags:
        """``flags`` made a stable build's when the op and the build's torch allow one."""
        target = self.stable_target(ctx)
        pinned = ctx.stable_headers
        if target is None or (
            pinned is not None and stable_abi.parse_target(target) > _release(pinned.version)
        ):
            return flags
        headers_version = ctx.torch_version if pinned is None else pinned.version
        if pinned is not None:
            flags = _compiled_against(flags, pinned)
        # The namespace hashes what the module is made of, not where: sources and headers by
        # name and content, the flags, and the release of torch's headers (two builds against
        # different headers are different modules, and must not share a namespace in a process);
        # so the same inputs give the same module anywhere.
        files = included_files(flags)
        portable = [f for f in flags.cxx if not f.startswith(PREFIX_MAP)]  # where, not what
        identity = [target.encode(), ctx.accelerator.encode(), *(f.encode() for f in portable)]
        identity.append(f"torch headers {headers_version}".encode())
        identity += [f.encode() for f in flags.device if not f.startswith("--threads")]
        for path in sorted(files, key=lambda p: p.name):
            identity += [path.name.encode(), path.read_bytes()]
        defines = stable_abi.defines(target, stable_abi.namespace(self.name, identity), ctx.accelerator)
        return replace(
            flags,
            ldflags=(*flags.ldflags, *stable_abi.link_flags()),
            cxx=(*flags.cxx, *defines),
            device=(*flags.device, *defines) if flags.device else (),
            stable_abi=target,
        )

    # ---- artifacts
    def extension(self, ctx: BuildContext) -> Extension:
        """A setuptools extension for the ahead-of-time build (imports torch)."""
        # Deferred: only an ahead-of-time build needs torch's extension classes (setuptools).
        from torch.utils.cpp_extension import CppExtension, CUDAExtension

        align_torch_cuda_home(ctx)

        flags = self.flags(ctx)
        # setuptools wants sources relative to setup.py; include dirs stay absolute
        # because torch's ninja build compiles from inside its build directory.
        rel = [_project_relative(s, self.source_dir()) for s in flags.sources]
        common: dict[str, Any] = {
            "name": flags.module,
            "sources": rel,
            "include_dirs": list(flags.compile_include_dirs),
            "extra_link_args": list(flags.ldflags),
            "libraries": list(flags.libraries),
        }
        if flags.stable_abi is not None:
            # torch's extension classes then define Py_LIMITED_API (CPython 3.10), leave out
            # libtorch_python, and setuptools names the module <op>.abi3.so.
            common["py_limited_api"] = True
        if flags.device_compiler is None:
            extension = CppExtension(extra_compile_args={"cxx": list(flags.cxx)}, **common)  # type: ignore[no-untyped-call]
        else:
            # torch's BuildExtension hands the "nvcc" flags to hipcc on ROCm, and adds
            # no -gencode of its own when the flags already name an arch.
            extension = CUDAExtension(  # type: ignore[no-untyped-call]
                extra_compile_args={"cxx": list(flags.cxx), "nvcc": list(flags.device)}, **common
            )
        cross = ctx.toolchain.cross
        if cross is None:
            return extension
        toolkit = ctx.toolchain.cuda if flags.device_compiler == "nvcc" else None
        return retarget_extension(extension, cross, toolkit.home if toolkit is not None else None)

    def load(self, env: Mapping[str, str] | None = None) -> ModuleType:
        """The compiled module: installed if built for this torch, else JIT-built."""
        return load_op(self, os.environ if env is None else env).module


# Where an ahead-of-time build reaches an op package outside the project: setuptools refuses
# absolute source paths, and a "../" path would put the objects outside its build directory.
LINKED_SOURCES = Path("build", "op-sources")


def _project_relative(source: str, source_dir: Path) -> str:
    """``source`` relative to the project; an op package's through a link under ``LINKED_SOURCES``."""
    relative = os.path.relpath(source, PACKAGE_ROOT)
    if not relative.startswith(os.pardir):
        return relative
    tag = hashlib.sha256(str(source_dir).encode()).hexdigest()[:8]
    link = PACKAGE_ROOT / LINKED_SOURCES / f"{source_dir.name}-{tag}"
    if not link.is_symlink() or Path(os.readlink(link)) != source_dir:
        link.parent.mkdir(parents=True, exist_ok=True)
        link.unlink(missing_ok=True)
        link.symlink_to(source_dir, target_is_directory=True)
    return str(LINKED_SOURCES / link.name / os.path.relpath(source, source_dir))


class CPUOpBuilder(OpBuilder):
    """An op compiled by the host C++ compiler with OpenMP; runs on any target."""

    target: ClassVar[Target] = "cpu"

    def flags(self, ctx: BuildContext) -> OpFlags:
        # Portable by default: kernels pick AVX-512/AVX2/scalar at run time, so an
        # image built on one CPU runs on another. -march=native only on request.
        cxx = ["-fopenmp", *self.defines]
        if ctx.cpu_native:
            cxx.append("-march=native")
        return self._op_flags(ctx, cxx, None, (), (), ("-fopenmp",))


class CUDAOpBuilder(OpBuilder):
    """An op with device code: nvcc for CUDA, hipcc (after hipify) for ROCm."""

    target: ClassVar[Target] = "gpu"
    arch_limits: ClassVar[ArchLimits] = ArchLimits()
    # nvcc flags of this op alone, after the common ones (so they can undo one of those).
    nvcc_flags: ClassVar[tuple[str, ...]] = ()

    def arch_decision(self, archs: Sequence[CudaArch]) -> arch_lib.OpArchDecision:
        """This op's own list from a build-wide list (see ``archs.decide_op_archs``)."""
        return arch_lib.decide_op_archs(self.name, archs, self.arch_limits)

    def cuda_archs(self, ctx: BuildContext) -> tuple[CudaArch, ...]:
        return self.arch_decision(ctx.cuda_archs).kept

    def archs_for(self, ctx: BuildContext) -> tuple[str, ...]:
        if ctx.accelerator == "rocm":
            return ctx.rocm_archs
        if ctx.accelerator == "cuda":
            return tuple(str(a) for a in self.cuda_archs(ctx))
        return ()

    def incompatibility(self, ctx: BuildContext) -> str | None:
        if ctx.accelerator == "cpu":
            return "needs a CUDA or ROCm target, and the build targets the CPU (DS_ACCELERATOR=cpu)"
        if ctx.accelerator == "cuda":
            if ctx.toolchain.cuda is None:
                return "no CUDA toolkit found (nvcc not on PATH and CUDA_HOME unset)"
            decision = self.arch_decision(ctx.cuda_archs)
            if not decision.kept:
                return decision.reason or "no CUDA arch to build for (the arch list is empty)"
        if ctx.accelerator == "rocm" and ctx.toolchain.rocm is None:
            return "no ROCm toolkit found (hipcc not on PATH and ROCM_HOME unset)"
        return super().incompatibility(ctx)

    def arch_defines(self, archs: tuple[CudaArch, ...]) -> tuple[str, ...]:
        """Per-op switches derived from this op's own arch list (never from globals)."""
        return ("-DBF16_AVAILABLE",) if arch_lib.bf16_supported(archs) else ()

    def flags(self, ctx: BuildContext) -> OpFlags:
        if ctx.accelerator == "rocm":
            return self._rocm_flags(ctx)
        archs = self.cuda_archs(ctx)
        defines = (*self.defines, *self.arch_defines(archs))
        nvcc = [
            "-O3",
            f"-std={ctx.cxx_std}",
            "--use_fast_math",
            # torch's headers disable the half operators by default; our kernels use them.
            "-U__CUDA_NO_HALF_OPERATORS__",
            "-U__CUDA_NO_HALF_CONVERSIONS__",
            "-U__CUDA_NO_BFLOAT16_CONVERSIONS__",
            f"--threads={ctx.nvcc_threads}",
            *arch_lib.nvcc_gencode_flags(archs),
            *defines,
            *self.nvcc_flags,
        ]
        return self._device_flags(ctx, "nvcc", nvcc, tuple(str(a) for a in archs), defines)

    def _rocm_flags(self, ctx: BuildContext) -> OpFlags:
        defines = (*self.defines, "-D__HIP_PLATFORM_AMD__=1", "-DUSE_ROCM=1")
        # The wavefront size (64 on CDNA, 32 on RDNA) is fixed per --offload-arch by the
        # compiler; kernels read it from warpSize, so one source serves both.
        hipcc = ["-O3", f"-std={ctx.cxx_std}", *arch_lib.hip_offload_flags(ctx.rocm_archs), *defines]
        return self._device_flags(ctx, "hipcc", hipcc, ctx.rocm_archs, defines)

    def _device_flags(
        self,
        ctx: BuildContext,
        compiler: Literal["nvcc", "hipcc"],
        device: list[str],
        archs: tuple[str, ...],
        defines: tuple[str, ...],
    ) -> OpFlags:
        return self._op_flags(ctx, defines, compiler, tuple(device), archs, ())
