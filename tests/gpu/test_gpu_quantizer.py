"""quantizer / fp_quantizer kernels against the PyTorch rules on the same GPU: codes,
scales and dequantized values must be bit-identical."""

from __future__ import annotations

import dataclasses
import math
from typing import Literal

import pytest
import torch

from kernels.quantization import (
    FP8Tensor,
    QuantizedTensor,
    dequantize,
    dequantize_fp8,
    quantize,
    quantize_fp8,
)
from tests.gpu._inputs import offset_view, on_side_stream
from tests.gpu._tolerances import DTYPES

Fp8Format = Literal["e4m3", "e5m2"]

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


# ----------------------------------------------------------------------------- awkward inputs


def _same(actual: torch.Tensor, expected: torch.Tensor) -> None:
    """Equal values, NaN where the reference has NaN (the sign of zero is not compared)."""
    torch.testing.assert_close(actual, expected, rtol=0, atol=0, equal_nan=True)


def _assert_int_same(ours: QuantizedTensor, ref: QuantizedTensor) -> None:
    assert ours.data.dtype == ref.data.dtype and ours.data.shape == ref.data.shape
    assert torch.equal(ours.data, ref.data)
    _same(ours.scale, ref.scale)
    if ref.offset is not None:
        assert ours.offset is not None
        _same(ours.offset, ref.offset)
    for out in DTYPES:
        _same(dequantize(ours, out, use_kernel=True), dequantize(ref, out, use_kernel=False))


def _assert_fp8_same(ours: FP8Tensor, ref: FP8Tensor) -> None:
    """Codes bit-identical, except NaN codes, compared as NaN: torch's own NaN (a NaN's
    sign bit, e5m2's mantissa) differs between its CPU and CUDA conversions."""
    assert ours.data.dtype == ref.data.dtype and ours.data.shape == ref.data.shape
    nan = torch.isnan(ref.data.float())
    assert torch.equal(torch.isnan(ours.data.float()), nan)
    assert torch.equal(ours.data.view(torch.uint8)[~nan], ref.data.view(torch.uint8)[~nan])
    _same(ours.scale, ref.scale)
    for out in DTYPES:
        _same(dequantize_fp8(ours, out, use_kernel=True), dequantize_fp8(ref, out, use_kernel=False))


@pytest.mark.parametrize("offset", [1, 2])  # aligned to 1 element; to 2 but not 4
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("group_size", GROUP_SIZES)
@pytest.mark.parametrize("bits", [8, 4])
@pytest.mark.parametrize("symmetric", [True, False])
def test_int_quantizer_misaligned_input(
    device: torch.device, offset: int, dtype: torch.dtype, group_size: int, bits: int, symmetric: bool
) -> None:
    """x[1:] of a fresh tensor: the kernel must not use vector loads the address does not allow
    (a misaligned access is a sticky CUDA error, which synchronize raises here)."""
    x = offset_view(_input(device, dtype, 37, group_size), offset)
    ours = quantize(x, bits, group_size, symmetric, use_kernel=True)
    torch.cuda.synchronize(device)
    _assert_int_same(ours, quantize(x, bits, group_size, symmetric, use_kernel=False))
    # Codes read back from a misaligned copy of themselves.
    moved = dataclasses.replace(ours, data=offset_view(ours.data, offset))
    for out in DTYPES:
        assert torch.equal(dequantize(moved, out, use_kernel=True), dequantize(ours, out, use_kernel=True))


@pytest.mark.parametrize("offset", [1, 2])
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("group_size", (1, 6, 128, 4097))
@pytest.mark.parametrize("fmt", ["e4m3", "e5m2"])
def test_fp8_quantizer_misaligned_input(
    device: torch.device, offset: int, dtype: torch.dtype, group_size: int, fmt: Fp8Format
) -> None:
    x = offset_view(_input(device, dtype, 37, group_size), offset)
    ours = quantize_fp8(x, group_size, fmt, use_kernel=True)
    torch.cuda.synchronize(device)
    _assert_fp8_same(ours, quantize_fp8(x, group_size, fmt, use_kernel=False))
    moved = dataclasses.replace(
        ours, data=offset_view(ours.data, offset), scale=offset_view(ours.scale, offset)
    )
    for out in DTYPES:
        assert torch.equal(
            dequantize_fp8(moved, out, use_kernel=True), dequantize_fp8(ours, out, use_kernel=True)
        )


NAN, INF = math.nan, math.inf


def _non_finite_input(device: torch.device, dtype: torch.dtype, group_size: int) -> torch.Tensor:
    """Groups 0 and 1 as in _input (zeros, constant), 2.. with NaN and infinities."""
    x = _input(device, torch.float32, 9, group_size)
    x[2, group_size // 2] = NAN
    x[3, 0] = INF
    x[4, -1] = -INF
    x[5, 0], x[5, -1] = INF, -INF  # group_size 2: the whole group
    x[6] = INF
    x[7, 0], x[7, -1] = NAN, INF
    # group 8: finite, so a non-finite group cannot leak into the next one
    return x.to(dtype)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("group_size", GROUP_SIZES)
@pytest.mark.parametrize("bits", [8, 4])
@pytest.mark.parametrize("symmetric", [True, False])
def test_int_quantizer_nan_and_inf(
    device: torch.device, dtype: torch.dtype, group_size: int, bits: int, symmetric: bool
) -> None:
    """As torch's amin / amax and IEEE division give them (see kernels.quantization): NaN
    scale for a NaN, an infinite (or NaN) one for an infinity, every code of those groups 0,
    each such group NaN once dequantized, the other groups untouched."""
    x = _non_finite_input(device, dtype, group_size)
    ours = quantize(x, bits, group_size, symmetric, use_kernel=True)
    _assert_int_same(ours, quantize(x, bits, group_size, symmetric, use_kernel=False))
    assert torch.isnan(ours.scale[2]) and torch.isnan(ours.scale[7])
    assert ours.scale[3] == INF and ours.scale[4] == INF and ours.scale[5] == INF
    assert torch.all(ours.data[2:8] == 0)
    assert torch.all(torch.isnan(dequantize(ours, torch.float32, use_kernel=True)[2:8]))
    assert torch.isfinite(ours.scale[8]) and ours.scale[8] > 0


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("group_size", (2, 6, 128, 4097))
@pytest.mark.parametrize("fmt", ["e4m3", "e5m2"])
def test_fp8_quantizer_nan_and_inf(
    device: torch.device, dtype: torch.dtype, group_size: int, fmt: Fp8Format
) -> None:
    """NaN scale and zero codes for a NaN; for an infinity an infinite scale, NaN codes for the
    infinite elements and signed zeros for the finite ones; all NaN once dequantized."""
    x = _non_finite_input(device, dtype, group_size)
    ours = quantize_fp8(x, group_size, fmt, use_kernel=True)
    _assert_fp8_same(ours, quantize_fp8(x, group_size, fmt, use_kernel=False))
    codes = ours.data.float()
    assert torch.isnan(ours.scale[2]) and torch.isnan(ours.scale[7])
    assert torch.all(ours.data.view(torch.uint8)[2] == 0) and torch.all(ours.data.view(torch.uint8)[7] == 0)
    assert ours.scale[3] == INF and torch.isnan(codes[3, 0]) and torch.all(codes[3, 1:] == 0)
    assert torch.all(torch.isnan(dequantize_fp8(ours, torch.float32, use_kernel=True)[2:8]))
    assert torch.isfinite(ours.scale[8]) and ours.scale[8] > 0


# absmax of each group about 3x these: scales (absmax / qmax or / fmax) deep in the fp32
# denormals, which a flush-to-zero build turns into 0 (all-zero codes).
TINY = (1e-33, 1e-36, 1e-37, 1e-38, 1e-39)  # the last two are fp32 denormals themselves


def _tiny_input(device: torch.device, dtype: torch.dtype, group_size: int) -> torch.Tensor:
    gen = torch.Generator(device=device).manual_seed(group_size)
    x = torch.randn(len(TINY), group_size, device=device, generator=gen)
    return (x * torch.tensor(TINY, device=device)[:, None]).to(dtype)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])  # fp16 cannot hold these
@pytest.mark.parametrize("group_size", (6, 128))
@pytest.mark.parametrize("bits", [8, 4])
@pytest.mark.parametrize("symmetric", [True, False])
def test_int_quantizer_tiny_groups(
    device: torch.device, dtype: torch.dtype, group_size: int, bits: int, symmetric: bool
) -> None:
    x = _tiny_input(device, dtype, group_size)
    ours = quantize(x, bits, group_size, symmetric, use_kernel=True)
    ref = quantize(x, bits, group_size, symmetric, use_kernel=False)
    assert torch.all(ref.scale > 0) and torch.all((ref.data != 0).any(dim=1))  # the case has teeth
    _assert_int_same(ours, ref)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("group_size", (6, 128))
@pytest.mark.parametrize("fmt", ["e4m3", "e5m2"])
def test_fp8_quantizer_tiny_groups(
    device: torch.device, dtype: torch.dtype, group_size: int, fmt: Fp8Format
) -> None:
    x = _tiny_input(device, dtype, group_size)
    ours = quantize_fp8(x, group_size, fmt, use_kernel=True)
    ref = quantize_fp8(x, group_size, fmt, use_kernel=False)
    assert torch.all(ref.scale > 0) and torch.all((ref.data.float() != 0).any(dim=1))
    _assert_fp8_same(ours, ref)


def test_empty_inputs(device: torch.device) -> None:
    x = torch.empty(0, 8, device=device)
    q = quantize(x, 4, 8, use_kernel=True)
    assert q.data.shape == (0, 4) and q.scale.shape == (0,)
    assert dequantize(q, use_kernel=True).shape == (0, 8)
    f = quantize_fp8(x, 8, use_kernel=True)
    assert f.data.shape == (0, 8) and dequantize_fp8(f, use_kernel=True).shape == (0, 8)


def test_quantizers_use_the_current_stream(device: torch.device) -> None:
    x = _input(device, torch.float16, 37, 4096 + 2)
    ref_int = quantize(x, 4, 4096 + 2, False, use_kernel=False)
    ref_fp8 = quantize_fp8(x, 4096 + 2, "e5m2", use_kernel=False)

    def run() -> tuple[QuantizedTensor, torch.Tensor, FP8Tensor, torch.Tensor]:
        q = quantize(x, 4, 4096 + 2, False, use_kernel=True)
        f = quantize_fp8(x, 4096 + 2, "e5m2", use_kernel=True)
        return q, dequantize(q, use_kernel=True), f, dequantize_fp8(f, use_kernel=True)

    q, out, f, out8 = on_side_stream(device, [x], run)
    _assert_int_same(q, ref_int)
    assert torch.equal(out, dequantize(ref_int, use_kernel=False))
    _assert_fp8_same(f, ref_fp8)
    assert torch.equal(out8, dequantize_fp8(ref_fp8, use_kernel=False))


# Past 2^31 elements, and a whole number of 128-element groups: an int32 element offset
# would wrap, so the last groups would land on (or be read from) the front.
BEYOND_INT32 = 2**31 + 3 * 128


def test_quantizers_beyond_2_31_elements(device: torch.device) -> None:
    """The first and last groups of a 2^31 + 384 element bf16 tensor (4 GiB) match the
    reference run on those groups alone: each group's result depends on its elements only."""
    free, _ = torch.cuda.mem_get_info(device)
    if free < 24 * 2**30:
        pytest.skip(f"needs 24 GiB of free GPU memory, {free / 2**30:.1f} GiB free")
    groups = BEYOND_INT32 // 128
    x = torch.empty(groups, 128, device=device, dtype=torch.bfloat16)
    x.normal_(generator=torch.Generator(device=device).manual_seed(31))
    ends = (slice(0, 2), slice(groups - 3, groups))

    q = quantize(x, 8, 128, use_kernel=True)
    for part in ends:
        ref = quantize(x[part], 8, 128, use_kernel=False)
        assert torch.equal(q.data[part], ref.data) and torch.equal(q.scale[part], ref.scale)
    out = dequantize(q, use_kernel=True)
    for part in ends:
        assert torch.equal(
            out[part], dequantize(quantize(x[part], 8, 128, use_kernel=False), use_kernel=False)
        )
    del q, out

    f = quantize_fp8(x, 128, "e4m3", use_kernel=True)
    for part in ends:
        ref8 = quantize_fp8(x[part], 128, "e4m3", use_kernel=False)
        assert torch.equal(f.data[part].view(torch.uint8), ref8.data.view(torch.uint8))
        assert torch.equal(f.scale[part], ref8.scale)
    out8 = dequantize_fp8(f, use_kernel=True)
    for part in ends:
        ref8 = quantize_fp8(x[part], 128, "e4m3", use_kernel=False)
        assert torch.equal(out8[part], dequantize_fp8(ref8, use_kernel=False))
