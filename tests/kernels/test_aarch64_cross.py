"""The CPU ops on aarch64, checked from an x86 machine: cross-compiled, then run under qemu.

There is no aarch64 torch here, so ``tests/kernels/csrc/simd_check.cpp`` runs the optimizer
kernel bodies and their storage conversions without it: at every instruction set the CPU
offers, against an independent scalar reference, on sizes that are not multiples of any
vector width. It is

* cross-compiled with aarch64-linux-gnu-g++ and the ops' own compile flags (no -march), and run
  under qemu-aarch64 on a CPU with SVE (``max``; scalar, NEON and SVE run, at the default and at
  a 128-bit vector length) and on one without (``cortex-a57``; scalar and NEON run);
* compiled and run natively, so the driver itself is checked against this machine's paths;
* and each CPU op's source is cross-compiled with -fsyntax-only against torch's headers, which
  are the same on every architecture but for Python's pyconfig.h (x86-64's is used: both are
  LP64 and little-endian, which is all that matters for syntax).

Every compile starts at once in a module fixture, as many at a time as there are cores.
Needs ``apt-get install g++-aarch64-linux-gnu qemu-user`` (scripts/system-deps.sh).
"""

from __future__ import annotations

import os
import platform
import shutil
import subprocess
import sys
import sysconfig
import time
from collections.abc import Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import pytest
import torch
from torch.utils.cpp_extension import include_paths

from op_builder import get_builder
from op_builder.context import OpFlags, resolve_context
from op_builder.plan import probe_host

REPO = Path(__file__).resolve().parents[2]
DRIVER = REPO / "tests" / "kernels" / "csrc" / "simd_check.cpp"
CROSS_CXX = shutil.which("aarch64-linux-gnu-g++")
QEMU = shutil.which("qemu-aarch64") or shutil.which("qemu-aarch64-static")
SYSROOT = Path("/usr/aarch64-linux-gnu")  # Debian's aarch64 libc, for qemu's -L
NATIVE_CXX = shutil.which("g++")
HOST_LIBAIO = Path("/usr/include/libaio.h")
SOURCE_OPS = ("cpu_adam", "cpu_adagrad", "cpu_lion", "async_io")

needs_cross = pytest.mark.skipif(
    CROSS_CXX is None, reason="no aarch64 cross compiler (apt-get install g++-aarch64-linux-gnu)"
)
needs_qemu = pytest.mark.skipif(
    QEMU is None or not SYSROOT.is_dir(),
    reason="qemu-aarch64 or the aarch64 libc is missing (apt-get install qemu-user g++-aarch64-linux-gnu)",
)


@dataclass(frozen=True)
class Compiled:
    command: tuple[str, ...]
    returncode: int
    output: str
    seconds: float

    def check(self) -> None:
        assert self.returncode == 0, f"{' '.join(self.command)}\n{self.output}"


def compile_(command: Sequence[str]) -> Compiled:
    start = time.perf_counter()
    done = subprocess.run(command, capture_output=True, text=True, timeout=300)
    return Compiled(tuple(command), done.returncode, done.stdout + done.stderr, time.perf_counter() - start)


def op_flags(op: str) -> OpFlags:
    """The flags a CPU build of ``op`` gets here, as ``python -m op_builder flags`` reports them."""
    env = {**os.environ, "DS_ACCELERATOR": "cpu"}
    return get_builder(op).flags(resolve_context(env, probe_host(env)))


def syntax_command(cxx: str, op: str, flags: OpFlags, extra_includes: Sequence[Path]) -> list[str]:
    """What torch's CppExtension compiles ``op`` with, less the output: its defines and includes."""
    abi = int(torch._C._GLIBCXX_USE_CXX11_ABI)
    command = [
        cxx,
        "-fsyntax-only",
        *flags.cxx,
        f"-DTORCH_EXTENSION_NAME={op}",
        f"-D_GLIBCXX_USE_CXX11_ABI={abi}",
    ]
    command += [f"-I{d}" for d in (*flags.include_dirs, *extra_includes)]
    for d in (*include_paths(), sysconfig.get_paths()["include"]):
        command += ["-isystem", d]
    return [*command, *flags.sources]


@pytest.fixture(scope="module")
def builds(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Future[Compiled]]]:
    """Every compile of this module, started at once (the longest first); keyed by what it builds."""
    out = tmp_path_factory.mktemp("aarch64")
    adam = op_flags("cpu_adam")
    driver = [*adam.cxx, *(f"-I{d}" for d in adam.include_dirs), f"-I{DRIVER.parent}", str(DRIVER)]
    jobs: dict[str, list[str]] = {}
    if CROSS_CXX is not None:
        # Only libaio.h from the host's include dir: the rest of /usr/include is x86's libc.
        aio_include = out / "aio-include"
        if HOST_LIBAIO.is_file():
            aio_include.mkdir()
            shutil.copy(HOST_LIBAIO, aio_include)
            jobs["syntax async_io"] = syntax_command(
                CROSS_CXX, "async_io", op_flags("async_io"), [aio_include]
            )
        jobs["driver aarch64"] = [CROSS_CXX, *driver, "-o", str(out / "simd_check_aarch64")]
    if NATIVE_CXX is not None:
        jobs["driver native"] = [NATIVE_CXX, *driver, "-o", str(out / "simd_check_native")]
    if CROSS_CXX is not None:
        for op in SOURCE_OPS[:3]:
            jobs[f"syntax {op}"] = syntax_command(CROSS_CXX, op, op_flags(op), [])
    with ThreadPoolExecutor(max_workers=os.cpu_count() or 2) as pool:
        futures = {key: pool.submit(compile_, command) for key, command in jobs.items()}
        yield futures
        for future in futures.values():
            future.cancel()


def built(builds: dict[str, Future[Compiled]], key: str) -> Path:
    compiled = builds[key].result()
    compiled.check()
    return Path(compiled.command[compiled.command.index("-o") + 1])


def run_driver(command: Sequence[str]) -> str:
    # OpenMP threads that spin while they wait are slow under emulation beside the compiles.
    env = {**os.environ, "OMP_WAIT_POLICY": "passive"}
    done = subprocess.run(command, capture_output=True, text=True, timeout=300, env=env)
    output = done.stdout + done.stderr
    assert done.returncode == 0 and "\nPASS: " in output, f"{' '.join(command)} failed:\n{output}"
    return output


def native_levels() -> str:
    """The levels this CPU offers, from /proc/cpuinfo, independently of the kernels' own probe."""
    features: set[str] = set()
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith(("flags", "Features")):  # x86, aarch64
            features.update(line.split(":", 1)[1].split())
            break
    if platform.machine() in ("aarch64", "arm64"):
        return "scalar neon sve" if "sve" in features else "scalar neon"
    if "avx512f" in features:
        return "scalar avx2 avx512"
    return "scalar avx2" if {"avx2", "fma", "f16c"} <= features else "scalar"


@pytest.mark.skipif(NATIVE_CXX is None, reason="no g++ (apt-get install g++)")
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/cpuinfo")
def test_driver_passes_natively(builds: dict[str, Future[Compiled]]) -> None:
    output = run_driver([str(built(builds, "driver native"))])
    assert f"\nran: {native_levels()}\n" in output, output


@needs_cross
@needs_qemu
@pytest.mark.parametrize(
    ("cpu", "levels", "best"),
    [
        ("max", "scalar neon sve", "sve"),  # qemu's default model: SVE at its default length
        ("max,sve-default-vector-length=16", "scalar neon sve", "sve (128-bit vectors)"),
        ("cortex-a57", "scalar neon", "neon"),  # ARMv8.0: NEON, no SVE
    ],
)
def test_driver_passes_on_aarch64(
    builds: dict[str, Future[Compiled]], cpu: str, levels: str, best: str
) -> None:
    binary = built(builds, "driver aarch64")
    output = run_driver([str(QEMU), "-L", str(SYSROOT), "-cpu", cpu, str(binary)])
    assert f"best level {best}" in output and f"\nran: {levels}\n" in output, output


@needs_cross
@pytest.mark.parametrize("op", SOURCE_OPS)
def test_op_source_compiles_for_aarch64(builds: dict[str, Future[Compiled]], op: str) -> None:
    key = f"syntax {op}"
    if key not in builds:
        pytest.skip(f"{HOST_LIBAIO} is missing (apt-get install libaio-dev)")
    builds[key].result().check()
