"""The async_io op: tensor reads and writes through Linux AIO (libaio)."""

from __future__ import annotations

from kernels._build_common import INCLUDE_DIRS, OPENMP_RUNTIME_PACKAGES
from op_builder.builder import CPUOpBuilder, SystemLibrary

# Where this family's ops come among ours wherever ops are listed (op_builder.registry): CPU ops
# first, then GPU ops, each by family rank, lowest first, then in the order defined here.
FAMILY_RANK = 20

LIBAIO = SystemLibrary(
    name="aio",
    header="libaio.h",
    symbol="io_submit",
    build_packages=("libaio-dev",),
    # Debian 12 ships libaio1; Debian 13 / Ubuntu 24.04 renamed it libaio1t64.
    runtime_packages=("libaio1",),
)


class AsyncIOBuilder(CPUOpBuilder):
    name = "async_io"
    description = "Asynchronous tensor reads and writes to files through Linux AIO (libaio)"
    sources = ("csrc/async_io.cpp",)
    include_dirs = INCLUDE_DIRS
    system_libraries = (LIBAIO,)
    runtime_packages = OPENMP_RUNTIME_PACKAGES
    selftest = "kernels.aio.selftest:run_async_io"
    # Its binding is Python's C API alone (no torch header or library): the stable build's limited
    # API makes it one module for every torch from 2.10 and every CPython from 3.10.
    stable_abi = "2.10"
