"""Probes of the build host: CUDA / ROCm toolkits, torch, C++ compiler, ninja, libraries.

Each probe runs at most once per process (``functools.cache``) and returns a
frozen value; nothing runs at import time. Decisions are made elsewhere, by pure
functions that take these values (``op_builder.plan``), so tests can feed them
tables of hosts.
"""

from __future__ import annotations

import functools
import os
import re
import shutil
import subprocess
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from packaging.version import InvalidVersion, Version

from op_builder import settings
from op_builder.cross import CrossTarget
from op_builder.errors import ToolchainError
from op_builder.torch_build import TorchBuild as TorchBuild  # re-exported: the probes' value


@dataclass(frozen=True)
class CudaToolkit:
    home: str
    nvcc: str
    version: str  # "13.0"


@dataclass(frozen=True)
class RocmToolkit:
    home: str
    hipcc: str
    version: str  # "6.2" (or "5.2" for Debian's packages)


@dataclass(frozen=True)
class Compiler:
    path: str
    version: str


@dataclass(frozen=True)
class LibraryProbe:
    """Whether a C library can be compiled against and linked here, and why not."""

    name: str
    ok: bool
    reason: str | None = None


@dataclass(frozen=True)
class Toolchain:
    """Everything the planner needs to know about the host, read once."""

    torch: TorchBuild | None
    cuda: CudaToolkit | None
    rocm: RocmToolkit | None
    cxx: Compiler | None
    ninja: str | None
    libraries: Mapping[str, LibraryProbe]
    # A cross build's target (op_builder.cross); None builds for this machine.
    cross: CrossTarget | None = None


def _run(cmd: list[str], timeout: float = 30) -> str | None:
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return done.stdout + done.stderr if done.returncode == 0 else None


def find_cuda_home(env: Mapping[str, str]) -> str | None:
    """CUDA_HOME / CUDA_PATH, else where nvcc on PATH lives, else /usr/local/cuda.

    A candidate counts only with both ``bin/nvcc`` and the runtime headers: an
    ``nvcc`` wrapper script in /usr/local/bin must not make /usr/local the home.
    """
    candidates = [env.get(settings.CUDA_HOME.name), env.get(settings.CUDA_PATH.name)]
    nvcc = shutil.which("nvcc", path=env.get("PATH"))
    if nvcc:
        candidates.append(str(Path(nvcc).resolve().parent.parent))
    candidates.append("/usr/local/cuda")
    for home in candidates:
        if home and Path(home, "bin", "nvcc").exists() and Path(home, "include", "cuda_runtime.h").exists():
            return home
    return None


@functools.cache
def _probe_cuda(home: str) -> CudaToolkit | None:
    nvcc = str(Path(home, "bin", "nvcc"))
    out = _run([nvcc, "--version"])
    match = re.search(r"release (\d+)\.(\d+)", out or "")
    if match is None:
        return None
    return CudaToolkit(home=home, nvcc=nvcc, version=f"{match[1]}.{match[2]}")


def probe_cuda(env: Mapping[str, str] = os.environ) -> CudaToolkit | None:
    home = find_cuda_home(env)
    return _probe_cuda(home) if home else None


def find_rocm_home(env: Mapping[str, str]) -> str | None:
    for var in (settings.ROCM_HOME.name, settings.ROCM_PATH.name):
        if env.get(var) and Path(env[var]).is_dir():
            return env[var]
    if Path("/opt/rocm").is_dir():
        return "/opt/rocm"
    hipcc = shutil.which("hipcc", path=env.get("PATH"))
    if hipcc:
        return str(Path(hipcc).resolve().parent.parent)
    return None


@functools.cache
def _probe_rocm(home: str) -> RocmToolkit | None:
    hipcc = shutil.which("hipcc", path=str(Path(home, "bin"))) or shutil.which("hipcc")
    if hipcc is None:
        return None
    version_file = Path(home, ".info", "version")
    text = version_file.read_text() if version_file.exists() else _run([hipcc, "--version"]) or ""
    match = re.search(r"(?:HIP version: |^)(\d+)\.(\d+)", text, re.MULTILINE)
    if match is None:
        return None
    return RocmToolkit(home=home, hipcc=hipcc, version=f"{match[1]}.{match[2]}")


def probe_rocm(env: Mapping[str, str] = os.environ) -> RocmToolkit | None:
    home = find_rocm_home(env)
    return _probe_rocm(home) if home else None


@functools.cache
def probe_torch() -> TorchBuild | None:
    try:
        import torch  # the probe is the import itself, run once and only when asked
    except ImportError:
        return None
    return TorchBuild(version=torch.__version__, cuda=torch.version.cuda, hip=torch.version.hip)


@functools.cache
def _probe_cxx(cxx: str) -> Compiler | None:
    path = shutil.which(cxx)
    if path is None:
        return None
    out = _run([path, "--version"]) or ""
    match = re.search(r"(\d+\.\d+(?:\.\d+)?)", out.splitlines()[0] if out else "")
    return Compiler(path=path, version=match[1] if match else "unknown")


def probe_cxx(env: Mapping[str, str] = os.environ) -> Compiler | None:
    return _probe_cxx(env.get(settings.CXX.name, "c++"))


def probe_ninja(env: Mapping[str, str] = os.environ) -> str | None:
    found = shutil.which("ninja", path=env.get("PATH"))
    if found:
        return found
    try:  # the PyPI "ninja" package puts its binary beside the interpreter's scripts
        import ninja  # optional: present only where the PyPI package is installed

        candidate = Path(ninja.BIN_DIR, "ninja")
        return str(candidate) if candidate.exists() else None
    except ImportError:
        return None


@functools.cache
def probe_library(name: str, header: str, symbol: str, cxx: str = "c++") -> LibraryProbe:
    """Compile and link a tiny program that uses ``symbol`` from ``-l<name>``."""
    compiler = shutil.which(cxx)
    if compiler is None:
        return LibraryProbe(name, False, f"no C++ compiler ({cxx}) to test lib{name} with")
    source = f"#include <{header}>\nint main() {{ return (int)(long)&{symbol}; }}\n"
    with tempfile.TemporaryDirectory(prefix="op_builder_probe_") as tmp:
        src = Path(tmp, "probe.cpp")
        src.write_text(source)
        done = subprocess.run(
            [compiler, str(src), "-o", str(Path(tmp, "probe")), f"-l{name}"],
            capture_output=True,
            text=True,
            check=False,
        )
    if done.returncode == 0:
        return LibraryProbe(name, True)
    if "No such file" in done.stderr and header in done.stderr:
        return LibraryProbe(name, False, f"header <{header}> not found")
    if f"-l{name}" in done.stderr or "cannot find" in done.stderr:
        return LibraryProbe(name, False, f"lib{name} not found by the linker")
    return LibraryProbe(name, False, f"test program for lib{name} did not build")


# A C library to probe for: (linker name, header, a symbol to take the address of).
LibrarySpec = tuple[str, str, str]


def probe(
    env: Mapping[str, str] = os.environ,
    libraries: tuple[LibrarySpec, ...] = (),
    cross: CrossTarget | None = None,
) -> Toolchain:
    """Read the whole host once. ``libraries`` are (name, header, symbol) triples.

    A cross build (``cross``) probes its cross compiler, links the libraries with it (so they
    must be the target's), and takes the target's torch, read from its files, for this one.
    """
    cxx = cross.cxx if cross is not None else env.get(settings.CXX.name, "c++")
    return Toolchain(
        torch=cross.torch if cross is not None else probe_torch(),
        cuda=probe_cuda(env),
        rocm=probe_rocm(env),
        cxx=_probe_cxx(cxx),
        ninja=probe_ninja(env),
        libraries={name: probe_library(name, header, symbol, cxx) for name, header, symbol in libraries},
        cross=cross,
    )


# Minor-version compatibility holds within a CUDA major release from 11 on.
_MINOR_COMPATIBLE_MAJORS = frozenset({11, 12, 13})


def cuda_mismatch(toolkit_version: str, torch_cuda: str) -> str | None:
    """Why a toolkit cannot build extensions for this torch, or None when it can."""
    try:
        toolkit, built = Version(toolkit_version), Version(torch_cuda)
    except InvalidVersion:
        return f"cannot compare CUDA versions {toolkit_version!r} and {torch_cuda!r}"
    if toolkit.major == built.major and (
        toolkit.major in _MINOR_COMPATIBLE_MAJORS or toolkit.minor == built.minor
    ):
        return None
    return f"the CUDA toolkit is {toolkit_version} but torch was built with CUDA {torch_cuda}"


def check_cuda_versions(toolkit_version: str, torch_cuda: str, env: Mapping[str, str]) -> str | None:
    """Raise on a mismatch unless DS_SKIP_CUDA_CHECK=1; then return it as a warning."""
    problem = cuda_mismatch(toolkit_version, torch_cuda)
    if problem is None:
        return None
    if env.get(settings.SKIP_CUDA_CHECK.name) == "1":
        return problem + " (ignored: DS_SKIP_CUDA_CHECK=1)"
    raise ToolchainError(
        problem,
        hint=f"install a CUDA {torch_cuda.split('.')[0]}.x toolkit or a torch built for CUDA "
        f"{toolkit_version}, or set DS_SKIP_CUDA_CHECK=1 to build anyway",
    )
