"""Hand-made host descriptions for the pure planner (real values, no probing)."""

from __future__ import annotations

from op_builder.toolchain import Compiler, CudaToolkit, LibraryProbe, RocmToolkit, Toolchain, TorchBuild


def host(
    torch_cuda: str | None = None,
    toolkit: str | None = None,
    rocm: str | None = None,
    torch_hip: str | None = None,
    cxx: bool = True,
    libaio: bool = True,
) -> Toolchain:
    return Toolchain(
        torch=TorchBuild("2.5.1", torch_cuda, torch_hip),
        cuda=CudaToolkit("/usr/local/cuda", "/usr/local/cuda/bin/nvcc", toolkit) if toolkit else None,
        rocm=RocmToolkit("/opt/rocm", "/opt/rocm/bin/hipcc", rocm) if rocm else None,
        cxx=Compiler("/usr/bin/c++", "12.2.0") if cxx else None,
        ninja="/usr/bin/ninja",
        libraries={"aio": LibraryProbe("aio", libaio, None if libaio else "header <libaio.h> not found")},
    )
