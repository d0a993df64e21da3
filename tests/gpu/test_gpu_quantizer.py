"""quantizer / fp_quantizer kernels against the PyTorch rules on the same GPU: codes,
scales and dequantized values must be bit-identical."""

from __future__ import annotations

import pytest
import torch

from kernels.quantization import dequantize, dequantize_fp8, quantize, quantize_fp8
from tests.gpu._tolerances import DTYPES

GROUP_SIZES = (2, 6, 128, 4096 + 2)  # even (int4), not a multiple of 4, block-sized, large


def _input(device: torch.device, dtype: torch.dtype, groups: int, group_size: int) -> torch.Tensor:
    gen = torch.Generator(device=device).manual_seed(groups * 7 + group_size)
    x = torch.randn(groups, group_size, device=device, generator=gen) * 4
    x[0] = 0.0  # scale 0
    if group_size > 1:
        x[1] = 3.0  # max == min
    return x.to(dtype)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("group_size", GROUP_SIZES)
@pytest.mark.parametrize("bits", [8, 4])
@pytest.mark.parametrize("symmetric", [True, False])
def test_int_quantizer_bit_exact(
    device: torch.device, dtype: torch.dtype, group_size: int, bits: int, symmetric: bool
) -> None:
    x = _input(device, dtype, 37, group_size)  # 37 groups: not a multiple of groups per block
    ours = quantize(x, bits, group_size, symmetric, use_kernel=True)
    ref = quantize(x, bits, group_size, symmetric, use_kernel=False)
    assert ours.data.dtype == ref.data.dtype and ours.data.shape == ref.data.shape
    assert torch.equal(ours.data, ref.data)
    assert torch.equal(ours.scale, ref.scale)
    if not symmetric:
        assert ours.offset is not None and ref.offset is not None
        assert torch.equal(ours.offset, ref.offset)
    for out in DTYPES:
        assert torch.equal(dequantize(ours, out, use_kernel=True), dequantize(ref, out, use_kernel=False))


def test_int8_odd_group_size(device: torch.device) -> None:
    x = _input(device, torch.float16, 9, 4097)
    ours = quantize(x, 8, 4097, use_kernel=True)
    ref = quantize(x, 8, 4097, use_kernel=False)
    assert torch.equal(ours.data, ref.data) and torch.equal(ours.scale, ref.scale)
    assert torch.equal(dequantize(ours, use_kernel=True), dequantize(ref, use_kernel=False))


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("group_size", (1, 6, 128, 4097))
@pytest.mark.parametrize("fmt", ["e4m3", "e5m2"])
def test_fp8_quantizer_bit_exact(device: torch.device, dtype: torch.dtype, group_size: int, fmt: str) -> None:
    x = _input(device, dtype, 37, group_size)
    ours = quantize_fp8(x, group_size, fmt, use_kernel=True)  # type: ignore[arg-type]
    ref = quantize_fp8(x, group_size, fmt, use_kernel=False)  # type: ignore[arg-type]
    assert ours.data.dtype == ref.data.dtype
    assert torch.equal(ours.data.view(torch.uint8), ref.data.view(torch.uint8))
    assert torch.equal(ours.scale, ref.scale)
    for out in DTYPES:
        assert torch.equal(
            dequantize_fp8(ours, out, use_kernel=True), dequantize_fp8(ref, out, use_kernel=False)
        )
