"""Grouped quantization backed by the ``quantizer`` (int8 / int4) and ``fp_quantizer``
(FP8 e4m3 / e5m2) ops.

The input is cut into groups of ``group_size`` consecutive elements (default: one
group per row of the last dimension), each with its own fp32 scale.

Integer (``quantize`` / ``dequantize``), ``bits`` 8 or 4:

* symmetric: ``scale = max|x| / qmax`` (qmax 127 or 7), ``q = clamp(round(x / scale),
  -qmax, qmax)``; codes are int8 (bits 8) or 4-bit two's complement.
* asymmetric: ``scale = (max - min) / (2**bits - 1)``, ``offset = min``,
  ``q = clamp(round((x - min) / scale), 0, 2**bits - 1)``; codes are unsigned.
* int4 packs two codes per byte: element 2i in the low nibble, 2i + 1 in the high one.
* rounding is to nearest even; a group whose scale is 0 gets code 0.
* non-finite inputs follow torch's ``amin`` / ``amax`` and IEEE division: a NaN makes its
  group's scale (and offset) NaN and every code 0; an infinity makes the scale infinite (NaN
  where max - min is inf - inf) and every code 0 (inf / inf is NaN, stored as 0). Either group
  dequantizes to NaN.

FP8 (``quantize_fp8`` / ``dequantize_fp8``): ``scale = max|x| / fmax`` (448 for e4m3,
57344 for e5m2) and ``q = float8(clamp(x / scale, -fmax, fmax))``, stored as
``torch.float8_e4m3fn`` / ``torch.float8_e5m2``. A NaN makes its group's scale NaN and
its codes 0; an infinity makes the scale infinite, finite elements signed zeros and the
infinite ones NaN codes. Either group dequantizes to NaN.

The kernels keep fp32 denormals (no flush-to-zero), so groups whose max is tiny (down to
the smallest denormals) quantize as the PyTorch rules do.

CUDA / ROCm tensors of fp32, fp16 or bf16 use the kernels; otherwise a PyTorch
implementation of the same rules runs (bit-identical codes), after one warning.

Small float formats with bit-packed codes (FP8, FP6 e3m2 / e2m3, FP4 e2m1, 12-bit e4m7),
stochastic rounding and the dequantize of chosen rows: ``quantize_fp`` / ``dequantize_fp`` of
``kernels.quantization.fp_quantizer``, re-exported here.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import torch
from torch import Tensor

from kernels._gpu_load import GpuOp
from kernels.quantization._common import FP_OP, div, groups_of, safe_divisor
from kernels.quantization.fp_quantizer import (
    FP_FORMATS,
    FpFormatSpec,
    FPQuantizedTensor,
    dequantize_fp,
    quantize_fp,
    selective_dequantize,
)

__all__ = [
    "FP_FORMATS",
    "FP8Tensor",
    "FPQuantizedTensor",
    "FpFormatSpec",
    "QuantizedTensor",
    "dequantize",
    "dequantize_fp",
    "dequantize_fp8",
    "quantize",
    "quantize_fp",
    "quantize_fp8",
    "selective_dequantize",
]

Fp8Format = Literal["e4m3", "e5m2"]
_INT_OP = GpuOp("quantizer")
_FP8_DTYPES: dict[str, torch.dtype] = {"e4m3": torch.float8_e4m3fn, "e5m2": torch.float8_e5m2}
_FP8_MAX: dict[str, float] = {"e4m3": 448.0, "e5m2": 57344.0}


@dataclass(frozen=True)
class QuantizedTensor:
    """Integer codes and per-group parameters; ``dequantize`` restores ``shape`` / ``dtype``."""

    data: Tensor  # int8 [groups, group_size] (symmetric 8-bit) or uint8 ([groups, group_size // 2] at 4 bits)
    scale: Tensor  # float32 [groups]
    offset: Tensor | None  # float32 [groups], asymmetric only
    bits: int
    symmetric: bool
    group_size: int
    shape: torch.Size
    dtype: torch.dtype


@dataclass(frozen=True)
class FP8Tensor:
    """FP8 codes [groups, group_size] and per-group fp32 scales."""

    data: Tensor  # torch.float8_e4m3fn or torch.float8_e5m2
    scale: Tensor  # float32 [groups]
    format: Fp8Format
    group_size: int
    shape: torch.Size
    dtype: torch.dtype


def _groups(x: Tensor, group_size: int | None, even: bool = False) -> tuple[int, int]:
    groups, size = groups_of(x, group_size)
    if even and size % 2 != 0:
        raise ValueError(f"int4 packs two values per byte: group_size must be even, got {size}")
    return groups, size


# ----------------------------------------------------------------------------- integer


def _quantize_int_torch(xg: Tensor, bits: int, symmetric: bool) -> tuple[Tensor, Tensor, Tensor | None]:
    """Codes as int32 [groups, group_size], scale, offset: the reference rules in fp32."""
    xf = xg.float()
    low, high = xf.amin(-1), xf.amax(-1)
    if symmetric:
        qmax = (1 << (bits - 1)) - 1
        scale = div(torch.maximum(-low, high), qmax)
        codes = torch.round(xf / safe_divisor(scale)[:, None]).clamp(-qmax, qmax)
        offset = None
    else:
        levels = (1 << bits) - 1
        scale = div(high - low, levels)
        codes = torch.round((xf - low[:, None]) / safe_divisor(scale)[:, None]).clamp(0, levels)
        offset = low
    # Code 0 where the scale is not > 0 (0, or NaN from a NaN in the group) and where the
    # value is NaN (inf / inf under an infinite scale): said explicitly, since a NaN -> int
    # conversion is platform-defined (its stored low bits happen to be 0 on CPU and CUDA).
    keep = (scale > 0)[:, None] & ~torch.isnan(codes)
    codes = torch.where(keep, codes, torch.zeros_like(codes))
    return codes.to(torch.int32), scale, offset


def _pack(codes: Tensor, bits: int, symmetric: bool) -> Tensor:
    if bits == 8:
        return codes.to(torch.int8 if symmetric else torch.uint8)
    nibbles = codes & 0xF  # two's complement low bits for negative codes
    return (nibbles[:, 0::2] | (nibbles[:, 1::2] << 4)).to(torch.uint8)


def _unpack(data: Tensor, bits: int, symmetric: bool, group_size: int) -> Tensor:
    if bits == 8:
        return data.to(torch.int32)
    raw = data.to(torch.int32)
    nibbles = torch.stack((raw & 0xF, raw >> 4), dim=-1).reshape(-1, group_size)
    return (nibbles ^ 8) - 8 if symmetric else nibbles


def quantize(
    x: Tensor,
    bits: int = 8,
    group_size: int | None = None,
    symmetric: bool = True,
    use_kernel: bool | None = None,
) -> QuantizedTensor:
    """Quantize ``x`` to int8 or int4 codes with one scale (and offset) per group."""
    if bits not in (8, 4):
        raise ValueError(f"bits must be 8 or 4, got {bits}")
    if not x.is_floating_point():
        raise TypeError(f"quantize: x must be floating point, got {x.dtype}")
    groups, size = _groups(x, group_size, even=bits == 4)
    xg = x.reshape(groups, size).contiguous()
    module = _INT_OP.resolve([xg], use_kernel)
    if module is not None:
        data, scale, offset = module.quantize(xg, size, bits, symmetric)
    else:
        codes, scale, offset = _quantize_int_torch(xg, bits, symmetric)
        data = _pack(codes, bits, symmetric)
    return QuantizedTensor(data, scale, offset, bits, symmetric, size, x.shape, x.dtype)


def dequantize(
    q: QuantizedTensor, dtype: torch.dtype | None = None, use_kernel: bool | None = None
) -> Tensor:
    """``q``'s values as ``dtype`` (default: the quantized tensor's dtype), in its shape."""
    out_dtype = dtype or q.dtype
    groups = q.scale.numel()
    out = torch.empty((groups, q.group_size), dtype=out_dtype, device=q.data.device)
    module = _INT_OP.resolve([q.data, q.scale, out], use_kernel)
    if module is not None:
        module.dequantize(q.data.contiguous(), q.scale, q.offset, out, q.group_size, q.bits, q.symmetric)
        return out.reshape(q.shape)
    values = _unpack(q.data, q.bits, q.symmetric, q.group_size).float() * q.scale[:, None]
    if not q.symmetric:
        assert q.offset is not None
        values = values + q.offset[:, None]
    return values.to(out_dtype).reshape(q.shape)


# ----------------------------------------------------------------------------- FP8


def quantize_fp8(
    x: Tensor, group_size: int | None = None, format: Fp8Format = "e4m3", use_kernel: bool | None = None
) -> FP8Tensor:
    """Quantize ``x`` to FP8 with one fp32 scale per group."""
    if format not in _FP8_DTYPES:
        raise ValueError(f"format must be 'e4m3' or 'e5m2', got {format!r}")
    if not x.is_floating_point():
        raise TypeError(f"quantize_fp8: x must be floating point, got {x.dtype}")
    groups, size = _groups(x, group_size)
    xg = x.reshape(groups, size).contiguous()
    module = FP_OP.resolve([xg], use_kernel)
    if module is not None:
        codes, scale = module.quantize(xg, size, format)
        data = codes.view(_FP8_DTYPES[format])
    else:
        fmax = _FP8_MAX[format]
        xf = xg.float()
        scale = div(xf.abs().amax(-1), fmax)
        scaled = (xf / safe_divisor(scale)[:, None]).clamp(-fmax, fmax)
        scaled = torch.where((scale > 0)[:, None], scaled, torch.zeros_like(scaled))
        data = scaled.to(_FP8_DTYPES[format])
    return FP8Tensor(data, scale, format, size, x.shape, x.dtype)


def dequantize_fp8(q: FP8Tensor, dtype: torch.dtype | None = None, use_kernel: bool | None = None) -> Tensor:
    """``q``'s values as ``dtype`` (default: the quantized tensor's dtype), in its shape."""
    out_dtype = dtype or q.dtype
    out = torch.empty((q.scale.numel(), q.group_size), dtype=out_dtype, device=q.data.device)
    # The codes go as bytes: the kernels' dtype check is for the scale and the output.
    codes = q.data.contiguous().view(torch.uint8)
    module = FP_OP.resolve([codes, q.scale, out], use_kernel)
    if module is not None:
        module.dequantize(codes, q.scale, out, q.group_size, q.format)
        return out.reshape(q.shape)
    return (q.data.float() * q.scale[:, None]).to(out_dtype).reshape(q.shape)
