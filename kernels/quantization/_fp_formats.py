"""The small float formats of ``kernels.quantization.fp_quantizer`` and their rules on int64 tensors:
encode (round to nearest even, or stochastic), decode, bit packing, and the Philox4x32-10
words behind stochastic rounding.

This is the PyTorch twin of ``includes/gpu_fp_format.h`` and ``csrc/fp_quantizer/fp_packed.cu``:
the same integer steps on the fp32 bits, so that the fallback's codes equal the kernels' bit
for bit, for both roundings. int64 holds every intermediate without overflow (the 32 x 32-bit
products of Philox are split in 16-bit halves).
"""

from __future__ import annotations

from dataclasses import dataclass
from types import MappingProxyType

import torch
from torch import Tensor

_M32 = 0xFFFFFFFF


@dataclass(frozen=True)
class FpFormatSpec:
    """A sign bit, ``exp_bits`` exponent bits (bias ``2**(exp_bits - 1) - 1``) and
    ``man_bits`` mantissa bits, subnormals kept."""

    name: str
    exp_bits: int
    man_bits: int
    max_code: int  # the largest finite magnitude's code
    nan_code: int | None  # the NaN code quantize writes (FP8); None: every code is finite

    @property
    def bits(self) -> int:
        return 1 + self.exp_bits + self.man_bits

    @property
    def bias(self) -> int:
        return (1 << (self.exp_bits - 1)) - 1

    @property
    def max(self) -> float:
        """The largest finite value, ``fmax``."""
        field, man = self.max_code >> self.man_bits, self.max_code & ((1 << self.man_bits) - 1)
        return (1 + man / (1 << self.man_bits)) * 2.0 ** (field - self.bias)

    @property
    def pack_codes(self) -> int:
        """The fewest codes that fill whole bytes (a group's size must be a multiple)."""
        return {4: 2, 6: 4, 8: 1, 12: 2}[self.bits]


FP_FORMATS = MappingProxyType(
    {
        "e4m3": FpFormatSpec("e4m3", 4, 3, 0x7E, 0x7F),  # OCP FP8 e4m3fn: S.1111.111 is NaN
        "e5m2": FpFormatSpec("e5m2", 5, 2, 0x7B, 0x7E),  # OCP FP8 e5m2: S.11111.xx is inf / NaN
        "e3m2": FpFormatSpec("e3m2", 3, 2, 0x1F, None),  # OCP MX FP6
        "e2m3": FpFormatSpec("e2m3", 2, 3, 0x1F, None),  # OCP MX FP6
        "e2m1": FpFormatSpec("e2m1", 2, 1, 0x7, None),  # OCP MX FP4
        "e4m7": FpFormatSpec("e4m7", 4, 7, 0x7FF, None),
    }
)


def encode(r: Tensor, spec: FpFormatSpec, random: Tensor | None) -> Tensor:
    """Codes (int64) of the fp32 values ``r``: nearest with ties to the even code when ``random``
    is None, else up a step where ``random`` (uint32 words as int64) is below
    ``floor(2**32 * fraction of the step)``. Saturating at ``max_code``; NaN gives ``nan_code``
    (or 0).

    ``|r|`` is an integer ``src`` times ``2**-shift`` format steps: in the normal range ``src``
    is the fp32 bits themselves (a rounding carry walks into the exponent, and the code is those
    bits less the exponent's rebias), below it the 24-bit significand."""
    u = r.contiguous().view(torch.int32).to(torch.int64) & _M32
    a = u & 0x7FFFFFFF
    field = a >> 23
    normal = field >= 128 - spec.bias
    significand = torch.where(field == 0, a, (a & 0x7FFFFF) | 0x800000)
    src = torch.where(normal, a, significand)
    shift = torch.where(normal, 23 - spec.man_bits, 151 - spec.bias - spec.man_bits - field.clamp(min=1))
    # Past 24 every bit of src is below the step; capped so that int64 shifts stay defined.
    shift = shift.clamp(max=62)
    kept = src >> shift
    rem = src - (kept << shift)
    if random is None:
        half = torch.ones_like(shift) << (shift - 1)
        up = (rem > half) | ((rem == half) & ((kept & 1) == 1))
    else:
        up = random < ((rem << 32) >> shift)  # floor(fraction * 2**32); rem < 2**24 when shift > 23
    rebias = normal.to(torch.int64) * ((127 - spec.bias) << spec.man_bits)
    mag = (kept + up.to(torch.int64) - rebias).clamp(max=spec.max_code)
    code = ((u >> 31) << (spec.bits - 1)) | mag
    return torch.where(a > 0x7F800000, spec.nan_code or 0, code)


def decode(codes: Tensor, spec: FpFormatSpec) -> Tensor:
    """The fp32 values of int64 codes (exact: every value of these formats is an fp32)."""
    m = spec.man_bits
    field = (codes >> m) & ((1 << spec.exp_bits) - 1)
    man = codes & ((1 << m) - 1)
    normal = (((field + 127 - spec.bias) << 23) | (man << (23 - m))).to(torch.int32).view(torch.float32)
    subnormal = man.to(torch.float32) * 2.0 ** (1 - spec.bias - m)
    mag = torch.where(field == 0, subnormal, normal)
    if spec.name == "e4m3":
        mag = torch.where((field == 15) & (man == 7), torch.nan, mag)
    elif spec.name == "e5m2":
        mag = torch.where(field == 31, torch.where(man == 0, torch.inf, torch.nan), mag)
    return torch.where(((codes >> (spec.bits - 1)) & 1) == 1, -mag, mag)


def pack(codes: Tensor, spec: FpFormatSpec) -> Tensor:
    """int64 codes [groups, n] -> uint8 [groups, n * bits // 8], least significant bit first:
    code k at bits k * bits .. (k + 1) * bits - 1 of the row's bytes (bit j in byte j // 8)."""
    groups, n = codes.shape
    per, nbytes = spec.pack_codes, spec.pack_codes * spec.bits // 8
    chunks = codes.reshape(groups, n // per, per)
    word = chunks[..., 0]
    for i in range(1, per):
        word = word | (chunks[..., i] << (i * spec.bits))
    out = torch.stack([(word >> (8 * b)) & 0xFF for b in range(nbytes)], dim=-1)
    return out.reshape(groups, n * spec.bits // 8).to(torch.uint8)


def unpack(data: Tensor, spec: FpFormatSpec, group_size: int) -> Tensor:
    """uint8 [groups, group_size * bits // 8] -> int64 codes [groups, group_size]."""
    per, nbytes = spec.pack_codes, spec.pack_codes * spec.bits // 8
    raw = data.to(torch.int64).reshape(-1, group_size // per, nbytes)
    word = raw[..., 0]
    for b in range(1, nbytes):
        word = word | (raw[..., b] << (8 * b))
    mask = (1 << spec.bits) - 1
    codes = torch.stack([(word >> (i * spec.bits)) & mask for i in range(per)], dim=-1)
    return codes.reshape(-1, group_size)


# ----------------------------------------------------------------------------- Philox4x32-10

# Salmon et al., "Parallel random numbers: as easy as 1, 2, 3" (SC 2011); Random123's constants.
_PHILOX_M = (0xD2511F53, 0xCD9E8D57)
_PHILOX_W = (0x9E3779B9, 0xBB67AE85)


def _mulhilo(m: int, c: Tensor) -> tuple[Tensor, Tensor]:
    """High and low 32 bits of ``m * c`` (uint32 each): m * c = high * 2**16 + low, both < 2**48."""
    low, high = c * (m & 0xFFFF), c * (m >> 16)
    return (high + (low >> 16)) >> 16, (((high & 0xFFFF) << 16) + low) & _M32


def philox_words(count: int, seed: int, device: torch.device) -> Tensor:
    """Words (uint32 as int64) of elements 0 .. count - 1: element i takes word i % 4 of
    Philox4x32-10 with counter (b mod 2**32, b div 2**32, 0, 0) for b = i div 4 and key
    (seed mod 2**32, seed div 2**32)."""
    blocks = torch.arange((count + 3) // 4, dtype=torch.int64, device=device)
    c0, c1 = blocks & _M32, blocks >> 32
    c2, c3 = torch.zeros_like(blocks), torch.zeros_like(blocks)
    k0, k1 = seed & _M32, (seed >> 32) & _M32
    for round_ in range(10):
        if round_:
            k0, k1 = (k0 + _PHILOX_W[0]) & _M32, (k1 + _PHILOX_W[1]) & _M32
        hi0, lo0 = _mulhilo(_PHILOX_M[0], c0)
        hi1, lo1 = _mulhilo(_PHILOX_M[1], c2)
        c0, c1, c2, c3 = hi1 ^ c1 ^ k0, lo1, hi0 ^ c3 ^ k1, lo0
    return torch.stack((c0, c1, c2, c3), dim=-1).reshape(-1)[:count]
