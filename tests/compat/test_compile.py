"""The compatibility check's compiles: a source that uses an API torch lacks fails, one that
uses it right compiles, against a real torch release's headers read out of its wheel.

The headers come from this machine's pip index (cached under ~/.cache/imagegen/torch-headers
after the first run); without an index the tests are skipped, saying so.
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path
from typing import ClassVar

import pytest

from imagegen.compat import headers, host
from imagegen.errors import UserFacingError
from op_builder.builder import CPUOpBuilder
from op_builder.plan import probe_host

TORCH = "2.15.0"  # the newest the catalog admits: C++20, op_builder's choice for it

# Light on purpose (c10 only, seconds to compile): the check is the same for a binding.
GOOD = """#include <c10/core/ScalarType.h>
const char* name_of_float() { return c10::toString(c10::ScalarType::Float); }
"""
# An API torch never had: what a release that moved or dropped one looks like to the compiler.
BROKEN = GOOD.replace("ScalarType::Float", "ScalarType::ScalarTypeTorchNeverHad")


@pytest.fixture(scope="module")
def include() -> Path:
    if shutil.which("g++") is None:
        pytest.skip("no g++ here (apt-get install g++)")
    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "scripts"))
    from pip_index import pip_index_url

    try:
        return headers.fetch_headers(TORCH, pip_index_url())
    except (OSError, ValueError, UserFacingError) as exc:  # requests' errors are OSErrors
        pytest.skip(f"torch {TORCH}'s headers cannot be had from the package index here: {exc}")


def _op(folder: Path, text: str) -> CPUOpBuilder:
    (folder / "op.cpp").write_text(text)

    class Probe(CPUOpBuilder):
        name: ClassVar[str] = "compat_probe"
        source_root: ClassVar[Path | None] = folder
        sources: ClassVar[tuple[str, ...]] = ("op.cpp",)
        include_dirs: ClassVar[tuple[str, ...]] = ()

    return Probe()


@pytest.mark.parametrize(("text", "ok"), [(GOOD, True), (BROKEN, False)], ids=["good", "broken"])
def test_a_source_compiles_against_torch_headers_or_fails_naming_the_api(
    include: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, text: str, ok: bool
) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    jobs = host.jobs_for(TORCH, include, {"compat_probe": _op(tmp_path, text)}, probe_host({}), None)
    assert len(jobs) == 1
    assert "-std=c++20" in jobs[0].command  # op_builder's standard for torch 2.14 and later
    outcome = host.run_job(jobs[0])
    assert outcome.ok is ok, outcome.output
    if not ok:
        assert "ScalarTypeTorchNeverHad" in outcome.output
    # The result is cached, and an edit to the source is a miss.
    assert host.run_job(jobs[0]).cached
    (tmp_path / "op.cpp").write_text(text + "\n// edited\n")
    assert not host.cached(jobs[0], {"XDG_CACHE_HOME": str(tmp_path / "cache")})


BROKEN_KERNEL = """#include <cuda_runtime.h>
__global__ void scale(float* x, float a) { x[threadIdx.x] *= a; }
void launch(float* x) { scale<<<1, 32>>>(x, 2.0f, cudaNoSuchThingInAnyToolkit); }
"""


def test_device_code_that_does_not_compile_fails_the_toolkit(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from imagegen.compat import device
    from op_builder.builder import CUDAOpBuilder

    toolchain = probe_host({})
    if toolchain.cuda is None:
        pytest.skip("no nvcc here")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    (tmp_path / "k.cu").write_text(BROKEN_KERNEL)

    class Probe(CUDAOpBuilder):
        name: ClassVar[str] = "compat_probe_gpu"
        source_root: ClassVar[Path | None] = tmp_path
        sources: ClassVar[tuple[str, ...]] = ("k.cu",)
        include_dirs: ClassVar[tuple[str, ...]] = ()

    toolkit = device.Toolkit("cuda", toolchain.cuda.version, "this machine", toolchain.cuda.nvcc)
    jobs = device.jobs_for(toolkit, "c++17", {"compat_probe_gpu": Probe()}, toolchain)
    outcome = host.run_job(jobs[0])
    assert not outcome.ok and "cudaNoSuchThingInAnyToolkit" in outcome.output
    (tmp_path / "k.cu").write_text(BROKEN_KERNEL.replace(", cudaNoSuchThingInAnyToolkit", ""))
    assert host.run_job(jobs[0]).ok
