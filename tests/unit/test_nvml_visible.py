"""``op_builder.nvml.select_visible``: which of NVML's GPUs CUDA shows under CUDA_VISIBLE_DEVICES,
by CUDA's rules (CUDA C++ Programming Guide, "CUDA Environment Variables"), and None wherever
the mapping is not certain, so that the caller asks CUDA instead of guessing. The reading of
NVML itself runs on a GPU (tests/gpu/test_gpu_fork.py compares it with torch's answer)."""

from __future__ import annotations

import pytest

from op_builder.nvml import NvmlGpu, select_visible

H100 = NvmlGpu("NVIDIA H100 80GB HBM3", (9, 0), "GPU-aaaa1111-0000-0000-0000-000000000000")
H100_B = NvmlGpu("NVIDIA H100 80GB HBM3", (9, 0), "GPU-bbbb2222-0000-0000-0000-000000000000")
A100 = NvmlGpu("NVIDIA A100-SXM4-80GB", (8, 0), "GPU-cccc3333-0000-0000-0000-000000000000")
ALIKE = [H100, H100_B]
MIXED = [H100, A100]


@pytest.mark.parametrize(
    ("visible", "expected"),
    [
        (None, [H100, H100_B]),  # unset: every GPU
        ("", []),  # empty: none
        ("-1", []),  # an index that names no GPU ends the list at once
        ("1", [H100_B]),
        ("1,0", [H100_B, H100]),
        (" 0 , 1 ", [H100, H100_B]),
        ("0,7,1", [H100]),  # read up to the first entry naming no GPU
        ("0,x,1", [H100]),
        ("GPU-bbbb", [H100_B]),  # a unique UUID prefix is enough
        ("GPU-bbbb2222-0000-0000-0000-000000000000,GPU-aaaa", [H100_B, H100]),
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
        "0,0",  # a repeated GPU: CUDA does not document the outcome
        "GPU-aaaa,0",
    ],
)
def test_uncertain_lists_are_left_to_cuda(visible: str) -> None:
    assert select_visible(ALIKE, visible, "PCI_BUS_ID") is None


def test_an_index_on_differing_gpus_needs_pci_bus_order() -> None:
    # CUDA's default order is fastest first, NVML's is the PCI bus: index 0 may be either GPU.
    assert select_visible(MIXED, "0", None) is None
    assert select_visible(MIXED, "0", "FASTEST_FIRST") is None
    assert select_visible(MIXED, "1", "PCI_BUS_ID") == [A100]
    # A UUID names one GPU whatever the order; so does leaving the variable unset.
    assert select_visible(MIXED, "GPU-cccc", None) == [A100]
    assert select_visible(MIXED, None, None) == MIXED


def test_no_gpus_listed() -> None:
    assert select_visible([], None, None) == []
    assert select_visible([], "0", None) == []
