"""An independent reference for the small float formats of ``kernels.quantization.fp_quantizer``, written
from the formats' definitions (never from the module under test): each format's values
enumerated code by code, the nearest value chosen from that table with ties to the even code,
Philox4x32-10 on Python integers (checked against Random123's known answers), and a bit
packer on Python integers.

The plain functions work one value at a time; ``nearest_codes`` / ``pack_rows`` are the same
rules on tensors (a table lookup and a bit stream) for inputs too large for Python loops.
"""

from __future__ import annotations

import bisect
import functools
import math

import numpy as np
import torch
from torch import Tensor

# name: (exponent bits, mantissa bits, bias, fmax, special codes)
#   "finite": every code is a number (OCP MX FP6 / FP4, and e4m7)
#   "fn": OCP FP8 e4m3fn, S.1111.111 is NaN
#   "ieee": OCP FP8 e5m2, the top exponent is infinity / NaN
FORMATS: dict[str, tuple[int, int, int, float, str]] = {
    "e4m3": (4, 3, 7, 448.0, "fn"),
    "e5m2": (5, 2, 15, 57344.0, "ieee"),
    "e3m2": (3, 2, 3, 28.0, "finite"),
    "e2m3": (2, 3, 1, 7.5, "finite"),
    "e2m1": (2, 1, 1, 6.0, "finite"),
    "e4m7": (4, 7, 7, 510.0, "finite"),
}
NAMES = tuple(FORMATS)
NAN_CODE = {"e4m3": 0x7F, "e5m2": 0x7E}  # the positive NaN quantize writes; others: 0


def bits_of(fmt: str) -> int:
    e, m, *_ = FORMATS[fmt]
    return 1 + e + m


def per_bytes(fmt: str) -> int:
    """The fewest codes that fill whole bytes."""
    bits = bits_of(fmt)
    return next(n for n in (1, 2, 4) if n * bits % 8 == 0)


def fmax(fmt: str) -> float:
    return FORMATS[fmt][3]


def value_of(code: int, fmt: str) -> float:
    e, m, bias, _, kind = FORMATS[fmt]
    bits = 1 + e + m
    sign = -1.0 if (code >> (bits - 1)) & 1 else 1.0
    field = (code >> m) & ((1 << e) - 1)
    man = code & ((1 << m) - 1)
    if kind == "fn" and field == (1 << e) - 1 and man == (1 << m) - 1:
        return math.nan
    if kind == "ieee" and field == (1 << e) - 1:
        return sign * math.inf if man == 0 else math.nan
    if field == 0:
        return sign * math.ldexp(man, 1 - bias - m)
    return sign * math.ldexp((1 << m) + man, field - bias - m)


@functools.cache
def magnitudes(fmt: str) -> tuple[float, ...]:
    """The finite non-negative values; entry k is magnitude code k (ascending)."""
    values = [value_of(c, fmt) for c in range(1 << (bits_of(fmt) - 1))]
    finite = [v for v in values if math.isfinite(v)]
    assert finite == sorted(finite) and values[: len(finite)] == finite
    assert finite[-1] == fmax(fmt)
    return tuple(finite)


def neighbours(a: float, fmt: str) -> tuple[int, int]:
    """Magnitude codes lo <= hi with value lo <= a <= value hi (a >= 0, at most fmax)."""
    mags = magnitudes(fmt)
    lo = bisect.bisect_right(mags, a) - 1
    return lo, lo if mags[lo] == a else lo + 1


def _fixed(v: float) -> int:
    """v (an fp32 number or a format value, at most 2**128) times 2**160: an exact integer, so
    that differences and ratios below are exact integer arithmetic."""
    scaled = math.ldexp(v, 160)
    assert scaled == int(scaled)
    return int(scaled)


def nearest_code(v: float, fmt: str) -> int:
    """The code of v: the nearest magnitude of the table (saturating at fmax), ties to the even
    code, with v's sign (zeros included); NaN to the NaN code or 0."""
    if math.isnan(v):
        return NAN_CODE.get(fmt, 0)
    sign = 1 if math.copysign(1.0, v) < 0 else 0
    a = min(abs(v), fmax(fmt))
    lo, hi = neighbours(a, fmt)
    mags = magnitudes(fmt)
    below, above = _fixed(a) - _fixed(mags[lo]), _fixed(mags[hi]) - _fixed(a)
    k = lo if below < above or (below == above and lo % 2 == 0) else hi
    return (sign << (bits_of(fmt) - 1)) | k


def stochastic_code(v: float, fmt: str, word: int) -> int:
    """The code of v under stochastic rounding with the 32-bit random ``word``: up to the higher
    neighbour when word < floor(2**32 * fraction of the step)."""
    if math.isnan(v):
        return NAN_CODE.get(fmt, 0)
    sign = 1 if math.copysign(1.0, v) < 0 else 0
    a = min(abs(v), fmax(fmt))
    lo, hi = neighbours(a, fmt)
    mags = magnitudes(fmt)
    k = lo
    if hi != lo:
        low = _fixed(mags[lo])
        threshold = ((_fixed(a) - low) << 32) // (_fixed(mags[hi]) - low)
        k = hi if word < threshold else lo
    return (sign << (bits_of(fmt) - 1)) | k


def f32(v: float) -> float:
    return float(np.float32(v))


def group_reference(
    values: list[float], fmt: str, words: list[int] | None = None
) -> tuple[list[int], float, list[float]]:
    """(codes, scale, dequantized fp32 values) of one finite group, in float32 arithmetic."""
    group = [np.float32(v) for v in values]
    scale = np.float32(max(abs(v) for v in group)) / np.float32(fmax(fmt))
    codes = []
    for i, v in enumerate(group):
        if not scale > 0:
            codes.append(0)
            continue
        r = float(v / scale)
        codes.append(nearest_code(r, fmt) if words is None else stochastic_code(r, fmt, words[i]))
    restored = [f32(value_of(c, fmt) * float(scale)) for c in codes]
    return codes, float(scale), restored


# ----------------------------------------------------------------------------- Philox

_M32 = 0xFFFFFFFF


def philox4x32_10(ctr: tuple[int, int, int, int], key: tuple[int, int]) -> list[int]:
    c = list(ctr)
    k0, k1 = key
    for round_ in range(10):
        if round_:
            k0, k1 = (k0 + 0x9E3779B9) & _M32, (k1 + 0xBB67AE85) & _M32
        p0, p1 = 0xD2511F53 * c[0], 0xCD9E8D57 * c[2]
        c = [(p1 >> 32) ^ c[1] ^ k0, p1 & _M32, (p0 >> 32) ^ c[3] ^ k1, p0 & _M32]
    return c


# Random123's tests/kat_vectors, the "philox4x32 10" lines: counter, key, result.
PHILOX_KAT = (
    ((0, 0, 0, 0), (0, 0), (0x6627E8D5, 0xE169C58D, 0xBC57AC4C, 0x9B00DBD8)),
    ((_M32, _M32, _M32, _M32), (_M32, _M32), (0x408F276D, 0x41C83B0E, 0xA20BC7C6, 0x6D5451FD)),
    (
        (0x243F6A88, 0x85A308D3, 0x13198A2E, 0x03707344),
        (0xA4093822, 0x299F31D0),
        (0xD16CFE09, 0x94FDCCEB, 0x5001E420, 0x24126EA1),
    ),
)


def element_word(index: int, seed: int) -> int:
    """The documented random word of element ``index`` (flat) under ``seed``."""
    block = index // 4
    words = philox4x32_10((block & _M32, block >> 32, 0, 0), (seed & _M32, seed >> 32))
    return words[index % 4]


# ----------------------------------------------------------------------------- packing


def pack_bits(codes: list[int], bits: int) -> bytes:
    """Codes as one little-endian bit stream: code k at bits k * bits ... (k + 1) * bits - 1."""
    stream = 0
    for k, c in enumerate(codes):
        assert 0 <= c < 1 << bits
        stream |= c << (k * bits)
    return stream.to_bytes(len(codes) * bits // 8, "little")


def unpack_bits(data: bytes, bits: int, count: int) -> list[int]:
    stream = int.from_bytes(data, "little")
    return [(stream >> (k * bits)) & ((1 << bits) - 1) for k in range(count)]


# ----------------------------------------------------------------------------- tensors


def scaled(x: Tensor, fmt: str) -> tuple[Tensor, Tensor]:
    """(r = x / scale, scale) of groups [groups, size]: fp32 IEEE divisions (tensor by tensor, so
    that CUDA does not multiply by a reciprocal), a scale that is not > 0 divided as 1."""
    xf = x.float()
    scale = xf.abs().amax(-1) / torch.full_like(xf[:, 0], fmax(fmt))
    return xf / torch.where(scale > 0, scale, torch.ones_like(scale))[:, None], scale


def neighbour_codes(r: Tensor, fmt: str) -> tuple[Tensor, Tensor]:
    """Magnitude codes lo <= hi around |r| (saturated at fmax), from the enumerated table."""
    table = torch.tensor(magnitudes(fmt), dtype=torch.float64, device=r.device)
    a = r.double().abs().clamp(max=fmax(fmt))
    hi = torch.searchsorted(table, a).clamp(max=len(table) - 1)  # the first entry >= a
    lo = torch.where(table[hi] == a, hi, hi - 1).clamp(min=0)
    return lo, hi


def nearest_codes(x: Tensor, fmt: str) -> tuple[Tensor, Tensor]:
    """(codes int64 [groups, size], scale) of finite groups [groups, size] by nearest rounding:
    the nearer neighbour, a tie to the even code. Distances in float64 are exact here (|r| has
    24 significant bits and lies within a factor 2 of its neighbours, or below the smallest
    subnormal, where 0 is exact)."""
    r, scale = scaled(x, fmt)
    lo, hi = neighbour_codes(r, fmt)
    table = torch.tensor(magnitudes(fmt), dtype=torch.float64, device=x.device)
    a = r.double().abs().clamp(max=fmax(fmt))
    below, above = a - table[lo], table[hi] - a
    k = torch.where((below < above) | ((below == above) & (lo % 2 == 0)), lo, hi)
    codes = (torch.signbit(r).to(torch.int64) << (bits_of(fmt) - 1)) | k
    return torch.where((scale > 0)[:, None], codes, torch.zeros_like(codes)), scale


def pack_rows(codes: Tensor, bits: int) -> Tensor:
    """int64 codes [groups, n] -> uint8 [groups, n * bits / 8] through an explicit bit stream."""
    groups, n = codes.shape
    shifts = torch.arange(bits, device=codes.device)
    stream = ((codes[..., None] >> shifts) & 1).reshape(groups, n * bits // 8, 8)
    return (stream << torch.arange(8, device=codes.device)).sum(-1).to(torch.uint8)
