"""Self-tests of the ``quantizer`` (int8 / int4) and ``fp_quantizer`` (FP8, and the packed small
float formats) ops, through
``kernels.quantization`` with ``use_kernel=True``.

The references apply the documented rules directly, written out here in fp32:

* symmetric: ``scale = max|x| / qmax``, ``q = clamp(round(x / scale), -qmax, qmax)``;
* asymmetric: ``scale = (max - min) / (2**bits - 1)``, ``offset = min``,
  ``q = clamp(round((x - min) / scale), 0, 2**bits - 1)``;
* FP8: ``scale = max|x| / fmax``, ``q = float8(clamp(x / scale, -fmax, fmax))`` by torch's own cast;
* packed small floats (``quantize_fp``: FP8, FP6 e3m2 / e2m3, FP4 e2m1, 12-bit e4m7): the same
  scale, each code the nearest of the format's values (enumerated here from its exponent and
  mantissa bits) to ``x / scale``, saturating at fmax, packed least significant bit first;

with round-half-to-even and code 0 for a group whose scale is 0. The op promises codes and
scales bit-identical to these rules, so they are compared exactly; dequantized values within
the output dtype's tolerance. Stochastic rounding draws documented Philox words, which the
PyTorch fallback draws too: its codes must equal the fallback's for the same seed; and rows
dequantized through an index must equal those rows of the whole. Groups: 37 of them (no
multiple of the groups a block handles), of sizes 1, 7, 127 and 4097 (int4: the even 2, 6, 128,
4098; packed formats: n, 3n, 128 and 4096 + n for n the fewest codes that fill whole bytes);
the first group is all zeros (scale 0) and the second constant (max == min). int8 and e3m2 also
run once over ~1M elements.
"""

from __future__ import annotations

import torch
from torch import Tensor

from kernels.quantization.fp_quantizer import dequantize_fp, quantize_fp
from kernels.quantization.quantizer import dequantize, dequantize_fp8, quantize, quantize_fp8
from op_builder.selftest.harness import EXACT, GPU_TOLERANCE, SelfTestContext

GROUPS = 37
GROUP_SIZES = (1, 7, 127, 4097)
EVEN_GROUP_SIZES = (2, 6, 128, 4098)
LARGE = (257, 4097)  # ~1.05M elements
FP8_MAX = {"e4m3": 448.0, "e5m2": 57344.0}
FP8_DTYPE = {"e4m3": torch.float8_e4m3fn, "e5m2": torch.float8_e5m2}


def _name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


def _input(ctx: SelfTestContext, dtype: torch.dtype, groups: int, size: int) -> Tensor:
    gen = torch.Generator(device=ctx.device).manual_seed(groups * 7 + size)
    x = torch.randn(groups, size, device=ctx.device, generator=gen) * 4
    x[0] = 0.0
    if size > 1:
        x[1] = 3.0
    return x.to(dtype)


def _nonzero(scale: Tensor) -> Tensor:
    return torch.where(scale > 0, scale, torch.ones_like(scale))


def _div(t: Tensor, divisor: float) -> Tensor:
    """Correctly rounded ``t / divisor``: on CUDA torch turns a division by a Python number
    into a multiplication by its reciprocal (one ulp off at times); a tensor divisor is not."""
    return t / torch.full_like(t, divisor)


def _int_reference(x: Tensor, bits: int, symmetric: bool) -> tuple[Tensor, Tensor, Tensor | None]:
    """(codes as int32 [groups, size], scale, offset or None) by the documented rules."""
    xf = x.float()
    low, high = xf.amin(dim=1), xf.amax(dim=1)
    if symmetric:
        qmax = 2 ** (bits - 1) - 1
        scale = _div(torch.maximum(low.abs(), high.abs()), qmax)
        codes = torch.round(xf / _nonzero(scale)[:, None]).clamp(-qmax, qmax)
        offset = None
    else:
        top = 2**bits - 1
        scale = _div(high - low, top)
        codes = torch.round((xf - low[:, None]) / _nonzero(scale)[:, None]).clamp(0, top)
        offset = low
    codes[scale == 0] = 0
    return codes.to(torch.int32), scale, offset


def _codes(data: Tensor, bits: int, symmetric: bool, size: int) -> Tensor:
    """The front's stored codes as int32 [groups, size]; int4 holds element 2i in the low
    nibble and 2i + 1 in the high one, in two's complement when symmetric."""
    raw = data.to(torch.int32)
    if bits == 8:
        return raw.reshape(-1, size)
    nibbles = torch.stack((raw & 0xF, (raw >> 4) & 0xF), dim=-1).reshape(-1, size)
    return torch.where(nibbles >= 8, nibbles - 16, nibbles) if symmetric else nibbles


def _int_case(ctx: SelfTestContext, dtype: torch.dtype, groups: int, size: int, bits: int, sym: bool) -> None:
    x = _input(ctx, dtype, groups, size)
    q = quantize(x, bits, size, sym, use_kernel=True)
    codes, scale, offset = _int_reference(x, bits, sym)
    label = f"int{bits} {'sym' if sym else 'asym'} {_name(dtype)} {groups}x{size}"
    ctx.compare(f"{label} codes", _codes(q.data, bits, sym, size), codes, EXACT)
    ctx.compare(f"{label} scale", q.scale, scale, EXACT)
    expected = codes.float() * scale[:, None]
    if offset is not None:
        assert q.offset is not None, f"{label}: no offset from an asymmetric quantization"
        ctx.compare(f"{label} offset", q.offset, offset, EXACT)
        expected = expected + offset[:, None]
    out = dequantize(q, use_kernel=True)
    ctx.compare(f"{label} dequantized", out, expected.to(dtype), GPU_TOLERANCE[dtype])


def run_quantizer(ctx: SelfTestContext) -> None:
    for dtype in ctx.dtypes:
        for sym in (True, False):
            for size in GROUP_SIZES:
                _int_case(ctx, dtype, GROUPS, size, 8, sym)
            for size in EVEN_GROUP_SIZES:
                _int_case(ctx, dtype, GROUPS, size, 4, sym)
    _int_case(ctx, torch.float32, *LARGE, 8, True)


def _fp8_case(ctx: SelfTestContext, dtype: torch.dtype, groups: int, size: int, fmt: str) -> None:
    x = _input(ctx, dtype, groups, size)
    q = quantize_fp8(x, size, fmt, use_kernel=True)  # type: ignore[arg-type]
    fmax = FP8_MAX[fmt]
    xf = x.float()
    scale = _div(xf.abs().amax(dim=1), fmax)
    scaled = (xf / _nonzero(scale)[:, None]).clamp(-fmax, fmax)
    scaled[scale == 0] = 0.0
    codes = scaled.to(FP8_DTYPE[fmt]).float()
    label = f"fp8 {fmt} {_name(dtype)} {groups}x{size}"
    if q.data.dtype != FP8_DTYPE[fmt]:
        raise AssertionError(f"{label}: codes are {q.data.dtype}, expected {FP8_DTYPE[fmt]}")
    ctx.compare(f"{label} codes", q.data.float().reshape(groups, size), codes, EXACT)
    ctx.compare(f"{label} scale", q.scale, scale, EXACT)
    out = dequantize_fp8(q, use_kernel=True)
    ctx.compare(f"{label} dequantized", out, (codes * scale[:, None]).to(dtype), GPU_TOLERANCE[dtype])


# name: (exponent bits, mantissa bits, largest finite magnitude code)
PACKED_FORMATS = {
    "e4m3": (4, 3, 0x7E),
    "e5m2": (5, 2, 0x7B),
    "e3m2": (3, 2, 0x1F),
    "e2m3": (2, 3, 0x1F),
    "e2m1": (2, 1, 0x7),
    "e4m7": (4, 7, 0x7FF),
}


def _magnitudes(fmt: str) -> list[float]:
    """The format's finite non-negative values, magnitude code k at index k."""
    exp_bits, man_bits, top = PACKED_FORMATS[fmt]
    bias = 2 ** (exp_bits - 1) - 1
    values = []
    for k in range(top + 1):
        field, man = k >> man_bits, k % 2**man_bits
        step = 2.0 ** ((field if field else 1) - bias - man_bits)
        values.append((man + (2**man_bits if field else 0)) * step)
    return values


def _packed_reference(x: Tensor, fmt: str) -> tuple[Tensor, Tensor, Tensor]:
    """(packed codes uint8 [groups, size * bits / 8], scale, dequantized fp32 values) by nearest
    rounding of x / scale."""
    exp_bits, man_bits, _ = PACKED_FORMATS[fmt]
    bits = 1 + exp_bits + man_bits
    table = torch.tensor(_magnitudes(fmt), dtype=torch.float64, device=x.device)
    fmax = float(table[-1])
    xf = x.float()
    scale = _div(xf.abs().amax(dim=1), fmax)
    r = xf / _nonzero(scale)[:, None]
    a = r.double().abs().clamp(max=fmax)
    hi = torch.searchsorted(table, a).clamp(max=len(table) - 1)
    lo = torch.where(table[hi] == a, hi, hi - 1).clamp(min=0)
    below, above = a - table[lo], table[hi] - a
    mag = torch.where((below < above) | ((below == above) & (lo % 2 == 0)), lo, hi)
    codes = (torch.signbit(r).to(torch.int64) << (bits - 1)) | mag
    codes[scale == 0] = 0
    groups, size = codes.shape
    stream = (codes[..., None] >> torch.arange(bits, device=x.device)) & 1
    stream = stream.reshape(groups, size * bits // 8, 8)
    values = table[mag].float() * torch.where(torch.signbit(r), -1.0, 1.0) * scale[:, None]
    return (stream << torch.arange(8, device=x.device)).sum(-1).to(torch.uint8), scale, values


def _packed_case(ctx: SelfTestContext, dtype: torch.dtype, groups: int, size: int, fmt: str) -> None:
    x = _input(ctx, dtype, groups, size)
    label = f"{fmt} {_name(dtype)} {groups}x{size}"
    q = quantize_fp(x, fmt, size, use_kernel=True)  # type: ignore[arg-type]
    data, scale, values = _packed_reference(x, fmt)
    ctx.compare(f"{label} codes", q.data.float(), data.float(), EXACT)
    ctx.compare(f"{label} scale", q.scale, scale, EXACT)
    full = dequantize_fp(q, use_kernel=True)
    ctx.compare(f"{label} dequantized", full, values.to(dtype), EXACT)
    rows = torch.tensor([groups - 1, 0, groups // 2], device=ctx.device)
    ctx.compare(f"{label} rows", dequantize_fp(q, index=rows, use_kernel=True), full[rows], EXACT)
    sr = quantize_fp(x, fmt, size, "stochastic", seed=groups + size, use_kernel=True)  # type: ignore[arg-type]
    fallback = quantize_fp(x, fmt, size, "stochastic", seed=groups + size, use_kernel=False)  # type: ignore[arg-type]
    ctx.compare(f"{label} stochastic codes", sr.data.float(), fallback.data.float(), EXACT)


def run_fp_quantizer(ctx: SelfTestContext) -> None:
    for dtype in ctx.dtypes:
        for fmt in ("e4m3", "e5m2"):
            for size in GROUP_SIZES:
                _fp8_case(ctx, dtype, GROUPS, size, fmt)
    _fp8_case(ctx, torch.float32, *LARGE, "e4m3")
    for dtype in ctx.dtypes:
        for fmt in PACKED_FORMATS:
            exp_bits, man_bits, _ = PACKED_FORMATS[fmt]
            per = {8: 1, 6: 4}.get(1 + exp_bits + man_bits, 2)  # the fewest codes of whole bytes
            for size in (per, 3 * per, 128, 4096 + per):
                _packed_case(ctx, dtype, GROUPS, size, fmt)
    _packed_case(ctx, torch.float32, 257, 4100, "e3m2")
