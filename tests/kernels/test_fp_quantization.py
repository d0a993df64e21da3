"""kernels.quantization.fp_quantizer (FP8 / FP6 / FP4 / 12-bit packed formats) through its PyTorch rules,
and gpu_fp_format.h (the kernels' encoder) compiled for the host.

References come from tests/_fp_reference.py only: every format's values enumerated from its
definition, nearest with ties to the even code, Philox4x32-10 on Python integers (checked
against Random123's known answers) and a bit packer on Python integers. Codes are compared
exactly.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest
import torch

from kernels.quantization import _fp_formats, quantize_fp8
from kernels.quantization.fp_quantizer import (
    FPQuantizedTensor,
    dequantize_fp,
    quantize_fp,
    selective_dequantize,
)
from op_builder.registry import get_builder
from tests import _fp_reference as ref

pytestmark = pytest.mark.filterwarnings("ignore:.*using the PyTorch fallback:RuntimeWarning")

# The header search path the op is compiled with (its family's includes/, then the shared one).
FP_INCLUDES = [f"-I{d}" for d in get_builder("fp_quantizer").include_paths()]
NAN, INF = math.nan, math.inf


def _codes(q: FPQuantizedTensor) -> list[list[int]]:
    """The codes of each group, unpacked by the reference's bit stream."""
    bits = ref.bits_of(q.format)
    return [ref.unpack_bits(bytes(row), bits, q.group_size) for row in q.data.tolist()]


def _pad(values: list[float], fmt: str) -> list[float]:
    """values padded with zeros to whole bytes of codes."""
    per = ref.per_bytes(fmt)
    return values + [0.0] * (-len(values) % per)


def _grid_values(fmt: str) -> list[float]:
    """Every finite value of both signs, every midpoint between neighbouring magnitudes, and
    the fp32 numbers just below and above each midpoint; fmax is among them, so a group of
    these has scale 1 and quantizes the values themselves."""
    mags = ref.magnitudes(fmt)
    out: list[float] = []
    for lo, hi in zip(mags, mags[1:]):
        mid = np.float32((lo + hi) / 2)
        assert float(mid) == (lo + hi) / 2  # exact in fp32
        out += [
            lo,
            float(mid),
            float(np.nextafter(mid, np.float32(0))),
            float(np.nextafter(mid, np.float32(INF))),
        ]
    out.append(mags[-1])
    return out + [-v for v in out]


# ----------------------------------------------------------------------------- nearest


@pytest.mark.parametrize("fmt", ref.NAMES)
def test_every_value_and_midpoint_rounds_to_nearest_even(fmt: str) -> None:
    values = _pad(_grid_values(fmt), fmt)
    x = torch.tensor(values, dtype=torch.float32)[None]
    q = quantize_fp(x, fmt, len(values))  # type: ignore[arg-type]
    assert q.scale.tolist() == [1.0]
    expected = [ref.nearest_code(v, fmt) for v in values]
    assert _codes(q)[0] == expected
    assert bytes(q.data[0].tolist()) == ref.pack_bits(expected, ref.bits_of(fmt))
    restored = dequantize_fp(q).flatten().tolist()
    assert restored == [ref.value_of(c, fmt) for c in expected]
    # Exact values map to themselves, and the ties split evenly between rounding down and up.
    mags = ref.magnitudes(fmt)
    assert all(ref.value_of(ref.nearest_code(v, fmt), fmt) == v for v in mags)
    ties = [(lo + hi) / 2 for lo, hi in zip(mags, mags[1:])]
    up = sum(ref.value_of(ref.nearest_code(t, fmt), fmt) > t for t in ties)
    assert abs(2 * up - len(ties)) <= 1


@pytest.mark.parametrize("fmt", ref.NAMES)
def test_random_groups_match_loop_reference(fmt: str) -> None:
    """Scales that are not powers of two, sizes across the range, fp32 arithmetic throughout."""
    gen = torch.Generator().manual_seed(ref.NAMES.index(fmt))
    size = 12  # whole bytes in every format
    x = torch.randn(6, size, generator=gen) * torch.tensor([1e-3, 0.1, 1.0, 30.0, 1e4, 1.0])[:, None]
    x[5, :4] = torch.tensor([1e-7, -1e-7, 0.0, -0.0])  # subnormal codes and zeros under a normal scale
    q = quantize_fp(x, fmt, size)  # type: ignore[arg-type]
    codes = _codes(q)
    restored = dequantize_fp(q).reshape(6, size).tolist()
    for g in range(6):
        want, scale, values = ref.group_reference(x[g].tolist(), fmt)
        assert q.scale[g].item() == scale
        assert codes[g] == want, (fmt, g)
        assert restored[g] == values
    assert codes[5][2] == 0 and codes[5][3] == 1 << (ref.bits_of(fmt) - 1)  # +0 and -0


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float64])
@pytest.mark.parametrize("fmt", ["e3m2", "e4m7"])
def test_other_input_dtypes_quantize_their_fp32_values(dtype: torch.dtype, fmt: str) -> None:
    x = (torch.randn(4, 8, generator=torch.Generator().manual_seed(5)) * 3).to(dtype)
    q = quantize_fp(x, fmt)  # type: ignore[arg-type]
    assert q.group_size == 8 and q.data.shape == (4, 8 * ref.bits_of(fmt) // 8)
    for g in range(4):
        assert _codes(q)[g] == ref.group_reference(x[g].float().tolist(), fmt)[0]
    out = dequantize_fp(q)
    assert out.dtype == dtype and out.shape == x.shape
    assert dequantize_fp(q, torch.float32).dtype == torch.float32


@pytest.mark.parametrize("fmt", ref.NAMES)
def test_saturation_at_fmax(fmt: str) -> None:
    """x / scale just above fmax (scale = amax / fmax rounded down) takes the largest code;
    the encoder saturates anything larger, infinities included. (For e2m1, amax / (amax / 6)
    never exceeds 6 in fp32: only the encoder's part applies.)"""
    top = ref.nearest_code(ref.fmax(fmt), fmt)
    amax = np.random.default_rng(0).uniform(1.0, 1e3, 20000).astype(np.float32)
    scale = amax / np.float32(ref.fmax(fmt))
    over = [float(a) for a in amax[amax / scale > np.float32(ref.fmax(fmt))][:8]]
    assert bool(over) == (fmt != "e2m1")
    if over:
        x = torch.tensor([_pad([a, -a], fmt) for a in over], dtype=torch.float32)
        q = quantize_fp(x, fmt, x.shape[1])  # type: ignore[arg-type]
        for row in _codes(q):
            assert row[0] == top and row[1] == top | 1 << (ref.bits_of(fmt) - 1)
    spec = _fp_formats.FP_FORMATS[fmt]
    big = torch.tensor([ref.fmax(fmt) * 1.01, ref.fmax(fmt) * 4, 3e38, INF, -INF])
    encoded = _fp_formats.encode(big, spec, None).tolist()
    assert encoded == [top, top, top, top, top | 1 << (spec.bits - 1)]


def test_fp8_formats_give_quantize_fp8_codes() -> None:
    gen = torch.Generator().manual_seed(3)
    x = torch.randn(16, 32, generator=gen) * torch.logspace(-6, 6, 16)[:, None]
    x[0] = 0.0
    for fmt in ("e4m3", "e5m2"):
        q = quantize_fp(x, fmt, 32)  # type: ignore[arg-type]
        f8 = quantize_fp8(x, 32, fmt)  # type: ignore[arg-type]
        assert torch.equal(q.data, f8.data.view(torch.uint8)) and torch.equal(q.scale, f8.scale)
        assert torch.equal(dequantize_fp(q), f8.data.float() * f8.scale[:, None])


def test_tensor_reference_agrees_with_the_plain_one() -> None:
    """tests/_fp_reference's tensor rules (what the GPU tests compare the kernels with) give the
    plain reference's codes and bytes."""
    gen = torch.Generator().manual_seed(13)
    x = torch.randn(9, 12, generator=gen) * torch.logspace(-8, 8, 9)[:, None]
    x[0] = 0.0
    x[1, :3] = torch.tensor([1e-30, -0.0, 0.0])
    for fmt in ref.NAMES:
        codes, scale = ref.nearest_codes(x, fmt)
        packed = ref.pack_rows(codes, ref.bits_of(fmt))
        for g in range(9):
            want, want_scale, _ = ref.group_reference(x[g].tolist(), fmt)
            assert codes[g].tolist() == want and scale[g].item() == want_scale, (fmt, g)
            assert bytes(packed[g].tolist()) == ref.pack_bits(want, ref.bits_of(fmt))


# ----------------------------------------------------------------------------- layout, zeros, errors


@pytest.mark.parametrize(
    ("fmt", "values", "packed"),
    [
        # e3m2 codes 1.0 = 0b001100, -0.25 = 0b100100, 28 = 0b011111, 0.0625 = 0b000001:
        # 4 codes in 3 bytes, least significant bit first.
        ("e3m2", [1.0, -0.25, 28.0, 0.0625], None),
        ("e2m1", [6.0, -0.5, 1.5, 0.0], bytes([0x97, 0x03])),  # 0b0111, 0b1001, 0b0011, 0
        ("e4m7", [510.0, -1.0], None),
        ("e2m3", [7.5, 0.125, -1.0, 2.0], None),
    ],
)
def test_packing_layout(fmt: str, values: list[float], packed: bytes | None) -> None:
    x = torch.tensor([values])
    q = quantize_fp(x, fmt)  # type: ignore[arg-type]
    assert q.scale.item() == 1.0
    codes = [ref.nearest_code(v, fmt) for v in values]
    want = ref.pack_bits(codes, ref.bits_of(fmt))
    assert bytes(q.data[0].tolist()) == want
    if packed is not None:
        assert want == packed
    if fmt == "e3m2":
        assert codes == [0b001100, 0b100100, 0b011111, 0b000001]
        stream = 0b001100 | 0b100100 << 6 | 0b011111 << 12 | 0b000001 << 18
        assert want == stream.to_bytes(3, "little")


@pytest.mark.parametrize("fmt", ref.NAMES)
def test_zero_group_and_signed_zeros(fmt: str) -> None:
    x = torch.tensor([_pad([0.0, -0.0], fmt), _pad([-0.0, 2.0], fmt)])
    q = quantize_fp(x, fmt, x.shape[1])  # type: ignore[arg-type]
    assert q.scale[0].item() == 0.0 and all(c == 0 for c in _codes(q)[0])
    assert _codes(q)[1][0] == 1 << (ref.bits_of(fmt) - 1)  # -0 keeps its sign
    out = dequantize_fp(q)
    assert torch.equal(out[0], torch.zeros_like(out[0])) and math.copysign(1.0, out[1, 0].item()) < 0


@pytest.mark.parametrize("fmt", ref.NAMES)
def test_round_trip_error_bound(fmt: str) -> None:
    """|y - x| within half a step of the format at x / scale (a whole step when stochastic),
    times the scale, plus fp32 roundings."""
    _, m, bias, *_ = ref.FORMATS[fmt]
    x = torch.randn(64, 32, generator=torch.Generator().manual_seed(4)) * torch.logspace(-3, 3, 64)[:, None]
    for rounding, share in (("nearest", 0.5), ("stochastic", 1.0)):
        q = quantize_fp(x, fmt, 32, rounding=rounding, seed=1 if rounding == "stochastic" else None)  # type: ignore[arg-type]
        r = (x / q.scale[:, None]).abs().double()
        exponent = torch.floor(torch.log2(r.clamp(min=1e-30))).clamp(min=1 - bias)
        step = torch.exp2(exponent - m) * q.scale[:, None].double()
        err = (dequantize_fp(q).double() - x.double()).abs()
        assert torch.all(err <= share * step + 1e-6 * x.double().abs() + 1e-30), (fmt, rounding)


def test_bad_format_group_size_rounding_and_inputs() -> None:
    x = torch.randn(4, 8)
    with pytest.raises(ValueError, match=r"format must be one of .*did you mean 'e3m2'"):
        quantize_fp(x, "e3m2x")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="multiple of 4, got 6"):
        quantize_fp(torch.randn(4, 6), "e3m2")
    with pytest.raises(ValueError, match="multiple of 2, got 3"):
        quantize_fp(torch.randn(4, 6), "e4m7", group_size=3)
    with pytest.raises(ValueError, match="multiple of 2, got 5"):
        quantize_fp(torch.randn(10), "e2m1", group_size=5)
    with pytest.raises(ValueError, match="not a multiple of group_size"):
        quantize_fp(torch.randn(10), "e2m1", group_size=4)
    with pytest.raises(ValueError, match="rounding"):
        quantize_fp(x, "e2m1", rounding="up")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="stochastic"):
        quantize_fp(x, "e2m1", seed=3)
    with pytest.raises(ValueError, match="not both"):
        quantize_fp(x, "e2m1", rounding="stochastic", seed=3, generator=torch.Generator())
    with pytest.raises(ValueError, match="seed"):
        quantize_fp(x, "e2m1", rounding="stochastic", seed=2**64)
    with pytest.raises(TypeError, match="floating point"):
        quantize_fp(torch.ones(4, 8, dtype=torch.int32), "e2m1")
    assert quantize_fp(x, "e4m3", 1).data.shape == (32, 1)  # 8-bit codes: any group size


# ----------------------------------------------------------------------------- non-finite


def _non_finite() -> torch.Tensor:
    """One group per case, 4 elements each (as the FP8 edge tests)."""
    return torch.tensor(
        [
            [1.0, NAN, -2.0, 3.0],
            [1.0, INF, -2.0, 3.0],
            [INF, -INF, -2.0, 3.0],
            [1.0, 0.5, -2.0, 3.0],  # finite: untouched by its neighbours
        ]
    )


@pytest.mark.parametrize("fmt", ref.NAMES)
def test_nan_and_inf(fmt: str) -> None:
    """NaN: scale NaN, codes 0. Infinity: scale inf, signed zeros for the finite elements, and
    inf / inf's NaN as FP8's positive NaN code or 0 elsewhere. Both groups dequantize to NaN."""
    x = _non_finite()
    q = quantize_fp(x, fmt, 4)  # type: ignore[arg-type]
    codes = _codes(q)
    sign = 1 << (ref.bits_of(fmt) - 1)
    nan_code = ref.NAN_CODE.get(fmt, 0)
    assert math.isnan(q.scale[0].item()) and codes[0] == [0, 0, 0, 0]
    assert q.scale[1].item() == INF and codes[1] == [0, nan_code, sign, 0]
    assert q.scale[2].item() == INF and codes[2] == [nan_code, nan_code, sign, 0]
    assert torch.all(torch.isnan(dequantize_fp(q)[:3]))
    alone = quantize_fp(x[3:], fmt, 4)  # type: ignore[arg-type]
    assert torch.equal(q.data[3:], alone.data) and codes[3] == ref.group_reference(x[3].tolist(), fmt)[0]


# ----------------------------------------------------------------------------- stochastic


def test_philox_matches_random123_known_answers() -> None:
    for ctr, key, want in ref.PHILOX_KAT:
        assert tuple(ref.philox4x32_10(ctr, key)) == want
    # The module's words: element i takes word i % 4 of counter i // 4.
    seed = 0x299F31D0_A4093822
    words = _fp_formats.philox_words(11, seed, torch.device("cpu")).tolist()
    assert words == [ref.element_word(i, seed) for i in range(11)]
    assert _fp_formats.philox_words(4, 0, torch.device("cpu")).tolist() == list(ref.PHILOX_KAT[0][2])


@pytest.mark.parametrize("fmt", ref.NAMES)
def test_stochastic_codes_follow_the_documented_rule(fmt: str) -> None:
    """Every grid value and midpoint: the code is one of its two neighbours, and exactly the one
    the Philox word of its flat index selects (up when word < floor(2**32 * fraction))."""
    values = _pad(_grid_values(fmt), fmt)
    x = torch.tensor(values)[None].repeat(2, 1)
    seed = 12345 + ref.NAMES.index(fmt)
    q = quantize_fp(x, fmt, len(values), rounding="stochastic", seed=seed)  # type: ignore[arg-type]
    assert q.scale.tolist() == [1.0, 1.0]
    sign = 1 << (ref.bits_of(fmt) - 1)
    for g, row in enumerate(_codes(q)):
        for i, (v, code) in enumerate(zip(values, row)):
            lo, hi = ref.neighbours(min(abs(v), ref.fmax(fmt)), fmt)
            assert code & ~sign in (lo, hi) and bool(code & sign) == (math.copysign(1, v) < 0)
            assert code == ref.stochastic_code(v, fmt, ref.element_word(g * len(values) + i, seed)), (fmt, v)


@pytest.mark.parametrize("fmt", ref.NAMES)
def test_stochastic_rounding_is_unbiased(fmt: str) -> None:
    """The mean over many seeds approaches x (within 5 standard errors of a step), where nearest
    rounding stays a fixed distance away."""
    mags = ref.magnitudes(fmt)
    k = len(mags) // 2
    lo, hi = mags[k], mags[k + 1]
    fractions = [0.1, 0.25, 0.5, 0.75, 0.9]
    values = [lo + f * (hi - lo) for f in fractions]
    values = _pad([*values, *(-v for v in values), ref.fmax(fmt)], fmt)  # fmax: scale 1
    x = torch.tensor(values)[None].repeat(64, 1)
    n_seeds = 32
    total = torch.zeros_like(x, dtype=torch.float64)
    for seed in range(n_seeds):
        q = quantize_fp(x, fmt, x.shape[1], rounding="stochastic", seed=seed)  # type: ignore[arg-type]
        assert q.scale.eq(1.0).all()
        total += dequantize_fp(q).double()
    mean = total.mean(0) / n_seeds  # 64 rows x 32 seeds = 2048 draws per element
    bound = 5 * (hi - lo) / 2 / math.sqrt(64 * n_seeds)
    assert torch.all((mean - x[0].double()).abs() <= bound), (mean, x[0])
    nearest = dequantize_fp(quantize_fp(x[:1], fmt, x.shape[1]))[0].double()  # type: ignore[arg-type]
    assert (nearest[1] - x[0, 1].double()).abs() > 4 * bound  # nearest is a quarter step off here


def test_same_seed_same_codes_and_generators() -> None:
    x = torch.randn(8, 16, generator=torch.Generator().manual_seed(6))
    a = quantize_fp(x, "e2m1", rounding="stochastic", seed=7)
    assert torch.equal(a.data, quantize_fp(x, "e2m1", rounding="stochastic", seed=7).data)
    assert not torch.equal(a.data, quantize_fp(x, "e2m1", rounding="stochastic", seed=8).data)
    g1, g2 = torch.Generator().manual_seed(3), torch.Generator().manual_seed(3)
    b = quantize_fp(x, "e2m1", rounding="stochastic", generator=g1)
    assert torch.equal(b.data, quantize_fp(x, "e2m1", rounding="stochastic", generator=g2).data)
    # The generator advances: the next call rounds differently.
    assert not torch.equal(b.data, quantize_fp(x, "e2m1", rounding="stochastic", generator=g1).data)
    # The seed drawn is two 32-bit randint draws of the generator, low word first.
    low, high = torch.randint(0, 2**32, (2,), generator=torch.Generator().manual_seed(3)).tolist()
    assert torch.equal(b.data, quantize_fp(x, "e2m1", rounding="stochastic", seed=low | high << 32).data)
    torch.manual_seed(11)
    c = quantize_fp(x, "e2m1", rounding="stochastic")
    torch.manual_seed(11)
    assert torch.equal(c.data, quantize_fp(x, "e2m1", rounding="stochastic").data)
    # Nearest rounding draws nothing from the default generator.
    torch.manual_seed(11)
    quantize_fp(x, "e2m1")
    assert torch.equal(c.data, quantize_fp(x, "e2m1", rounding="stochastic").data)


# ----------------------------------------------------------------------------- selective dequantize


@pytest.mark.parametrize("fmt", ["e3m2", "e2m1", "e4m7", "e4m3"])
def test_selective_dequantize_matches_full_rows(fmt: str) -> None:
    x = torch.randn(5, 3, 8, generator=torch.Generator().manual_seed(8)).bfloat16()
    for group_size in (4, 8, 24):  # groups within a row, one per row's inner line, one per row
        q = quantize_fp(x, fmt, group_size)  # type: ignore[arg-type]
        full = dequantize_fp(q)
        for index in ([4, 0, 4, 2], torch.tensor([1], dtype=torch.int32), torch.arange(5).flip(0)):
            rows = torch.as_tensor(index, dtype=torch.int64)
            out = dequantize_fp(q, index=index)
            assert out.shape == (len(rows), 3, 8) and out.dtype == torch.bfloat16
            assert torch.equal(out, full[rows])
        assert dequantize_fp(q, torch.float32, index=[3]).dtype == torch.float32
        assert dequantize_fp(q, index=torch.empty(0, dtype=torch.long)).shape == (0, 3, 8)


def test_selective_dequantize_is_dequantize_fp_with_an_index() -> None:
    x = torch.randn(6, 16, generator=torch.Generator().manual_seed(9))
    q = quantize_fp(x, "e3m2", 16)
    picked = selective_dequantize(q, [5, 1], torch.float16)
    assert torch.equal(picked, dequantize_fp(q, torch.float16, index=[5, 1]))
    assert torch.equal(picked.float(), dequantize_fp(q)[[5, 1]].half().float())


def test_selective_dequantize_errors() -> None:
    q = quantize_fp(torch.randn(4, 6), "e2m1", 2)
    with pytest.raises(IndexError, match=r"index 4 is out of range for the 4 rows"):
        dequantize_fp(q, index=[0, 4])
    with pytest.raises(IndexError, match=r"index -1 is out of range"):
        dequantize_fp(q, index=torch.tensor([-1, 2]))
    with pytest.raises(ValueError, match="1-d"):
        dequantize_fp(q, index=torch.zeros(2, 2, dtype=torch.long))
    with pytest.raises(TypeError, match="integers"):
        dequantize_fp(q, index=torch.tensor([0.0]))
    with pytest.raises(TypeError, match="integers"):
        dequantize_fp(q, index=torch.tensor([True]))
    wide = quantize_fp(torch.randn(4, 6), "e2m1", 4)  # groups straddle rows of 6
    with pytest.raises(ValueError, match="not whole groups of 4"):
        dequantize_fp(wide, index=[0])
    scalar = quantize_fp(torch.tensor(2.0), "e4m3")
    with pytest.raises(ValueError, match="scalar"):
        dequantize_fp(scalar, index=[0])
    bad = dataclasses.replace(q, format="e9m9")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="format"):
        dequantize_fp(bad)


# ----------------------------------------------------------------------------- gpu_fp_format.h on the host

_CODEC_MAIN = r"""
#include <cstdio>
#include "gpu_fp_format.h"
template <int E, int M>
void decode_all() {
  for (unsigned c = 0; c < (1u << (1 + E + M)); ++c) std::printf("%a ", gpu_fpf::decode<E, M>(c));
  std::printf("\n");
}
int main() {
  int n = 0;
  if (std::scanf("%d", &n) != 1) return 1;
  for (int i = 0; i < n; ++i) {
    float v;
    unsigned random;
    int stochastic;
    if (std::scanf("%a %u %d", &v, &random, &stochastic) != 3) return 1;
    const bool s = stochastic != 0;
    std::printf("%u %u %u %u %u %u\n", gpu_fpf::encode<4, 3>(v, s, random),
                gpu_fpf::encode<5, 2>(v, s, random), gpu_fpf::encode<3, 2>(v, s, random),
                gpu_fpf::encode<2, 3>(v, s, random), gpu_fpf::encode<2, 1>(v, s, random),
                gpu_fpf::encode<4, 7>(v, s, random));
  }
  if (std::scanf("%d", &n) != 1) return 1;
  for (int i = 0; i < n; ++i) {
    unsigned c[4], k[2];
    if (std::scanf("%u %u %u %u %u %u", &c[0], &c[1], &c[2], &c[3], &k[0], &k[1]) != 6) return 1;
    const gpu_fpf::Words4 w = gpu_fpf::philox4x32_10(c[0], c[1], c[2], c[3], k[0], k[1]);
    std::printf("%u %u %u %u\n", w.v[0], w.v[1], w.v[2], w.v[3]);
  }
  decode_all<4, 3>();
  decode_all<5, 2>();
  decode_all<3, 2>();
  decode_all<2, 3>();
  decode_all<2, 1>();
  decode_all<4, 7>();
  std::printf("%a %a %a %a %a %a\n", gpu_fpf::Format<4, 3>::kMax, gpu_fpf::Format<5, 2>::kMax,
              gpu_fpf::Format<3, 2>::kMax, gpu_fpf::Format<2, 3>::kMax, gpu_fpf::Format<2, 1>::kMax,
              gpu_fpf::Format<4, 7>::kMax);
}
"""

_HOST_ORDER = ("e4m3", "e5m2", "e3m2", "e2m3", "e2m1", "e4m7")


@functools.cache
def _host_cases() -> list[tuple[float, int, bool]]:
    """(value, random word, stochastic): every format's grid values and midpoints, saturating and
    tiny values (fp32 denormals included), and for stochastic rounding words on both sides of
    each value's threshold in its format."""
    values: set[float] = {0.0, -0.0, 3e38, -3e38, INF, -INF, NAN, 1e-45, -1e-45, 1e-40, 2.0**-126, 2.0**-127}
    for fmt in _HOST_ORDER:
        values.update(_grid_values(fmt))
        values.update(v * 1.0000001 for v in ref.magnitudes(fmt)[1:])
    gen = torch.Generator().manual_seed(12)
    values.update((torch.randn(500, generator=gen) * torch.logspace(-12, 4, 500)).tolist())
    cases: list[tuple[float, int, bool]] = []
    ordered = sorted(values, key=lambda t: (math.isnan(t), t))
    words = torch.randint(0, 2**32, (len(ordered),), generator=gen).tolist()
    for i, (v, word) in enumerate(zip(ordered, words)):
        v = ref.f32(v)
        cases += [(v, 0, False), (v, word, True)]
        if math.isfinite(v) and i % 3 == 0:  # a third of them: enough thresholds of every kind
            for fmt in ("e2m1", "e4m7"):  # thresholds of a coarse and a fine format
                a = min(abs(v), ref.fmax(fmt))
                lo, hi = ref.neighbours(a, fmt)
                if lo != hi:
                    mags = ref.magnitudes(fmt)
                    t = math.floor((a - mags[lo]) / (mags[hi] - mags[lo]) * 2**32)
                    cases += [(v, max(t - 1, 0), True), (v, min(t, 2**32 - 1), True)]
    return cases


@functools.cache
def _host_expected(fmt: str) -> list[int]:
    """The reference's code of each of _host_cases() in ``fmt``."""
    return [ref.stochastic_code(v, fmt, w) if s else ref.nearest_code(v, fmt) for v, w, s in _host_cases()]


def test_torch_encoder_matches_reference_at_the_thresholds() -> None:
    """The fallback's encoder (kernels.quantization._fp_formats) on the cases of the host test below: random
    words on both sides of each stochastic threshold, which seeded runs almost never hit."""
    cases = _host_cases()
    values = torch.tensor([v for v, _, _ in cases], dtype=torch.float32)
    words = torch.tensor([w for _, w, _ in cases], dtype=torch.int64)
    stochastic = torch.tensor([s for _, _, s in cases])
    for fmt in _HOST_ORDER:
        spec = _fp_formats.FP_FORMATS[fmt]
        got = torch.where(
            stochastic, _fp_formats.encode(values, spec, words), _fp_formats.encode(values, spec, None)
        )
        assert got.tolist() == _host_expected(fmt), fmt
    codes = torch.arange(1 << 12)
    for fmt in _HOST_ORDER:
        spec = _fp_formats.FP_FORMATS[fmt]
        got_values = _fp_formats.decode(codes[: 1 << spec.bits], spec).tolist()
        for code, got_value in enumerate(got_values):
            want_value = ref.value_of(code, fmt)
            assert (math.isnan(got_value) and math.isnan(want_value)) or got_value == want_value, (fmt, code)


@pytest.mark.skipif(
    shutil.which("g++") is None,
    reason="g++ not found: cannot build the codec test program (apt-get install g++)",
)
def test_device_encoder_matches_reference_on_the_host(tmp_path: Path) -> None:
    """gpu_fp_format.h (what the kernels run), compiled for the host: encode (both roundings),
    decode of every code, fmax and Philox against the reference."""
    source = tmp_path / "codec.cpp"
    source.write_text(_CODEC_MAIN)
    binary = tmp_path / "codec"
    subprocess.run(["g++", "-O2", "-std=c++17", *FP_INCLUDES, str(source), "-o", str(binary)], check=True)
    cases = _host_cases()
    kat = [(*ctr, *key) for ctr, key, _ in ref.PHILOX_KAT] + [(i, 0, 0, 0, 77, 5) for i in range(3)]
    text = f"{len(cases)}\n" + "".join(f"{float(np.float32(v)).hex()} {w} {int(s)}\n" for v, w, s in cases)
    text += f"{len(kat)}\n" + "".join(" ".join(map(str, k)) + "\n" for k in kat)
    lines = subprocess.run(
        [str(binary)], input=text, capture_output=True, text=True, check=True
    ).stdout.splitlines()
    assert len(lines) == len(cases) + len(kat) + len(_HOST_ORDER) + 1
    got = [list(map(int, line.split())) for line in lines[: len(cases)]]
    for f, fmt in enumerate(_HOST_ORDER):
        assert [codes[f] for codes in got] == _host_expected(fmt), fmt
    lines = lines[len(cases) :]
    for (_, _, want), line in zip(ref.PHILOX_KAT, lines):
        assert tuple(map(int, line.split())) == want
    for i, line in enumerate(lines[len(ref.PHILOX_KAT) : len(kat)]):
        assert list(map(int, line.split())) == ref.philox4x32_10((i, 0, 0, 0), (77, 5))
    lines = lines[len(kat) :]
    for fmt, line in zip(_HOST_ORDER, lines):
        for code, text_value in enumerate(line.split()):
            got_value = math.nan if "nan" in text_value else float.fromhex(text_value)
            want_value = ref.value_of(code, fmt)
            assert (math.isnan(got_value) and math.isnan(want_value)) or got_value == want_value, (fmt, code)
    assert [float.fromhex(t) for t in lines[len(_HOST_ORDER)].split()] == [ref.fmax(f) for f in _HOST_ORDER]
