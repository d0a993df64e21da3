"""The device questions every part of op_builder asks, in one module that imports nothing of
op_builder but the leaves ``nvml`` and ``settings``: which CUDA GPUs are here, is there a GPU for
torch, and if not, why, in words.

Kept apart so that the self-test harness and the preflight check both ask it here, rather than
one reaching into the other (which closed an import circle through the registry).
"""

from __future__ import annotations

from typing import Any


def no_gpu_reason() -> str:
    """Why there is no GPU to run on, in words (for a skip, or a refused ``--device cuda``)."""
    import torch  # deferred: op_builder never imports torch at module level

    build = torch.version.cuda or torch.version.hip
    if build is None:
        return f"needs a GPU: torch {torch.__version__} is a CPU build"
    return f"needs a GPU: none is visible to torch {torch.__version__}"


def cuda_gpus() -> list[tuple[str, tuple[int, int]]]:
    """Name and compute capability of each CUDA GPU visible to this process; none without torch
    or for a CPU or ROCm build of it.

    Read through NVML while torch has not initialised CUDA, so that loading an op leaves CUDA
    uninitialised and the process can still ``fork()`` children that use the GPU
    (``op_builder.nvml`` says why); from torch where CUDA is already up or NVML cannot say.
    """
    import os

    from op_builder import nvml  # deferred like torch: only a GPU question needs it

    try:
        import torch  # deferred: seconds to import, and only a GPU question needs it
    except ImportError:
        return []
    if torch.version.cuda is None:
        return []
    if not torch.cuda.is_initialized():  # type: ignore[no-untyped-call]
        found = nvml.visible_gpus(os.environ)
        if found is not None:
            return [(gpu.name, gpu.capability) for gpu in found]
    if not torch.cuda.is_available():
        return []
    return [
        (torch.cuda.get_device_name(index), torch.cuda.get_device_capability(index))
        for index in range(torch.cuda.device_count())
    ]


def import_cpp_extension() -> Any:  # a module whose attributes mypy cannot see
    """``torch.utils.cpp_extension``, imported without initialising CUDA.

    Its import asks ``torch.cuda.is_available()`` (to warn when no runtime is found), which by
    default calls ``cudaGetDeviceCount`` and so initialises the driver: a JIT build would leave
    the process unable to fork children that use the GPU. With ``PYTORCH_NVML_BASED_CUDA_CHECK=1``
    torch asks NVML instead (falling back to CUDA where NVML fails), so that is set for the
    import alone where the user has not set it, and removed again.
    """
    import importlib
    import os
    import sys

    name = "torch.utils.cpp_extension"
    if name in sys.modules:
        return sys.modules[name]
    from op_builder.settings import NVML_CUDA_CHECK

    switch = NVML_CUDA_CHECK.name
    if switch in os.environ:  # the user's own choice stands
        return importlib.import_module(name)
    os.environ[switch] = "1"
    try:
        return importlib.import_module(name)
    finally:
        os.environ.pop(switch, None)
