from __future__ import annotations

from op_builder.builder import SystemLibrary
from op_builder.ops._base import BuiltinCPUOp
from op_builder.ops._cpu_common import OPENMP_RUNTIME_PACKAGES

LIBAIO = SystemLibrary(
    name="aio",
    header="libaio.h",
    symbol="io_submit",
    build_packages=("libaio-dev",),
    # Debian 12 ships libaio1; Debian 13 / Ubuntu 24.04 renamed it libaio1t64.
    runtime_packages=("libaio1",),
)


class AsyncIOBuilder(BuiltinCPUOp):
    name = "async_io"
    description = "Asynchronous tensor reads and writes to files through Linux AIO (libaio)"
    sources = ("aio/async_io.cpp",)
    system_libraries = (LIBAIO,)
    runtime_packages = OPENMP_RUNTIME_PACKAGES
