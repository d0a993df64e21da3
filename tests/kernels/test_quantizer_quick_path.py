"""The int quantizer kernel's quick path, replayed in fp32 on the CPU (bench/quantizer_exact_path.py,
which counts how often it is left): every code it is sure of is the reference rule's code
(``torch.round`` of the IEEE quotient, as the PyTorch fallback computes it), on the fp16 and bf16
groups the GPU benchmark quantizes. Without its tie margin the quick path is wrong on such data,
so the margin, and the slow path it sends elements to, are needed: the check can fail."""

from __future__ import annotations

from pathlib import Path
from types import ModuleType

import pytest
import torch

from kernels.quantization.quantizer import _quantize_int_torch
from tests._script_module import load_script

BENCH = Path(__file__).resolve().parents[2] / "bench" / "quantizer_exact_path.py"


@pytest.fixture(scope="module")
def replay() -> ModuleType:
    return load_script(BENCH, "quantizer_exact_path")


@pytest.mark.parametrize(("bits", "symmetric"), [(8, True), (8, False), (4, True), (4, False)])
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_codes_the_quick_path_is_sure_of_are_the_references(
    replay: ModuleType, dtype: torch.dtype, bits: int, symmetric: bool
) -> None:
    x = torch.randn(4000, 128, generator=torch.Generator().manual_seed(1)).to(dtype).float()
    reference, _, _ = _quantize_int_torch(x, bits, symmetric)
    quick, unsure = replay.quick_path(x, bits, symmetric)
    assert unsure.any(), "the data never reaches the slow path: the check would be empty"
    assert torch.equal(quick[~unsure], reference[~unsure])


def test_without_the_margin_the_quick_path_is_wrong(replay: ModuleType) -> None:
    """bf16 groups give quotients the one-reciprocal product rounds to the other side of a tie."""
    x = torch.randn(4000, 128, generator=torch.Generator().manual_seed(1)).to(torch.bfloat16).float()
    reference, _, _ = _quantize_int_torch(x, 8, False)
    quick, _ = replay.quick_path(x, 8, False)
    assert not torch.equal(quick, reference)
