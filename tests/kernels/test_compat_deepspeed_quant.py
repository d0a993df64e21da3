"""kernels.compat.deepspeed's quantizers: ``ds_quantizer`` and ``FP_Quantize`` with DeepSpeed's numerics.

References: plain Python loops over the elements, written from DeepSpeed's sources
(csrc/quantization/fake_quantizer.cu and deepspeed/ops/quantizer/quantizer.py;
csrc/fp_quantizer/fp_quantize_impl.cu, fp_quantize.cpp and deepspeed/ops/fp_quantizer/quantize.py),
never from the module under test or kernels.quantization: Python floats, fp32 rounding through
``struct``, the kernels' fused multiply-add exactly through ``fractions``, and the FP formats
through ``math.frexp`` where the module works on bits. Results are compared exactly: both sides
do the same fp32 operations, so a wrong grid, rounding or scale shows as a mismatch.
"""

from __future__ import annotations

import inspect
import math
import struct
from fractions import Fraction
from typing import Any

import pytest
import torch
from torch import Tensor

from kernels import quantization as native
from kernels.compat import deepspeed as ds

pytestmark = pytest.mark.filterwarnings("ignore:.*using the PyTorch fallback:RuntimeWarning")

DTYPES = (torch.float32, torch.float16, torch.bfloat16)
EMPTY = inspect.Parameter.empty


# ------------------------------------------------------------------ fp32 arithmetic in Python


def f32(v: float) -> float:
    """The float32 nearest ``v`` (struct rounds to nearest even). A float32 +, -, *, / done in
    double and rounded to float32 this way is the float32 operation (double has > 2 * 24 + 2 bits)."""
    return float(struct.unpack("<f", struct.pack("<f", v))[0])


def f32_exact(x: Fraction) -> float:
    """The float32 nearest the exact value ``x`` (normal range), ties to even."""
    if x == 0:
        return 0.0
    sign, a = (-1.0 if x < 0 else 1.0), abs(x)
    e = a.numerator.bit_length() - a.denominator.bit_length()
    if a < Fraction(2) ** e:
        e -= 1
    scaled = a / Fraction(2) ** (e - 23)  # in [2**23, 2**24)
    whole = math.floor(scaled)
    rest = scaled - whole
    if rest > Fraction(1, 2) or (rest == Fraction(1, 2) and whole % 2 == 1):
        whole += 1
    return sign * math.ldexp(whole, e - 23)


def fma32(a: float, b: float, c: float) -> float:
    return f32_exact(Fraction(a) * Fraction(b) + Fraction(c))


# ------------------------------------------------------------------ ds_quantizer references


def ref_symmetric(values: list[float], groups: int, bits: int) -> list[float]:
    """fake_quantize_kernel: q_scale = 2**b / (2 max + 1e-5) in double, stored as a float;
    __float2int_rn(x * q_scale) clamped to [-2**(b-1), 2**(b-1) - 1]; times 1 / q_scale."""
    n, out = len(values) // groups, []
    for g in range(groups):
        group = values[g * n : (g + 1) * n]
        m = max(abs(v) for v in group)
        s = f32(2**bits / (f32(2 * m) + 1e-5))
        inv = f32(1 / s)
        for v in group:
            q = round(f32(v * s))  # Python rounds half to even, as __float2int_rn
            q = min(max(q, -(2 ** (bits - 1))), 2 ** (bits - 1) - 1)
            out.append(f32(q * inv))
    return out


def ref_asymmetric(values: list[float], groups: int, bits: int, bounds: bool = True) -> list[float]:
    """fake_quantize_kernel_asym: min / max start at 10000 / -10000; q_scale = (max - min + 1e-5)
    / 2**b; roundf((x - min) * (1 / q_scale)), no clamp; q * q_scale + min (one fused rounding)."""
    n, out = len(values) // groups, []
    for g in range(groups):
        group = values[g * n : (g + 1) * n]
        lo, hi = min(group), max(group)
        if bounds:
            lo, hi = min(lo, 10000.0), max(hi, -10000.0)
        s = f32((f32(hi - lo) + 1e-5) / 2**bits)
        inv = f32(1 / s)
        for v in group:
            q = math.floor(f32(f32(v - lo) * inv) + 0.5)  # roundf; the operand is >= 0 here
            out.append(fma32(q, s, lo))
    return out


def run_ds(x: Tensor, groups: int, bits: int, asym: bool, sr: bool = False) -> Tensor:
    return ds.ds_quantizer(x.clone(), groups, bits, sr=sr, asym=asym)


def expected(ref: list[float], like: Tensor) -> Tensor:
    # The kernels round their fp32 result to the output dtype once, to nearest even.
    return torch.tensor(ref, dtype=torch.float32).to(like.dtype).reshape(like.shape)


def sample(dtype: torch.dtype, shape: tuple[int, ...] = (4, 64), seed: int = 0, shift: float = 0.0) -> Tensor:
    gen = torch.Generator().manual_seed(seed)
    scales = torch.tensor([0.01, 1.0, 30.0, 0.5]).repeat_interleave(shape[-1] * shape[0] // 4)
    x = torch.randn(shape, generator=gen) * scales.reshape(shape) + shift
    return x.to(dtype)


# ------------------------------------------------------------------ signatures


def _described(fn: Any, skip_self: bool) -> list[tuple[str, Any]]:
    params = list(inspect.signature(fn).parameters.values())[1 if skip_self else 0 :]
    return [(p.name, p.default) for p in params]


def test_signatures_are_deepspeeds() -> None:
    # deepspeed/ops/quantizer/quantizer.py and deepspeed/ops/fp_quantizer/quantize.py.
    assert _described(ds.ds_quantizer, False) == [
        ("input", EMPTY), ("groups", 1), ("bit_num", 8), ("sr", False), ("asym", False),
    ]  # fmt: skip
    fpq = ds.FP_Quantize
    assert _described(fpq, False) == [("quantization_config", EMPTY)]
    assert _described(fpq.quantize, True) == [
        ("input", EMPTY), ("q_bits", 8), ("q_mantisa_bits", 3), ("stochastic_mode", False),
        ("return_meta_tensor", False),
    ]  # fmt: skip
    assert _described(fpq.dequantize, True) == [
        ("input_q", EMPTY), ("fp_out", None), ("q_bits", 8), ("q_mantisa_bits", 3), ("scale", None),
    ]  # fmt: skip
    assert _described(fpq.selective_dequantize, True) == [
        ("input_q", EMPTY), ("indexes", EMPTY), ("fp_out", None), ("q_bits", 8), ("q_mantisa_bits", 3),
        ("scale", None),
    ]  # fmt: skip
    c = ds.QuantizationConfig()  # deepspeed/linear/config.py
    assert (c.q_bits, c.mantissa_bits, c.group_size, c.q_dtype) == (8, 3, 512, torch.uint8)


# ------------------------------------------------------------------ ds_quantizer: nearest


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("bits", [4, 8])
@pytest.mark.parametrize("groups", [1, 4])
def test_symmetric_matches_deepspeeds_rule(dtype: torch.dtype, bits: int, groups: int) -> None:
    x = sample(dtype)
    out = run_ds(x, groups, bits, asym=False)
    assert out.dtype == dtype and out.shape == x.shape
    assert torch.equal(out, expected(ref_symmetric(x.flatten().tolist(), groups, bits), x))


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("bits", [4, 8])
@pytest.mark.parametrize("groups", [1, 4])
def test_asymmetric_matches_deepspeeds_rule(dtype: torch.dtype, bits: int, groups: int) -> None:
    x = sample(dtype, shift=2.0)
    out = run_ds(x, groups, bits, asym=True)
    assert out.dtype == dtype and out.shape == x.shape
    assert torch.equal(out, expected(ref_asymmetric(x.flatten().tolist(), groups, bits), x))


def test_grid_has_2_to_the_bits_steps_not_ours() -> None:
    # 8 bits, max 1: q_scale = 256 / 2.00001, so 1 -> code 128, clamped to 127, and -1 -> -128.
    s = f32(256 / 2.00001)
    out = run_ds(torch.tensor([1.0, -1.0, 0.5, 0.0]), 1, 8, asym=False)
    assert out.tolist() == [f32(127 * f32(1 / s)), f32(-128 * f32(1 / s)), f32(64 * f32(1 / s)), 0.0]
    # Our native grid (2**b - 1 steps, scale max / 127) keeps 1 and -1 exactly: it would fail here.
    x = sample(torch.float32)
    ref = expected(ref_symmetric(x.flatten().tolist(), 4, 8), x)
    ours = native.dequantize(native.quantize(x, 8, group_size=64, symmetric=True, use_kernel=False))
    assert not torch.equal(ours, ref)
    assert torch.equal(run_ds(x, 4, 8, asym=False), ref)


def test_asymmetric_grid_has_2_to_the_bits_plus_one_levels() -> None:
    # Codes run 0 .. 2**b with no clamp: the max lands on code 2**b (16 at 4 bits), not 2**b - 1.
    x = torch.linspace(0.0, 1.0, 64)
    out = run_ds(x, 1, 4, asym=True)
    assert out.unique().numel() == 17
    assert torch.equal(out, expected(ref_asymmetric(x.tolist(), 1, 4), x))
    ours = native.dequantize(native.quantize(x, 4, group_size=64, symmetric=False, use_kernel=False))
    assert ours.unique().numel() == 16


def _ties(scaled: Any, step: float, lo: float) -> list[tuple[float, int]]:
    """fp32 values x (near lo + (k + 1/2) * step, k even) whose scaled fp32 value is exactly k + 1/2."""
    found = []
    for k in range(0, 120, 2):
        x = f32(lo + (k + 0.5) * step)
        for _ in range(4):
            if scaled(x) == k + 0.5:
                found.append((x, k))
                break
            x = math.nextafter(x, math.inf)
    return found


def test_ties_round_as_the_kernels_do() -> None:
    # __float2int_rn in the symmetric kernel: half to even, so an even k + 1/2 gives k.
    s = f32(256 / (2 * 1.0 + 1e-5))
    ties = _ties(lambda x: f32(x * s), 1 / s, 0.0)
    assert len(ties) >= 3
    x = torch.tensor([1.0] + [t for t, _ in ties])
    out = run_ds(x, 1, 8, asym=False)
    assert torch.equal(out, expected(ref_symmetric(x.tolist(), 1, 8), x))
    assert [round(v * s) for v in out.tolist()[1:]] == [k for _, k in ties]
    # roundf in the asymmetric kernel: half away from zero, so an even k + 1/2 gives k + 1.
    step = f32((f32(1.0 - 0.0) + 1e-5) / 256)
    ties = _ties(lambda x: f32(f32(x - 0.0) * f32(1 / step)), step, 0.0)
    assert len(ties) >= 3
    x = torch.tensor([0.0, 1.0] + [t for t, _ in ties])
    out = run_ds(x, 1, 8, asym=True)
    assert torch.equal(out, expected(ref_asymmetric(x.tolist(), 1, 8), x))
    assert [round(v / step) for v in out.tolist()[2:]] == [k + 1 for _, k in ties]


def test_asymmetric_keeps_the_kernels_10000_bounds() -> None:
    # A group wholly above 10000 is measured from 10000, the kernel's starting min (fp32 input).
    x = torch.tensor([20000.0, 20001.5, 20003.0, 20007.25])
    out = run_ds(x, 1, 8, asym=True)
    assert torch.equal(out, expected(ref_asymmetric(x.tolist(), 1, 8), x))
    assert not torch.equal(out, expected(ref_asymmetric(x.tolist(), 1, 8, bounds=False), x))


@pytest.mark.parametrize("asym", [False, True])
@pytest.mark.parametrize("sr", [False, True])
def test_zero_groups_stay_zero(asym: bool, sr: bool) -> None:
    x = sample(torch.float16)
    x[1] = 0.0
    x[3] = 0.0
    out = run_ds(x, 4, 8, asym=asym, sr=sr)
    assert torch.equal(out[1], torch.zeros_like(out[1])) and torch.equal(out[3], torch.zeros_like(out[3]))
    assert not torch.isnan(out).any()
    if not sr:
        ref = (ref_asymmetric if asym else ref_symmetric)(x.flatten().tolist(), 4, 8)
        assert torch.equal(out, expected(ref, x))


def test_fp32_output_is_not_rounded_to_integers() -> None:
    # DeepSpeed's fp32 symmetric kernel applies roundf() to its output (a bug kept out of here).
    x = torch.tensor([0.3, -0.2, 0.1, 0.05])
    out = run_ds(x, 1, 8, asym=False)
    assert torch.equal(out, expected(ref_symmetric(x.tolist(), 1, 8), x))
    assert out.abs().max() > 0


def test_in_place_round_trip_shapes_and_dtypes() -> None:
    for dtype in DTYPES:
        x = sample(dtype, shape=(4, 64)).reshape(2, 2, 64)
        before = x.clone()
        out = ds.ds_quantizer(x, groups=8, bit_num=8)
        assert out is x and out.shape == (2, 2, 64) and out.dtype == dtype  # DeepSpeed overwrites input
        assert not torch.equal(x, before)
    # A non-contiguous view is grouped in its logical order and written back through the view.
    base = sample(torch.float32, shape=(64, 4))
    view = base.t()
    want = run_ds(view.contiguous(), 4, 8, asym=False)
    ds.ds_quantizer(view, 4, 8)
    assert torch.equal(base.t(), want)
    # Autograd leaves are written outside autograd, as DeepSpeed's kernel does.
    leaf = torch.nn.Parameter(sample(torch.float32))
    assert ds.ds_quantizer(leaf, 4, 8) is leaf


def test_nonfinite_group_comes_out_nan() -> None:
    x = sample(torch.float32)
    x[2, 5] = torch.nan
    x[0, 7] = torch.inf
    out = run_ds(x, 4, 8, asym=False)
    assert torch.isnan(out[0]).all() and torch.isnan(out[2]).all()
    rest = x[[1, 3]]
    assert torch.equal(out[[1, 3]], expected(ref_symmetric(rest.flatten().tolist(), 2, 8), rest))


# ------------------------------------------------------------------ ds_quantizer: stochastic rounding


def _sr_case(asym: bool, bits: int) -> tuple[list[float], float, float]:
    """A group [lo or -max, max, values at 0.1 .. 0.9 of a step] and its scale (step 1/s or s)."""
    if asym:
        lo, hi = -0.5, 1.5
        s = f32((f32(hi - lo) + 1e-5) / 2**bits)  # the step
        vals = [f32(lo + (3 + f) * s) for f in (0.1, 0.3, 0.5, 0.7, 0.9)]
        return [lo, hi, *vals, f32(lo + 5.5 * s)], s, lo
    s = f32(2**bits / (2 * 1.0 + 1e-5))
    vals = [f32((k + f) / s) for k, f in ((2, 0.1), (-3, 0.3), (1, 0.5), (-1, 0.7), (0, 0.9))]
    return [-1.0, 1.0, *vals, f32(0.2 / s)], 1 / s, 0.0


@pytest.mark.parametrize("asym", [False, True])
@pytest.mark.parametrize("bits", [4, 8])
def test_stochastic_rounding_is_unbiased_between_neighbours(asym: bool, bits: int) -> None:
    group, step, lo = _sr_case(asym, bits)
    draws = 20000
    torch.manual_seed(0)
    x = torch.tensor(group).repeat(draws)  # one group per draw: each draws independently
    out = run_ds(x, draws, bits, asym=asym, sr=True).reshape(draws, len(group))
    for j, v in enumerate(group[2:], start=2):
        below = math.floor((v - lo) / step) if asym else math.trunc(v / step)
        grid = {round((o - lo) / step) for o in out[:, j].unique().tolist()}
        near = {below, below + 1} if asym or v > 0 else {below, below - 1}
        assert grid <= near, (v, grid, near)  # only the two neighbours on the grid
        # Each draw moves by one step w.p. the fraction: the mean is v, within 6 standard errors.
        mean = out[:, j].double().mean().item()
        assert abs(mean - v) <= 6 * 0.5 * step / math.sqrt(draws) + 1e-6, (v, mean)


def test_stochastic_rounding_differs_from_nearest() -> None:
    x = sample(torch.float32)
    torch.manual_seed(1)
    sr1, sr2 = run_ds(x, 4, 4, asym=False, sr=True), run_ds(x, 4, 4, asym=False, sr=True)
    nearest = run_ds(x, 4, 4, asym=False)
    assert not torch.equal(sr1, nearest) and not torch.equal(sr1, sr2)
    assert (sr1 != nearest).float().mean() > 0.1


# ------------------------------------------------------------------ ds_quantizer: arguments


def test_bad_arguments_raise_value_error() -> None:
    x = torch.randn(10)
    with pytest.raises(ValueError, match=r"groups \(3\) must divide the input's 10 elements"):
        ds.ds_quantizer(x, groups=3)
    with pytest.raises(ValueError, match="groups must be a positive int"):
        ds.ds_quantizer(x, groups=0)
    for bits in (1, 17, 8.0, True):
        with pytest.raises(ValueError, match="bit_num must be an int from 2 to 16"):
            ds.ds_quantizer(x, bit_num=bits)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="floating point"):
        ds.ds_quantizer(torch.arange(8), groups=2)
    assert torch.equal(x, x.clone())  # nothing written on a refusal


# ------------------------------------------------------------------ FP_Quantize references

# q_bits, q_mantisa_bits as DeepSpeed is called -> (exponent bits, mantissa bits, q_range).
FORMATS = {(8, 3): (4, 3, 480.0), (8, 2): (5, 2, 114688.0), (12, 4): (4, 7, 510.0), (6, 2): (3, 2, 28.0)}
FORMATS[(4, 1)] = (2, 1, 6.0)


def ref_fp_value(v: float, exp_bits: int, man_bits: int) -> float:
    """DeepSpeed's rounding of a (scaled) fp32 value: to man_bits, half an ulp added then cut
    (ties away from zero); the top exponent is a normal binade; below the smallest normal, that
    normal (its clip()); 0 stays 0 (DeepSpeed's wrapped-exponent 2.0 is a bug left out)."""
    if v == 0:
        return v
    e = math.frexp(abs(v))[1]  # |v| in [2**(e-1), 2**e)
    quantum = math.ldexp(1.0, e - 1 - man_bits)
    r = math.floor(abs(v) / quantum + 0.5) * quantum
    bias = 2 ** (exp_bits - 1) - 1
    r = max(r, math.ldexp(1.0, 1 - bias))
    r = min(r, math.ldexp(2 - 2.0**-man_bits, 2**exp_bits - 1 - bias))
    return math.copysign(r, v)


def ref_fp(values: list[float], size: int, fmt: tuple[int, int, float]) -> tuple[list[float], list[float]]:
    """Dequantized values and per-group scales: codes of x * f32(q_range / max), times f32(max / q_range)."""
    exp_bits, man_bits, q_range = fmt
    out, scales = [], []
    for g in range(len(values) // size):
        group = values[g * size : (g + 1) * size]
        m = max(abs(v) for v in group)
        up, down = f32(q_range / m), f32(m / q_range)
        scales.append(down)
        out += [f32(ref_fp_value(f32(v * up), exp_bits, man_bits) * down) for v in group]
    return out, scales


def fpq(group_size: int = 64) -> Any:
    config = ds.QuantizationConfig()
    config.group_size = group_size
    return ds.FP_Quantize(config)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("bits", list(FORMATS), ids=lambda b: f"q{b[0]}m{b[1]}")
def test_fp_quantize_matches_deepspeeds_rule(dtype: torch.dtype, bits: tuple[int, int]) -> None:
    q_bits, q_mantisa_bits = bits
    x = sample(dtype, shape=(4, 64))
    q = fpq(64)
    out = q.quantize(x, q_bits=q_bits, q_mantisa_bits=q_mantisa_bits)
    assert out.dtype == torch.uint8 and out.shape == (4, 64 * q_bits // 8 + 4)
    values, scales = ref_fp(x.flatten().tolist(), 64, FORMATS[bits])
    assert out[:, -4:].contiguous().view(torch.float32).flatten().tolist() == scales
    back = q.dequantize(out, q_bits=q_bits, q_mantisa_bits=q_mantisa_bits)
    assert back.dtype == dtype and back.shape == x.shape
    assert torch.equal(back, expected(values, x))


def test_e4m3_goes_to_480_where_ocp_stops_at_448() -> None:
    # Scale 1 (the max is 480): the top binade [256, 480] has steps of 32, and 480 is code 0x7f
    # (NaN in OCP's e4m3fn). Ours saturates at 448, which would fail the DeepSpeed reference.
    x = torch.tensor([480.0, 470.0, 460.0, -475.0, 1.0, -1.0, 0.015625, 3.0])
    q = fpq(8)
    out = q.quantize(x)
    assert out[0, :8].tolist() == [0x7F, 0x7F, 0x7E, 0xFF, 0x38, 0xB8, 0x08, 0x44]
    assert q.dequantize(out).tolist() == [480.0, 480.0, 448.0, -480.0, 1.0, -1.0, 0.015625, 3.0]
    ocp = native.quantize_fp8(x, group_size=8, format="e4m3", use_kernel=False)
    assert ocp.data.float().max().item() == 448.0  # the max maps to 448 there: another grid
    assert not torch.equal(native.dequantize_fp8(ocp), q.dequantize(out))
    e5m2 = fpq(8).quantize(x, q_mantisa_bits=2)
    assert e5m2[0, 0].item() == 0x7F  # 114688, the top of DeepSpeed's e5m2 (OCP: inf)


def test_fp_small_values_clip_to_the_smallest_normal_and_zero_stays_zero() -> None:
    # Scale 1; 100 is halfway between 96 and 104 and goes away from zero.
    x = torch.tensor([480.0, 1e-3, -1e-4, 0.0, -0.0, 2.0**-7, 0.5, 100.0])
    q = fpq(8)
    got = q.dequantize(q.quantize(x)).tolist()
    assert got == [480.0, 0.015625, -0.015625, 0.0, 0.0, 0.015625, 0.5, 104.0]
    zero = torch.zeros(2, 8)
    z = fpq(8)
    assert torch.equal(z.dequantize(z.quantize(zero)), zero)  # an all-zero group: scale 0, values 0


def test_fp4_and_fp6_pack_low_bits_first() -> None:
    q = fpq(4)
    out = q.quantize(torch.tensor([6.0, 1.0, -6.0, 1.5]), q_bits=4)
    # e2m1 codes 0x7 (6), 0x2 (1), 0xf (-6), 0x3 (1.5): element 2i in the low nibble.
    assert out[0, :2].tolist() == [0x27, 0x3F]
    out6 = fpq(4).quantize(torch.tensor([28.0, 1.0, -28.0, 0.25]), q_bits=6)
    stream = int.from_bytes(bytes(out6[0, :3].tolist()), "little")
    assert [(stream >> (6 * i)) & 0x3F for i in range(4)] == [0x1F, 0x0C, 0x3F, 0x04]


def test_meta_tensor_get_scales_and_fp_out() -> None:
    x = sample(torch.bfloat16, shape=(4, 64))
    q = fpq(64)
    packed = q.quantize(x)
    full = q.dequantize(packed)
    data, scale = q.quantize(x, return_meta_tensor=True)
    assert data.dtype == torch.uint8 and data.shape == x.shape and scale.shape == (4, 4)
    assert torch.equal(q.dequantize(data, scale=scale), full)  # DeepSpeed's call with the meta tensor
    floats = q.get_scales()
    assert floats.shape == (4, 1) and floats.dtype == torch.float32
    assert torch.equal(q.dequantize(data, scale=floats), full)
    out = torch.empty(4, 64, dtype=torch.float32)
    assert q.dequantize(packed, fp_out=out) is out
    assert torch.equal(out.bfloat16(), full)


def test_selective_dequantize_picks_slices() -> None:
    x = sample(torch.bfloat16, shape=(4, 128)).reshape(4, 2, 64)
    q = fpq(64)
    packed = q.quantize(x)
    full = q.dequantize(packed)
    picked = q.selective_dequantize(packed, torch.tensor([3, 1], dtype=torch.int32))
    assert picked.shape == (2, 2, 64) and torch.equal(picked, full[[3, 1]])


def test_fp_nonfinite_group_comes_out_nan() -> None:
    x = sample(torch.float32, shape=(2, 64))
    x[1, 3] = torch.nan
    q = fpq(64)
    back = q.dequantize(q.quantize(x))
    assert torch.isnan(back[1]).all() and not torch.isnan(back[0]).any()


def test_stochastic_mode_adds_a_poisson_draw_to_the_dropped_bits() -> None:
    # DeepSpeed's stochastic mode adds Poisson(10) & mask to the 20 dropped mantissa bits (e4m3):
    # a value 5 below the rounding point rounds up w.p. P(Poisson(10) >= 5); one exactly halfway
    # never does. Nearest rounding (all up) or unbiased stochastic rounding (1 - 5 / 2**20, and
    # 1/2 at halfway) would both fail.
    near = 1.0 + (2**20 - 5) * 2.0**-23
    half = 1.0 + 2**19 * 2.0**-23
    draws = 4000
    x = torch.tensor([480.0, near, half, -480.0]).repeat(draws)  # fp32: scale 1, bits as written
    torch.manual_seed(0)
    q = fpq(4)
    back = q.dequantize(q.quantize(x, stochastic_mode=True)).reshape(draws, 4)
    assert set(back[:, 1].tolist()) <= {1.0, 1.125} and set(back[:, 2].tolist()) == {1.0}
    p = 1 - sum(math.exp(-10) * 10**k / math.factorial(k) for k in range(5))
    up = (back[:, 1] == 1.125).double().mean().item()
    assert abs(up - p) <= 6 * math.sqrt(p * (1 - p) / draws), (up, p)
    nearest = q.dequantize(q.quantize(x)).reshape(draws, 4)
    assert set(nearest[:, 1].tolist()) == {1.125} and set(nearest[:, 2].tolist()) == {1.125}


def test_fp_bad_arguments() -> None:
    x = torch.randn(128, dtype=torch.bfloat16)
    q = fpq(64)
    with pytest.raises(RuntimeError, match="call quantize before dequantizing"):
        q.dequantize(torch.zeros(2, 68, dtype=torch.uint8))
    with pytest.raises(ValueError, match="q_bits must be 8, 12, 6 or 4"):
        q.quantize(x, q_bits=7)
    with pytest.raises(ValueError, match=r"q_mantisa_bits 3 \(e4m3\) or 2"):
        q.quantize(x, q_mantisa_bits=4)
    with pytest.raises(ValueError, match="return_meta_tensor needs q_bits=8"):
        q.quantize(x, q_bits=6, return_meta_tensor=True)
    with pytest.raises(ValueError, match="not a multiple of group_size 64"):
        q.quantize(torch.randn(100, dtype=torch.bfloat16))
    with pytest.raises(ValueError, match="not whole bytes"):
        fpq(3).quantize(torch.randn(6), q_bits=4)
    with pytest.raises(TypeError, match="bf16, fp16 or fp32"):
        q.quantize(torch.arange(128))
    packed = q.quantize(x)
    with pytest.raises(ValueError, match="expected 2 groups"):
        q.dequantize(packed[:1])
