"""A CUDA home for the 13.x stand-ins, in a build context: this machine's toolkit, or NVIDIA's
compiler wheels of one release laid out as an installed toolkit is.

NVIDIA's CUDA 13.x wheels hold the whole compiler (nvcc, cudafe++, fatbinary, nvlink, ptxas,
cicc in nvidia-nvvm, the headers in nvidia-cuda-crt/-runtime/-cccl), so no registry is needed.
The 12.x wheels hold only ptxas (CUDA 12.4 comes from Debian's packages: debian_cuda).
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path

from imagegen import settings
from imagegen.building.standins.docker_cli import log_tail, run_logged
from imagegen.errors import BuildFailedError
from op_builder import archs

REPO = Path(__file__).resolve().parents[3]


def host_cuda_home(env: Mapping[str, str]) -> Path:
    return Path(env.get(settings.CUDA_HOME.name) or "/usr/local/cuda")


def host_cuda_version(home: Path) -> str | None:
    """X.Y of the toolkit at ``home``: its version.json (an installer's toolkit), else the
    ``CUDART_VERSION`` its headers define (one laid out from wheels has no version.json); None
    where there is no toolkit."""
    try:
        data = json.loads((home / "version.json").read_text())
        found = re.match(r"(\d+\.\d+)", str(data["cuda"]["version"]))
        if found:
            return found.group(1)
    except (OSError, ValueError, KeyError, TypeError):
        pass
    try:
        return version_from_header((home / "include" / "cuda_runtime_api.h").read_text(errors="replace"))
    except OSError:
        return None


def version_from_header(text: str) -> str | None:
    """``#define CUDART_VERSION 12040`` -> "12.4" (major * 1000 + minor * 10)."""
    found = re.search(r"^\s*#\s*define\s+CUDART_VERSION\s+(\d+)", text, re.MULTILINE)
    if found is None:
        return None
    number = int(found.group(1))
    return f"{number // 1000}.{number % 1000 // 10}"


def copy_host(home: Path, ctx: Path, log: Path) -> str:
    """``home`` copied to ctx/cuda, its libcudart to ctx/cudart; returns its X.Y."""
    if not (home / "bin" / "nvcc").exists():
        raise BuildFailedError(f"no CUDA toolkit at {home}", hint="set CUDA_HOME to one")
    version = host_cuda_version(home) or ""
    # -L: /usr/local/cuda is usually a symlink to the versioned directory, and links inside it
    # may be absolute; cp keeps modes and times as the image had them.
    run_logged(["cp", "-aL", str(home), str(ctx / "cuda")], log, f"copying {home}")
    (ctx / "cudart").mkdir()
    for lib in sorted((home / "lib64").glob("libcudart.so.*")):
        shutil.copy2(lib, ctx / "cudart" / lib.name, follow_symlinks=False)
    return version


def standin_pip(env: Mapping[str, str]) -> str:
    """The Python whose pip fetches the wheels: STANDIN_PYTHON, else the checkout's .venv, else
    this interpreter. It uses pip's configured index."""
    if env.get(settings.STANDIN_PYTHON.name):
        return env[settings.STANDIN_PYTHON.name]
    venv = REPO / ".venv" / "bin" / "python"
    return str(venv) if venv.exists() else sys.executable


def _platform_flags(machine: str) -> list[str]:
    # Every manylinux tag NVIDIA has used for these wheels; pip matches exact tags with --platform.
    tags = (
        f"manylinux_2_28_{machine}",
        f"manylinux_2_27_{machine}",
        f"manylinux_2_17_{machine}",
        f"manylinux2014_{machine}",
    )
    return [flag for tag in tags for flag in ("--platform", tag)]


def layout_wheels(version: str, machine: str, ctx: Path, log: Path, env: Mapping[str, str]) -> str:
    """NVIDIA's wheels of the newest ``version`` release (the cuda-toolkit meta package pins
    one component set per release), whose nvidia/cuXY tree is already a CUDA home: bin/, include/,
    lib/, nvvm/. Only the symlinks an installed toolkit has are added. Returns the full release."""
    py = standin_pip(env)
    wheels = ctx / "wheels"
    common = [
        py,
        "-m",
        "pip",
        "install",
        "--quiet",
        "--no-compile",
        "--target",
        str(wheels),
        "--only-binary=:all:",
        *_platform_flags(machine),
    ]
    try:
        run_logged(
            [*common, "--no-deps", f"cuda-toolkit=={version}.*"],
            log,
            f"pip install cuda-toolkit=={version}.*",
            env,
        )
    except BuildFailedError as exc:
        raise BuildFailedError(
            f"no cuda-toolkit {version}.* on pip's index; the log ends:\n{log_tail(log, 20)}",
            hint=f"is CUDA {version} released? (`pip config list` shows the index used)",
        ) from exc
    meta = sorted(wheels.glob("cuda_toolkit-*.dist-info"))
    full = meta[0].name.removeprefix("cuda_toolkit-").removesuffix(".dist-info")
    # The components pinned by that exact release (the meta package's extras).
    run_logged(
        [*common, "--upgrade", f"cuda-toolkit[nvcc,cccl,cudart]=={full}"],
        log,
        f"pip install cuda-toolkit[nvcc,cccl,cudart]=={full}",
        env,
    )
    major = version.split(".")[0]
    home = wheels / "nvidia" / f"cu{major}"
    if not (home / "bin" / "nvcc").exists():
        raise BuildFailedError(f"the CUDA {full} wheels hold no bin/nvcc (under nvidia/cu{major})")
    cuda = ctx / "cuda"
    home.rename(cuda)
    lib = cuda / "lib"
    for name in ("libcudart.so", "libnvvm.so"):
        for real in sorted(lib.glob(name + ".*")):
            if not (lib / name).exists():
                (lib / name).symlink_to(real.name)
    (cuda / "lib64").symlink_to("lib")
    (ctx / "cudart").mkdir()
    for real in sorted(lib.glob("libcudart.so.*")):
        shutil.copy2(real, ctx / "cudart" / real.name, follow_symlinks=False)
    shutil.rmtree(wheels)
    return full


def arch_table_disagreement(home: Path, version: str) -> str | None:
    """Whether op_builder's arch table says what this toolkit's nvcc itself compiles (``nvcc
    --list-gpu-code``), in words where not; None when they agree, or when this machine cannot
    run that nvcc (another machine's wheels)."""
    try:
        done = subprocess.run(
            [str(home / "bin" / "nvcc"), "--list-gpu-code"],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
    except OSError:  # an aarch64 nvcc on an x86-64 machine without binfmt: nothing to compare
        return None
    if done.returncode != 0:
        return None
    return archs.table_disagreement(version, done.stdout)
