"""``op_builder.nvml``: which of NVML's GPUs CUDA shows under CUDA_VISIBLE_DEVICES, by torch's
model of CUDA's parser (``torch.cuda._parse_visible_devices``, the reference here: the tests set
the variable and call it), with ordinals counted in PCI bus order, and None wherever the mapping
is not certain, so that the caller asks CUDA instead of guessing. The reading of NVML itself
runs on a GPU (tests/gpu/test_gpu_fork.py compares it with torch's answer); here it reads a fake
library."""

from __future__ import annotations

import ctypes
from typing import Any

import pytest
import torch

from op_builder import nvml
from op_builder.nvml import NvmlGpu, parse_visible, select_visible

H100 = NvmlGpu("NVIDIA H100 80GB HBM3", (9, 0), "GPU-aaaa1111-0000-0000-0000-000000000000", (0, 0x1A, 0))
H100_B = NvmlGpu("NVIDIA H100 80GB HBM3", (9, 0), "GPU-bbbb2222-0000-0000-0000-000000000000", (0, 0x3B, 0))
A100 = NvmlGpu("NVIDIA A100-SXM4-80GB", (8, 0), "GPU-cccc3333-0000-0000-0000-000000000000", (0, 0x5E, 0))
ALIKE = [H100, H100_B]
MIXED = [H100, A100]

# Lists on which a hand-written reading and torch's may part: mixed entries, spaces, signs,
# repeats, strtoul's reading of trailing text, and torch's own failures (a sign alone).
ODD_LISTS = [
    "GPU-aaaa,1",
    "0,GPU-cccc",
    "1,GPU-aaaa,0",
    " 0",
    " 0 , 1 ",
    " GPU-aaaa",
    "GPU-aaaa, GPU-bbbb",
    "GPU-aaaa,GPU-aaaa",
    "GPU-aaaa,GPU-aaaa1111",
    "+1",
    "1,+0",
    "-0",
    "1gpu2,2ampere",
    "0, 1, 2, -1, 3",
    "0,1,0",
    "0,x,1",
    "0,7,1",
    "",
    "-1",
    ",0",
    "GPU-",
    "MIG-1f2e3d4c,MIG-5a6b",
    "+",
    "0,-x",
]


def _torch_parse(monkeypatch: pytest.MonkeyPatch, visible: str) -> list[int] | list[str] | None:
    """torch's reading of CUDA_VISIBLE_DEVICES=visible; None where torch's parser raises."""
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", visible)
    try:
        return torch.cuda._parse_visible_devices()
    except ValueError:
        return None


@pytest.mark.parametrize("visible", ODD_LISTS)
def test_the_list_is_read_as_torch_reads_it(monkeypatch: pytest.MonkeyPatch, visible: str) -> None:
    assert parse_visible(visible) == _torch_parse(monkeypatch, visible)


@pytest.mark.parametrize("visible", ODD_LISTS)
def test_as_many_gpus_as_torchs_nvml_count(monkeypatch: pytest.MonkeyPatch, visible: str) -> None:
    """torch's NVML-based device count over the same fake devices (in NVML's order, which is not
    the bus order here): the same number of GPUs, or None where torch cannot count either (-1
    for MIG, its parser's failure)."""
    gpus = [A100, H100_B, H100]
    monkeypatch.setattr(torch.cuda, "_raw_device_uuid_nvml", lambda: [gpu.uuid for gpu in gpus])
    monkeypatch.setattr(torch.cuda, "_raw_device_count_nvml", lambda: len(gpus))
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", visible)
    try:
        count: int | None = torch.cuda._device_count_nvml()
    except ValueError:
        count = None
    ours = select_visible(gpus, visible, "PCI_BUS_ID")
    assert (None if ours is None else len(ours)) == (None if count == -1 else count)


@pytest.mark.parametrize(
    ("visible", "expected"),
    [
        (None, [H100, H100_B]),  # unset: every GPU
        ("", []),  # empty: none
        ("-1", []),  # a negative ordinal ends the list at once
        ("1", [H100_B]),
        ("1,0", [H100_B, H100]),
        (" 0 , 1 ", [H100, H100_B]),
        ("0,7,1", [H100]),  # read up to the first ordinal naming no GPU
        ("0,x,1", [H100]),
        ("+1", [H100_B]),
        ("1gpu2", [H100_B]),  # strtoul reads the leading digits
        ("0,0", []),  # a repeat: no GPU at all
        ("GPU-bbbb", [H100_B]),  # a unique UUID prefix is enough
        ("GPU-bbbb2222-0000-0000-0000-000000000000,GPU-aaaa", [H100_B, H100]),
        ("GPU-aaaa,1", [H100]),  # a UUID list ends at its first entry that is not one
        ("GPU-aaaa,GPU-aaaa1111", []),  # one GPU named twice
        ("0,GPU-bbbb", [H100]),  # an ordinal list ends at its first entry that is not one
        (" GPU-aaaa", []),  # with a space first it is read as an ordinal, and is none
        ("GPU-ffff", []),
        ("GPU-", []),  # a prefix of both names neither
    ],
)
def test_cuda_rules_on_alike_gpus(visible: str | None, expected: list[NvmlGpu]) -> None:
    assert select_visible(ALIKE, visible, None) == expected


@pytest.mark.parametrize(
    "visible",
    [
        "MIG-1f2e3d4c-0000-0000-0000-000000000000",  # a MIG instance: not an NVML device here
        "+",  # torch's parser fails on a sign alone
        "0,-x",
    ],
)
def test_uncertain_lists_are_left_to_cuda(visible: str) -> None:
    assert select_visible(ALIKE, visible, "PCI_BUS_ID") is None


def test_an_index_on_differing_gpus_needs_pci_bus_order() -> None:
    # CUDA's default order is fastest first: index 0 may be either GPU.
    assert select_visible(MIXED, "0", None) is None
    assert select_visible(MIXED, "0", "FASTEST_FIRST") is None
    assert select_visible(MIXED, "1", "PCI_BUS_ID") == [A100]
    # A UUID names one GPU whatever the order; so does leaving the variable unset.
    assert select_visible(MIXED, "GPU-cccc", None) == [A100]
    assert select_visible(MIXED, None, None) == MIXED
    # A list that names no GPU is certain too.
    assert select_visible(MIXED, "-1", None) == []


def test_ordinals_count_in_pci_bus_order_not_nvmls() -> None:
    """NVML's records in an order of NVML's own: CUDA_DEVICE_ORDER=PCI_BUS_ID numbers the GPUs
    by (domain, bus, device), so ordinal 0 is the lowest bus id."""
    far = NvmlGpu("NVIDIA L4", (8, 9), "GPU-dddd4444-0000-0000-0000-000000000000", (1, 0x01, 0))
    records = [A100, far, H100_B, H100]  # bus ids 0:5e, 1:01, 0:3b, 0:1a
    assert select_visible(records, "0", "PCI_BUS_ID") == [H100]
    assert select_visible(records, "2", "PCI_BUS_ID") == [A100]
    assert select_visible(records, "3", "PCI_BUS_ID") == [far]  # domain 1 after every bus of domain 0
    assert select_visible(records, "1,0", "PCI_BUS_ID") == [H100_B, H100]
    assert select_visible(records, "3,2,9", "PCI_BUS_ID") == [far, A100]
    assert select_visible(records, None, None) == [H100, H100_B, A100, far]
    # A UUID does not depend on the order.
    assert select_visible(records, "GPU-cccc,GPU-aaaa", None) == [A100, H100]
    # Alike GPUs: an ordinal is certain under either order (both are H100s).
    assert select_visible([H100_B, H100], "0", None) == [H100]


def test_no_gpus_listed() -> None:
    assert select_visible([], None, None) == []
    assert select_visible([], "0", None) == []


class _FakeNvml:
    """The few NVML entry points ``_read_all`` calls, over fixed records (in this order)."""

    def __init__(self, gpus: list[NvmlGpu]) -> None:
        self.gpus = gpus

    @staticmethod
    def _target(ref: Any) -> Any:
        return ref._obj  # what ctypes.byref points at

    def nvmlDeviceGetCount_v2(self, count: Any) -> int:
        self._target(count).value = len(self.gpus)
        return 0

    def nvmlDeviceGetHandleByIndex_v2(self, index: ctypes.c_uint, handle: Any) -> int:
        self._target(handle).value = index.value + 1  # a non-null handle
        return 0

    def _gpu(self, handle: ctypes.c_void_p) -> NvmlGpu:
        assert handle.value is not None
        return self.gpus[handle.value - 1]

    def nvmlDeviceGetCudaComputeCapability(self, handle: ctypes.c_void_p, major: Any, minor: Any) -> int:
        self._target(major).value, self._target(minor).value = self._gpu(handle).capability
        return 0

    def nvmlDeviceGetPciInfo_v3(self, handle: ctypes.c_void_p, info: Any) -> int:
        pci = self._target(info)
        pci.domain, pci.bus, pci.device = self._gpu(handle).pci_bus_id
        pci.busId = "{:08X}:{:02X}:{:02X}.0".format(*self._gpu(handle).pci_bus_id).encode()
        return 0

    def nvmlDeviceGetName(self, handle: ctypes.c_void_p, buffer: Any, size: ctypes.c_uint) -> int:
        buffer.value = self._gpu(handle).name.encode()
        return 0

    def nvmlDeviceGetUUID(self, handle: ctypes.c_void_p, buffer: Any, size: ctypes.c_uint) -> int:
        buffer.value = self._gpu(handle).uuid.encode()
        return 0


def test_the_records_carry_each_gpus_pci_bus_id() -> None:
    records = [A100, H100_B, H100]
    read = nvml._read_all(_FakeNvml(records))  # type: ignore[arg-type]
    assert read == records  # NVML's order, with (domain, bus, device) from nvmlPciInfo_t
    assert select_visible(read, "0", "PCI_BUS_ID") == [H100]


def test_the_pci_info_layout_is_nvml_hs() -> None:
    """nvmlPciInfo_t (nvml.h): char busIdLegacy[16]; unsigned domain, bus, device,
    pciDeviceId, pciSubSystemId; char busId[32]."""
    info = nvml._PciInfo
    assert (info.domain.offset, info.bus.offset, info.device.offset, info.busId.offset) == (16, 20, 24, 36)
    assert ctypes.sizeof(info) == 68
