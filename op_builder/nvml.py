"""The visible NVIDIA GPUs, read through NVML (the driver's management library), which creates
no CUDA context and does not initialise the CUDA driver in this process.

Why: once a process has initialised CUDA, a child it forks cannot use the GPU ("CUDA error:
initialization error"; torch refuses outright with "Cannot re-initialize CUDA in forked
subprocess"). Loading an op asks which GPUs are here (the preflight at load, a ``native`` arch
list); asking torch would initialise CUDA at import time of the user's model code and break
every ``fork()`` after it (DataLoader workers, multiprocessing pools), as DeepSpeed's users
found (deepspeed#7918). NVML answers the same question (name and compute capability) without
touching CUDA, which is also how torch itself counts GPUs under
``PYTORCH_NVML_BASED_CUDA_CHECK=1``.

``CUDA_VISIBLE_DEVICES`` picks and orders the GPUs CUDA shows; NVML shows every GPU, in PCI bus
order. ``select_visible`` maps one onto the other where that is certain and answers None where
it is not (MIG instances, an index under CUDA's default fastest-first order on a machine whose
GPUs differ, a duplicate), so that the caller asks CUDA itself rather than guess.
"""

from __future__ import annotations

import ctypes
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from op_builder import settings

_NVML_SUCCESS = 0
_TEXT_BUFFER = 96  # NVML_DEVICE_NAME_V2_BUFFER_SIZE and NVML_DEVICE_UUID_V2_BUFFER_SIZE
_LEADING_INDEX = re.compile(r"\s*(\d+)")


@dataclass(frozen=True)
class NvmlGpu:
    name: str  # as CUDA names it too: "NVIDIA H100 80GB HBM3"
    capability: tuple[int, int]
    uuid: str  # "GPU-5c1f...", what CUDA_VISIBLE_DEVICES may name


def select_visible(
    gpus: Sequence[NvmlGpu], visible: str | None, device_order: str | None
) -> list[NvmlGpu] | None:
    """The GPUs CUDA shows under ``CUDA_VISIBLE_DEVICES=visible``, from NVML's list (PCI bus
    order), or None where the mapping is uncertain.

    CUDA's rules: unset shows every GPU; the list is read up to its first entry that names no
    GPU (so "" and "-1" show none); an entry is an index or a GPU UUID, a unique prefix of one
    enough. An index counts in CUDA's order, PCI bus order only with
    ``CUDA_DEVICE_ORDER=PCI_BUS_ID``: otherwise (fastest first) it maps to NVML's index only
    where every GPU is alike, when which one it names does not matter.
    """
    if visible is None:
        return list(gpus)
    chosen: list[NvmlGpu] = []
    for entry in (part.strip() for part in visible.split(",")):
        if entry.startswith("MIG-"):
            return None  # MIG instances are not NVML devices of their own here
        if entry.startswith("GPU-"):
            matches = [gpu for gpu in gpus if gpu.uuid.startswith(entry)]
            if len(matches) != 1:
                break
            gpu = matches[0]
        else:
            index = _LEADING_INDEX.match(entry)
            if index is None or int(index.group(1)) >= len(gpus):
                break
            if device_order != "PCI_BUS_ID" and len({(g.name, g.capability) for g in gpus}) > 1:
                return None
            gpu = gpus[int(index.group(1))]
        if gpu in chosen:
            return None  # CUDA's handling of a repeated GPU is not documented
        chosen.append(gpu)
    return chosen


def _text(read: object, handle: ctypes.c_void_p) -> str | None:
    buffer = ctypes.create_string_buffer(_TEXT_BUFFER)
    if read(handle, buffer, ctypes.c_uint(_TEXT_BUFFER)) != _NVML_SUCCESS:  # type: ignore[operator]
        return None
    return buffer.value.decode(errors="replace")


def _read_all(nvml: ctypes.CDLL) -> list[NvmlGpu] | None:
    count = ctypes.c_uint(0)
    if nvml.nvmlDeviceGetCount_v2(ctypes.byref(count)) != _NVML_SUCCESS:
        return None
    gpus: list[NvmlGpu] = []
    for index in range(count.value):
        handle = ctypes.c_void_p()
        major, minor = ctypes.c_int(0), ctypes.c_int(0)
        if nvml.nvmlDeviceGetHandleByIndex_v2(ctypes.c_uint(index), ctypes.byref(handle)) != _NVML_SUCCESS:
            return None
        capability = nvml.nvmlDeviceGetCudaComputeCapability(handle, ctypes.byref(major), ctypes.byref(minor))
        if capability != _NVML_SUCCESS:
            return None
        name = _text(nvml.nvmlDeviceGetName, handle)
        uuid = _text(nvml.nvmlDeviceGetUUID, handle)
        if name is None or uuid is None:
            return None
        gpus.append(NvmlGpu(name, (major.value, minor.value), uuid))
    return gpus


def all_gpus() -> list[NvmlGpu] | None:
    """Every NVIDIA GPU on the machine, in NVML's order, or None where NVML cannot say (no
    driver library, as on a machine without an NVIDIA GPU or a container without the driver's
    utility libraries, or any NVML error)."""
    try:
        nvml = ctypes.CDLL("libnvidia-ml.so.1")
    except OSError:
        return None
    try:
        if nvml.nvmlInit_v2() != _NVML_SUCCESS:
            return None
    except AttributeError:  # a library too old for the v2 entry points
        return None
    try:
        return _read_all(nvml)
    except AttributeError:
        return None
    finally:
        nvml.nvmlShutdown()


def visible_gpus(env: Mapping[str, str]) -> list[NvmlGpu] | None:
    """The GPUs CUDA would show this process, read without initialising CUDA, or None where
    NVML cannot say or the mapping is uncertain (then ask CUDA)."""
    gpus = all_gpus()
    if gpus is None:
        return None
    return select_visible(gpus, env.get(settings.VISIBLE_DEVICES.name), env.get(settings.DEVICE_ORDER.name))
