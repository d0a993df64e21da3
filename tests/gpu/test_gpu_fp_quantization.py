"""fp_quantizer's packed small float formats (kernels.quantization.fp_quantizer) on the GPU.

Round to nearest: the kernels' codes and scales against an independent reference
(tests/_fp_reference.py: each format's values enumerated, the nearer neighbour with ties to
the even code, packed through an explicit bit stream), bit for bit. Stochastic rounding: the
kernels against the PyTorch fallback on the same GPU with the same seed (both draw the
documented Philox words, so the codes must be identical), every code one of the value's two
neighbours. Dequantized values (all rows, or the rows of an index) against the fallback, bit
for bit, in every output dtype.
"""

from __future__ import annotations

import dataclasses
import math

import pytest
import torch

from kernels.quantization._common import FP_OP
from kernels.quantization.fp_quantizer import FPQuantizedTensor, dequantize_fp, quantize_fp
from tests import _fp_reference as ref
from tests.gpu._inputs import offset_view, on_side_stream
from tests.gpu._tolerances import DTYPES

NAN, INF = math.nan, math.inf
SEEDS = (0, 2**64 - 1)


def _sizes(fmt: str) -> tuple[int, ...]:
    """One packing unit, a few (no multiple of 16 bytes of x: the element-wise path), a
    block-sized group, and a large one that is neither."""
    per = ref.per_bytes(fmt)
    return (per, 12 if per == 4 else 6, 128, 4096 + per)


CASES = [(fmt, size) for fmt in ref.NAMES for size in _sizes(fmt)]


def _input(device: torch.device, dtype: torch.dtype, groups: int, group_size: int) -> torch.Tensor:
    gen = torch.Generator(device=device).manual_seed(groups * 7 + group_size)
    x = torch.randn(groups, group_size, device=device, generator=gen) * 4
    x[0] = 0.0  # scale 0
    if groups > 1:
        x[1] = 3.0  # every element the group's max
    if groups > 2:
        x[2] *= 1e-6  # subnormal codes
    return x.to(dtype)


def _reference_data(x: torch.Tensor, fmt: str, group_size: int) -> tuple[torch.Tensor, torch.Tensor]:
    codes, scale = ref.nearest_codes(x.reshape(-1, group_size), fmt)
    return ref.pack_rows(codes, ref.bits_of(fmt)), scale


def _same(actual: torch.Tensor, expected: torch.Tensor) -> None:
    """Equal values, NaN where the reference has NaN."""
    torch.testing.assert_close(actual, expected, rtol=0, atol=0, equal_nan=True)


def _assert_same(
    ours: FPQuantizedTensor, fallback: FPQuantizedTensor, index: torch.Tensor | None = None
) -> None:
    assert ours.data.dtype == torch.uint8 and ours.data.shape == fallback.data.shape
    assert torch.equal(ours.data, fallback.data)
    _same(ours.scale, fallback.scale)
    for out in DTYPES:
        got = dequantize_fp(ours, out, index=index, use_kernel=True)
        want = dequantize_fp(fallback, out, index=index, use_kernel=False)
        assert got.dtype == out and got.shape == want.shape
        _same(got, want)


def _assert_neighbours(q: FPQuantizedTensor, x: torch.Tensor) -> None:
    """Each stochastic code is the lower or upper neighbour of |x / scale|, with its sign."""
    fmt = q.format
    bits = ref.bits_of(fmt)
    r, scale = ref.scaled(x.reshape(-1, q.group_size), fmt)
    lo, hi = ref.neighbour_codes(r, fmt)
    data = q.data.to(torch.int64).reshape(q.data.shape[0], -1, 1)
    stream = ((data >> torch.arange(8, device=data.device)) & 1).reshape(q.data.shape[0], q.group_size, bits)
    codes = (stream << torch.arange(bits, device=data.device)).sum(-1)
    mag, sign = codes & ((1 << (bits - 1)) - 1), codes >> (bits - 1)
    live = (scale > 0)[:, None].expand_as(codes)
    assert torch.all(~live | (mag == lo) | (mag == hi))
    assert torch.all(~live | (sign == torch.signbit(r).to(torch.int64)))


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize(("fmt", "group_size"), CASES)
def test_nearest_codes_match_reference_bitwise(
    device: torch.device, dtype: torch.dtype, fmt: str, group_size: int
) -> None:
    x = _input(device, dtype, 37, group_size)  # 37 groups: no multiple of the groups per block
    ours = quantize_fp(x, fmt, group_size, use_kernel=True)  # type: ignore[arg-type]
    data, scale = _reference_data(x, fmt, group_size)
    assert torch.equal(ours.scale, scale)
    assert torch.equal(ours.data, data)
    _assert_same(ours, quantize_fp(x, fmt, group_size, use_kernel=False))  # type: ignore[arg-type]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize(("fmt", "group_size"), CASES)
def test_stochastic_codes_match_fallback_for_the_same_seed(
    device: torch.device, dtype: torch.dtype, fmt: str, group_size: int
) -> None:
    x = _input(device, dtype, 37, group_size)
    runs = []
    for seed in SEEDS:
        ours = quantize_fp(x, fmt, group_size, "stochastic", seed=seed, use_kernel=True)  # type: ignore[arg-type]
        _assert_same(ours, quantize_fp(x, fmt, group_size, "stochastic", seed=seed, use_kernel=False))  # type: ignore[arg-type]
        _assert_neighbours(ours, x)
        again = quantize_fp(x, fmt, group_size, "stochastic", seed=seed, use_kernel=True)  # type: ignore[arg-type]
        assert torch.equal(ours.data, again.data)
        runs.append(ours.data)
    if group_size >= 128:
        assert not torch.equal(runs[0], runs[1])  # the seed matters


def test_generator_seed_on_the_gpu(device: torch.device) -> None:
    """A CUDA generator gives the seed too (drawn on its device, read back on the host)."""
    x = _input(device, torch.float16, 8, 64)
    a = quantize_fp(x, "e2m1", rounding="stochastic", generator=torch.Generator(device).manual_seed(5))
    b = quantize_fp(x, "e2m1", rounding="stochastic", generator=torch.Generator(device).manual_seed(5))
    assert torch.equal(a.data, b.data)


@pytest.mark.parametrize("offset", [1, 2])  # aligned to 1 element; to 2 but not 4
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("fmt", ref.NAMES)
def test_misaligned_inputs_and_codes(device: torch.device, offset: int, dtype: torch.dtype, fmt: str) -> None:
    """x[1:] of a fresh tensor, and codes read back from a misaligned copy: no vector access the
    address does not allow (a misaligned access is a sticky CUDA error, raised at synchronize)."""
    group_size = 128
    x = offset_view(_input(device, dtype, 37, group_size), offset)
    for rounding in ("nearest", "stochastic"):
        seed = 3 if rounding == "stochastic" else None
        ours = quantize_fp(x, fmt, group_size, rounding, seed=seed, use_kernel=True)  # type: ignore[arg-type]
        torch.cuda.synchronize(device)
        _assert_same(ours, quantize_fp(x, fmt, group_size, rounding, seed=seed, use_kernel=False))  # type: ignore[arg-type]
        moved = dataclasses.replace(ours, data=offset_view(ours.data, offset))
        for out in DTYPES:
            assert torch.equal(
                dequantize_fp(moved, out, use_kernel=True), dequantize_fp(ours, out, use_kernel=True)
            )


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("fmt", ref.NAMES)
def test_large_tensors(device: torch.device, dtype: torch.dtype, fmt: str) -> None:
    """Millions of elements: whole 16-byte slots (2049 x 2048) and groups that are not
    (3001 x (4096 + 4): the fp16 / bf16 element-wise path, fp32's vector one)."""
    for groups, group_size in ((2049, 2048), (3001, 4100)):
        x = _input(device, dtype, groups, group_size)
        ours = quantize_fp(x, fmt, group_size, use_kernel=True)  # type: ignore[arg-type]
        data, scale = _reference_data(x, fmt, group_size)
        assert torch.equal(ours.scale, scale) and torch.equal(ours.data, data)
        assert torch.equal(dequantize_fp(ours, use_kernel=True), dequantize_fp(ours, use_kernel=False))
        sr = quantize_fp(x, fmt, group_size, "stochastic", seed=9, use_kernel=True)  # type: ignore[arg-type]
        assert torch.equal(
            sr.data, quantize_fp(x, fmt, group_size, "stochastic", seed=9, use_kernel=False).data
        )  # type: ignore[arg-type]


@pytest.mark.parametrize("fmt", ref.NAMES)
@pytest.mark.parametrize("group_size", [4, 64, 320])  # several groups per row, one, a row's worth
def test_selective_dequantize(device: torch.device, fmt: str, group_size: int) -> None:
    x = _input(device, torch.bfloat16, 9 * 5 * 64 // group_size, group_size).reshape(9, 5, 64)
    q = quantize_fp(x, fmt, group_size, use_kernel=True)  # type: ignore[arg-type]
    full = dequantize_fp(q, use_kernel=True)
    for index in ([8, 0, 8, 3], torch.tensor([2, 7], device=device), torch.arange(9).flip(0), []):
        rows = torch.as_tensor(index, dtype=torch.int64, device=device)
        got = dequantize_fp(q, index=index, use_kernel=True)
        assert got.shape == (len(rows), 5, 64)
        assert torch.equal(got, full[rows])
        if len(rows):
            _assert_same(q, quantize_fp(x, fmt, group_size, use_kernel=False), rows)  # type: ignore[arg-type]
    with pytest.raises(IndexError, match="out of range"):
        dequantize_fp(q, index=torch.tensor([0, 9], device=device), use_kernel=True)


def test_host_index_does_not_wait_for_the_gpu(device: torch.device) -> None:
    """An index given as a list or a CPU tensor is checked on the host and reaches the kernel
    without a synchronizing copy (the documented cost: none), with the rows it names."""
    x = _input(device, torch.float32, 9 * 5, 64).reshape(9, 5, 64)
    q = quantize_fp(x, "e3m2", 64, use_kernel=True)
    full = dequantize_fp(q, use_kernel=True)
    dequantize_fp(q, index=[0], use_kernel=True)  # loads everything before the check
    torch.cuda.synchronize(device)
    previous = torch.cuda.get_sync_debug_mode()
    torch.cuda.set_sync_debug_mode("error")
    try:
        got = [dequantize_fp(q, index=index, use_kernel=True) for index in ([8, 0, 3], torch.tensor([2, 7]))]
    finally:
        torch.cuda.set_sync_debug_mode(previous)
    assert torch.equal(got[0], full[[8, 0, 3]]) and torch.equal(got[1], full[[2, 7]])


def test_unchecked_out_of_range_index_reads_nothing(device: torch.device) -> None:
    """The binding called without the front's check: rows named out of range come out NaN (and
    nothing is read out of bounds: compute-sanitizer's run of tests/gpu would say)."""
    x = _input(device, torch.float32, 6, 16)
    q = quantize_fp(x, "e3m2", 16, use_kernel=True)
    out = torch.empty(3, 16, device=device)
    index = torch.tensor([1, 6, -1], device=device)
    FP_OP.load().dequantize_fp(q.data, q.scale, out, 16, "e3m2", index, 1)
    torch.cuda.synchronize(device)
    assert torch.equal(out[0], dequantize_fp(q, use_kernel=True)[1])
    assert torch.all(torch.isnan(out[1:]))


def _non_finite_input(device: torch.device, dtype: torch.dtype, group_size: int) -> torch.Tensor:
    x = _input(device, torch.float32, 9, group_size)
    x[2, group_size // 2] = NAN
    x[3, 0] = INF
    x[4, -1] = -INF
    x[5, 0], x[5, -1] = INF, -INF
    x[6] = INF
    x[7, 0], x[7, -1] = NAN, INF
    # group 8: finite, so a non-finite group cannot leak into the next one
    return x.to(dtype)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("fmt", ref.NAMES)
def test_nan_and_inf(device: torch.device, dtype: torch.dtype, fmt: str) -> None:
    """The FP8 rules (kernels.quantization.fp_quantizer): the codes equal the fallback's bit for bit (the
    NaN code is a fixed positive one), every such group dequantizes to NaN, the last is finite."""
    group_size = 128
    x = _non_finite_input(device, dtype, group_size)
    for rounding in ("nearest", "stochastic"):
        seed = 4 if rounding == "stochastic" else None
        ours = quantize_fp(x, fmt, group_size, rounding, seed=seed, use_kernel=True)  # type: ignore[arg-type]
        _assert_same(ours, quantize_fp(x, fmt, group_size, rounding, seed=seed, use_kernel=False))  # type: ignore[arg-type]
        assert torch.isnan(ours.scale[2]) and torch.all(ours.data[2] == 0)
        assert ours.scale[3] == INF and ours.scale[6] == INF
        assert torch.all(torch.isnan(dequantize_fp(ours, torch.float32, use_kernel=True)[2:8]))
        assert torch.isfinite(ours.scale[8]) and ours.scale[8] > 0


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])  # fp16 cannot hold these
@pytest.mark.parametrize("fmt", ref.NAMES)
def test_tiny_groups(device: torch.device, dtype: torch.dtype, fmt: str) -> None:
    """Groups whose absmax is about 3e-33 ... 3e-39: scales deep in the fp32 denormals, which a
    flush-to-zero build would turn into 0."""
    tiny = torch.tensor([1e-33, 1e-36, 1e-37, 1e-38, 1e-39], device=device)
    gen = torch.Generator(device=device).manual_seed(1)
    x = (torch.randn(5, 64, device=device, generator=gen) * tiny[:, None]).to(dtype)
    ours = quantize_fp(x, fmt, 64, use_kernel=True)  # type: ignore[arg-type]
    data, scale = _reference_data(x, fmt, 64)
    assert torch.all(scale > 0) and torch.equal(ours.scale, scale) and torch.equal(ours.data, data)
    _assert_same(ours, quantize_fp(x, fmt, 64, use_kernel=False))  # type: ignore[arg-type]


def test_empty_inputs(device: torch.device) -> None:
    x = torch.empty(0, 8, device=device)
    q = quantize_fp(x, "e3m2", 8, use_kernel=True)
    assert q.data.shape == (0, 6) and q.scale.shape == (0,)
    assert dequantize_fp(q, use_kernel=True).shape == (0, 8)


def test_uses_the_current_stream(device: torch.device) -> None:
    x = _input(device, torch.float16, 37, 4096 + 4)
    ref_q = quantize_fp(x, "e3m2", 4096 + 4, "stochastic", seed=5, use_kernel=False)

    def run() -> tuple[FPQuantizedTensor, torch.Tensor, torch.Tensor]:
        q = quantize_fp(x, "e3m2", 4096 + 4, "stochastic", seed=5, use_kernel=True)
        return q, dequantize_fp(q, use_kernel=True), dequantize_fp(q, index=[3, 1], use_kernel=True)

    q, out, rows = on_side_stream(device, [x], run)
    assert torch.equal(q.data, ref_q.data) and torch.equal(q.scale, ref_q.scale)
    assert torch.equal(out, dequantize_fp(ref_q, use_kernel=False))
    assert torch.equal(rows, dequantize_fp(ref_q, index=[3, 1], use_kernel=False))


# Past 2^31 elements, in whole 128-element groups: an int32 element offset would wrap.
BEYOND_INT32 = 2**31 + 3 * 128


def test_beyond_2_31_elements(device: torch.device) -> None:
    """The first and last groups of a 2^31 + 384 element bf16 tensor: nearest codes as the
    reference gives them for those groups alone, stochastic codes as the documented Philox words
    of their flat indices (past 2^31) select them."""
    free, _ = torch.cuda.mem_get_info(device)
    if free < 24 * 2**30:
        pytest.skip(f"needs 24 GiB of free GPU memory, {free / 2**30:.1f} GiB free")
    groups = BEYOND_INT32 // 128
    x = torch.empty(groups, 128, device=device, dtype=torch.bfloat16)
    x.normal_(generator=torch.Generator(device=device).manual_seed(31))
    ends = (slice(0, 2), slice(groups - 3, groups))
    q = quantize_fp(x, "e3m2", 128, use_kernel=True)
    for part in ends:
        data, scale = _reference_data(x[part], "e3m2", 128)
        assert torch.equal(q.data[part], data) and torch.equal(q.scale[part], scale)
    out = dequantize_fp(q, use_kernel=True)
    for part in ends:
        assert torch.equal(out[part], dequantize_fp(quantize_fp(x[part], "e3m2", 128, use_kernel=False)))
    last = torch.tensor([groups - 1], device=device)
    assert torch.equal(dequantize_fp(q, index=last, use_kernel=True), out[-1:])
    del q, out
    seed = 0xDEADBEEF_12345678
    sr = quantize_fp(x, "e2m1", 128, "stochastic", seed=seed, use_kernel=True)
    r, _ = ref.scaled(x[-1:], "e2m1")
    codes = ref.unpack_bits(bytes(sr.data[-1].tolist()), 4, 128)
    first = (groups - 1) * 128
    for i, v in enumerate(r[0].tolist()):
        assert codes[i] == ref.stochastic_code(v, "e2m1", ref.element_word(first + i, seed)), i
