"""Fixtures the kernel tests share: the CPU optimizers' code paths and the async_io backends."""

from __future__ import annotations

import platform
from collections.abc import Iterator

import pytest

from kernels import aio
from kernels.optim.cpu import set_simd_level, supported_simd_level
from op_builder import get_builder
from op_builder.errors import OpLoadError
from op_builder.toolchain import probe_library

# This architecture's code paths, weakest first.
LEVELS = (
    ("scalar", "neon", "sve") if platform.machine() in ("aarch64", "arm64") else ("scalar", "avx2", "avx512")
)


@pytest.fixture(autouse=True)
def _auto_simd_after_test() -> Iterator[None]:
    yield
    set_simd_level("auto")


@pytest.fixture(params=[*LEVELS, "fallback"])
def path(request: pytest.FixtureRequest) -> bool:
    """use_kernel for each instruction set this CPU runs, and False for the fallback."""
    name: str = request.param
    if name == "fallback":
        return False
    supported = supported_simd_level()
    if LEVELS.index(name) > LEVELS.index(supported):
        pytest.skip(f"this CPU supports up to {supported}, not {name}")
    set_simd_level(name)  # type: ignore[arg-type]
    return True


@pytest.fixture(scope="session")
def kernel_ready() -> None:
    """Load the async_io op once; skip only where libaio really is absent, otherwise a failed load fails."""
    try:
        get_builder("async_io").load()
    except OpLoadError as exc:
        if probe_library("aio", "libaio.h", "io_submit").ok:
            pytest.fail(f"libaio is installed but the async_io op does not load: {exc.message}")
        pytest.skip(f"async_io op unavailable here: {exc.message}")


@pytest.fixture(params=["kernel", "python"])
def backend(request: pytest.FixtureRequest) -> aio.Backend:
    name: aio.Backend = request.param
    if name == "kernel":
        request.getfixturevalue("kernel_ready")
    return name
