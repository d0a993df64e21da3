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

``CUDA_VISIBLE_DEVICES`` picks and orders the GPUs CUDA shows. NVML shows every GPU, in an order
of its own (not promised to be the PCI bus order, nor to stay the same across reboots: NVML's
documentation says to look devices up by PCI id or UUID). ``select_visible`` reads the variable
as torch's model of CUDA's parser does (``torch.cuda._parse_visible_devices``, the reading
torch's own NVML-based device count uses), numbers the GPUs by PCI bus id for an index, and
answers None where the mapping is uncertain (MIG instances, an index under CUDA's default
fastest-first order on a machine whose GPUs differ, an entry torch's parser cannot read), so
that the caller asks CUDA itself rather than guess.
"""

from __future__ import annotations

import ctypes
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import cast

from op_builder import settings

_NVML_SUCCESS = 0
_TEXT_BUFFER = 96  # NVML_DEVICE_NAME_V2_BUFFER_SIZE and NVML_DEVICE_UUID_V2_BUFFER_SIZE


@dataclass(frozen=True)
class NvmlGpu:
    name: str  # as CUDA names it too: "NVIDIA H100 80GB HBM3"
    capability: tuple[int, int]
    uuid: str  # "GPU-5c1f...", what CUDA_VISIBLE_DEVICES may name
    pci_bus_id: tuple[int, int, int]  # (domain, bus, device): CUDA_DEVICE_ORDER=PCI_BUS_ID sorts by it


def _leading_integer(entry: str) -> int | None:
    """The integer an entry starts with, as torch's ``_strtoul`` reads it: an optional sign at
    the start, then digits; -1 where it starts with neither (which ends the list). None where
    torch's own parser fails on it (a sign with no digit after it: ``+``, ``-x``)."""
    end = 0
    while end < len(entry) and (entry[end].isdigit() or (end == 0 and entry[end] in "+-")):
        end += 1
    if end == 0:
        return -1
    try:
        return int(entry[:end])
    except ValueError:
        return None


def parse_visible(visible: str) -> list[int] | list[str] | None:
    """``CUDA_VISIBLE_DEVICES=visible`` as torch models CUDA's parser: GPU ordinals, or UUIDs
    (or prefixes of them), or None where that model itself fails.

    A list that starts with ``GPU-`` (or ``MIG-``) is a list of those, read up to the first
    entry that does not start so (``GPU-aaaa,1`` is ``GPU-aaaa`` alone; entries are not
    stripped). Any other list is of ordinals, each entry stripped and read like C's ``strtoul``
    (``1gpu2`` is 1, ``+1`` is 1), up to the first that is negative or not a number
    (``0,GPU-cccc`` is 0 alone; `` GPU-aaaa`` with its leading space is none). A repeated entry
    makes the list empty."""
    if visible.startswith(("GPU-", "MIG-")):
        prefix = visible[:4]
        names: list[str] = []
        for entry in visible.split(","):
            if entry in names:
                return []
            if not entry.startswith(prefix):
                break
            names.append(entry)
        return names
    ordinals: list[int] = []
    for entry in visible.split(","):
        ordinal = _leading_integer(entry.strip())
        if ordinal is None:
            return None
        if ordinal in ordinals:
            return []
        if ordinal < 0:
            break
        ordinals.append(ordinal)
    return ordinals


def _by_uuid(gpus: Sequence[NvmlGpu], names: list[str]) -> list[NvmlGpu]:
    """The GPUs ``names`` name (a unique UUID prefix is enough), up to the first that names
    none or several; none if one GPU is named twice (torch's ``_transform_uuid_to_ordinals``)."""
    chosen: list[NvmlGpu] = []
    for name in names:
        matches = [gpu for gpu in gpus if gpu.uuid.startswith(name)]
        if len(matches) != 1:
            break
        if matches[0] in chosen:
            return []
        chosen.append(matches[0])
    return chosen


def select_visible(
    gpus: Sequence[NvmlGpu], visible: str | None, device_order: str | None
) -> list[NvmlGpu] | None:
    """The GPUs CUDA shows under ``CUDA_VISIBLE_DEVICES=visible``, from NVML's records (in any
    order), or None where the mapping is uncertain.

    Unset shows every GPU (here in PCI bus order). Otherwise the list is read by
    ``parse_visible``; ordinals past the last GPU end it. An ordinal counts in CUDA's order,
    the PCI bus order only with ``CUDA_DEVICE_ORDER=PCI_BUS_ID``: otherwise (fastest first) it
    maps to one only where every GPU is alike, when which one it names does not matter.
    """
    by_bus = sorted(gpus, key=lambda gpu: gpu.pci_bus_id)
    if visible is None:
        return by_bus
    entries = parse_visible(visible)
    if entries is None:
        return None  # torch's model of CUDA's parser fails on this list
    if entries and isinstance(entries[0], str):
        names = entries
        if names[0].startswith("MIG-"):
            return None  # MIG instances are not NVML devices of their own here
        return _by_uuid(gpus, names)
    chosen: list[NvmlGpu] = []
    for ordinal in cast(list[int], entries):
        if ordinal >= len(by_bus):
            break
        chosen.append(by_bus[ordinal])
    if chosen and device_order != "PCI_BUS_ID" and len({(g.name, g.capability) for g in gpus}) > 1:
        return None
    return chosen


class _PciInfo(ctypes.Structure):
    """``nvmlPciInfo_t`` as ``nvmlDeviceGetPciInfo_v3`` fills it (nvml.h, layout since CUDA 9)."""

    _fields_ = [
        ("busIdLegacy", ctypes.c_char * 16),
        ("domain", ctypes.c_uint),
        ("bus", ctypes.c_uint),
        ("device", ctypes.c_uint),
        ("pciDeviceId", ctypes.c_uint),
        ("pciSubSystemId", ctypes.c_uint),
        ("busId", ctypes.c_char * 32),
    ]


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
        pci = _PciInfo()
        if nvml.nvmlDeviceGetPciInfo_v3(handle, ctypes.byref(pci)) != _NVML_SUCCESS:
            return None
        name = _text(nvml.nvmlDeviceGetName, handle)
        uuid = _text(nvml.nvmlDeviceGetUUID, handle)
        if name is None or uuid is None:
            return None
        gpus.append(NvmlGpu(name, (major.value, minor.value), uuid, (pci.domain, pci.bus, pci.device)))
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
