"""Grouped quantization to small float formats with bit-packed codes, backed by the
``fp_quantizer`` op (``quantize_fp`` / ``dequantize_fp``; ``kernels.quantization`` re-exports them).

Formats (``format=``): a sign bit, ``E`` exponent bits with bias ``2**(E - 1) - 1`` and ``M``
mantissa bits. A code with exponent field ``e`` and mantissa ``m`` is worth
``(1 + m / 2**M) * 2**(e - bias)``, or ``m * 2**(1 - bias - M)`` when ``e == 0`` (subnormals
are kept); the sign bit is the code's top bit, then the exponent, then the mantissa.

======  ====  ======================  ====  ======  ==================
format  bits  standard                bias  fmax    smallest subnormal
======  ====  ======================  ====  ======  ==================
e4m3    8     OCP FP8 E4M3 ("fn")     7     448     2**-9
e5m2    8     OCP FP8 E5M2            15    57344   2**-16
e3m2    6     OCP MX FP6 E3M2         3     28      2**-4
e2m3    6     OCP MX FP6 E2M3         1     7.5     2**-3
e2m1    4     OCP MX FP4 E2M1         1     6       2**-1
e4m7    12    (DeepSpeed's 12-bit)    7     510     2**-13
======  ====  ======================  ====  ======  ==================

The 6-, 4- and 12-bit formats have no infinity or NaN: every exponent is finite (as OCP MX
FP6 / FP4). The FP8 ones keep OCP's: e4m3's ``S.1111.111`` is NaN; e5m2's top exponent is
infinity (mantissa 0) or NaN; their 8-bit codes are the bits of ``torch.float8_e4m3fn`` /
``torch.float8_e5m2`` (``q.data.view(torch.float8_e4m3fn)``).

Quantize, per group of ``group_size`` consecutive elements (default: one row of the last
dimension), in fp32: ``scale = max|x| / fmax`` (IEEE division), each code the format's rounding
of ``r = x / scale``, saturating at ``+-fmax`` (FP8 never produces its infinities); a group whose
scale is 0 gets codes 0. The code keeps ``r``'s sign, zeros included.

* ``rounding="nearest"``: the nearest value, ties to the even code (the one whose mantissa's
  last bit is 0). For ``e4m3`` / ``e5m2`` the codes are ``quantize_fp8``'s (NaN codes aside:
  ``quantize_fp8`` leaves a NaN's sign to the platform, here it is always positive).
* ``rounding="stochastic"``: ``lo <= |r| <= hi`` the neighbouring magnitudes, ``|r|`` rounds
  to ``hi`` with probability ``(|r| - lo) / (hi - lo)``, else to ``lo``: exactly with probability
  ``floor(2**32 f) / 2**32`` for ``f`` that fraction, which is ``f`` itself whenever ``|r|`` is at
  least 2**-9 times the smallest subnormal (``f`` then has at most 32 bits); the mean of the
  dequantized value is ``x`` up to that. Element ``i`` (its index in ``x`` flattened) rounds
  up when ``w < floor(2**32 f)`` for ``w`` the word ``i % 4`` of Philox4x32-10 (Random123's) at
  counter ``(b mod 2**32, b div 2**32, 0, 0)``, ``b = i div 4``, key ``(seed mod 2**32,
  seed div 2**32)``. ``seed`` (an int in ``[0, 2**64)``) is given, or drawn on the host from
  ``generator`` (default: torch's default CPU generator, so ``torch.manual_seed`` fixes it) as
  two 32-bit ``torch.randint`` draws. A seed gives the same codes on every run, device and
  launch configuration, the PyTorch fallback's included.

Non-finite inputs follow the FP8 rules: a NaN makes its group's scale NaN (``torch.amax``) and
every code 0; an infinity makes the scale infinite, so the finite elements quantize to signed
zeros and the infinite ones to ``inf / inf = NaN``, whose code is the positive NaN (``0x7F``
e4m3, ``0x7E`` e5m2) in FP8 and 0 in the formats without NaN. Either group dequantizes to NaN
(a zero times an infinite scale is NaN).

Packing: a group's codes fill ``group_size * bits / 8`` bytes least significant bit first, code
``k`` at bits ``k * bits .. (k + 1) * bits - 1`` where bit ``j`` is bit ``j % 8`` of byte
``j // 8``: 4-bit codes two per byte (element ``2k`` in the low nibble), 6-bit four per 3 bytes,
12-bit two per 3 bytes. A group must fill whole bytes: ``group_size`` a multiple of 4 (6-bit)
or 2 (4- and 12-bit). ``FPQuantizedTensor.data`` is ``uint8 [groups, group_size * bits / 8]``.

Dequantize: ``value(code) * scale`` in fp32, rounded to ``dtype``. With ``index`` (integers,
1-d) only the rows named along dimension 0 of the quantized tensor's shape (for example MoE
experts): the result has shape ``(len(index), *shape[1:])``, and a row must be whole groups.
An index outside ``[0, shape[0])`` raises IndexError (the check reads the index: one device
synchronization when the index is a GPU tensor, none for a list or a CPU tensor).

``FP_FORMATS`` maps each name to its ``FpFormatSpec`` (bits, bias, ``max``, the largest code).

CUDA / ROCm tensors of fp32, fp16 or bf16 use the kernels; otherwise a PyTorch implementation
of the same rules runs (bit-identical codes for both roundings), after one warning.
"""

from __future__ import annotations

import difflib
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal, get_args

import torch
from torch import Tensor

from kernels.quantization import _fp_formats as rules
from kernels.quantization._common import FP_OP, div, groups_of, safe_divisor
from kernels.quantization._fp_formats import FP_FORMATS, FpFormatSpec

__all__ = [
    "FP_FORMATS",
    "FPQuantizedTensor",
    "FpFormatSpec",
    "dequantize_fp",
    "quantize_fp",
    "selective_dequantize",
]

FpFormat = Literal["e4m3", "e5m2", "e3m2", "e2m3", "e2m1", "e4m7"]
Rounding = Literal["nearest", "stochastic"]


@dataclass(frozen=True)
class FPQuantizedTensor:
    """Packed codes and per-group fp32 scales; ``dequantize_fp`` restores ``shape`` / ``dtype``."""

    data: Tensor  # uint8 [groups, group_size * bits // 8], least significant bit first
    scale: Tensor  # float32 [groups]
    format: FpFormat
    group_size: int
    shape: torch.Size
    dtype: torch.dtype

    @property
    def spec(self) -> FpFormatSpec:
        return FP_FORMATS[self.format]


def _spec(format: str) -> FpFormatSpec:
    spec = FP_FORMATS.get(format) if isinstance(format, str) else None
    if spec is None:
        names = ", ".join(get_args(FpFormat))
        close = difflib.get_close_matches(str(format), list(FP_FORMATS), n=1)
        hint = f" (did you mean {close[0]!r}?)" if close else ""
        raise ValueError(f"format must be one of {names}, got {format!r}{hint}")
    return spec


def _check_group_bytes(spec: FpFormatSpec, size: int) -> None:
    if size % spec.pack_codes:
        raise ValueError(
            f"{spec.name} packs {spec.pack_codes} codes of {spec.bits} bits in whole bytes: group_size must "
            f"be a multiple of {spec.pack_codes}, got {size}"
        )


def _seed(generator: torch.Generator | None, seed: int | None) -> int:
    if seed is not None:
        if generator is not None:
            raise ValueError("give seed or generator, not both")
        if isinstance(seed, bool) or not isinstance(seed, int) or not 0 <= seed < 2**64:
            raise ValueError(f"seed must be an int in [0, 2**64), got {seed!r}")
        return seed
    gen = generator if generator is not None else torch.default_generator
    low, high = torch.randint(0, 2**32, (2,), generator=gen, device=gen.device, dtype=torch.int64).tolist()
    return int(low) | (int(high) << 32)


def quantize_fp(
    x: Tensor,
    format: FpFormat = "e3m2",
    group_size: int | None = None,
    rounding: Rounding = "nearest",
    generator: torch.Generator | None = None,
    seed: int | None = None,
    use_kernel: bool | None = None,
) -> FPQuantizedTensor:
    """Quantize ``x`` to ``format`` with one fp32 scale per group (see the module's rules).

    generator / seed: the seed of stochastic rounding (one or neither: then torch's default
    generator gives it); only with ``rounding="stochastic"``.
    use_kernel: None (default) falls back to PyTorch with a warning; False always; True raises
    instead of falling back.
    """
    spec = _spec(format)
    if rounding not in get_args(Rounding):
        raise ValueError(f"rounding must be 'nearest' or 'stochastic', got {rounding!r}")
    stochastic = rounding == "stochastic"
    if not stochastic and (generator is not None or seed is not None):
        raise ValueError("generator and seed are for rounding='stochastic' only")
    if not x.is_floating_point():
        raise TypeError(f"quantize_fp: x must be floating point, got {x.dtype}")
    groups, size = groups_of(x, group_size)
    _check_group_bytes(spec, size)
    key = _seed(generator, seed) if stochastic else 0
    xg = x.reshape(groups, size).contiguous()
    module = FP_OP.resolve([xg], use_kernel)
    if module is not None:
        # The binding takes the key's 64 bits as a signed int (torch.ops has no unsigned one).
        signed_key = key - 2**64 if key >= 2**63 else key
        data, scale = module.quantize_fp(xg, size, spec.name, stochastic, signed_key)
    else:
        xf = xg.float()
        scale = div(xf.abs().amax(-1), spec.max)
        r = xf / safe_divisor(scale)[:, None]
        random = rules.philox_words(r.numel(), key, r.device).reshape(r.shape) if stochastic else None
        codes = rules.encode(r, spec, random)
        codes = torch.where((scale > 0)[:, None], codes, torch.zeros_like(codes))
        data = rules.pack(codes, spec)
    return FPQuantizedTensor(data, scale, format, size, x.shape, x.dtype)


def _rows(q: FPQuantizedTensor, index: Tensor | Sequence[int]) -> tuple[Tensor, int, torch.Size]:
    """(index as int64 on q's device, groups per row, the result's shape), checked."""
    if len(q.shape) == 0:
        raise ValueError("index selects rows of dimension 0: the quantized tensor is a scalar")
    rows = q.shape[0]
    row = math.prod(q.shape[1:])
    if row % q.group_size:
        raise ValueError(
            f"a row of shape {tuple(q.shape)} holds {row} elements, not whole groups of {q.group_size}: "
            "rows cannot be dequantized alone"
        )
    idx = index if isinstance(index, Tensor) else torch.as_tensor(index, dtype=torch.int64)
    if idx.dtype == torch.bool or idx.is_floating_point() or idx.is_complex():
        raise TypeError(f"index must hold integers, got {idx.dtype}")
    if idx.dim() != 1:
        raise ValueError(f"index must be 1-d, got shape {tuple(idx.shape)}")
    if idx.numel():
        # Where the index lives: a host index costs no device synchronization.
        low, high = (int(v) for v in torch.aminmax(idx))
        if low < 0 or high >= rows:
            bad = low if low < 0 else high
            raise IndexError(
                f"index {bad} is out of range for the {rows} rows of the quantized shape {tuple(q.shape)}"
            )
    idx = idx.to(torch.int64).contiguous()
    if idx.device.type == "cpu" and q.data.device.type == "cuda":
        # A plain copy from pageable host memory waits for the stream to drain; staged through
        # pinned memory the copy is queued like any other, and the host goes on.
        idx = idx.pin_memory().to(q.data.device, non_blocking=True)
    else:
        idx = idx.to(device=q.data.device)
    return idx, row // q.group_size, torch.Size((idx.numel(), *q.shape[1:]))


def dequantize_fp(
    q: FPQuantizedTensor,
    dtype: torch.dtype | None = None,
    index: Tensor | Sequence[int] | None = None,
    use_kernel: bool | None = None,
) -> Tensor:
    """``q``'s values as ``dtype`` (default: the quantized tensor's dtype), in its shape; with
    ``index``, only those rows of dimension 0 (DeepSpeed's ``selective_dequantize``)."""
    spec = _spec(q.format)
    out_dtype = dtype or q.dtype
    data = q.data.contiguous()
    if index is None:
        idx, row_groups, shape = None, 0, q.shape
        out_groups = q.scale.numel()
    else:
        idx, row_groups, shape = _rows(q, index)
        out_groups = idx.numel() * row_groups
    out = torch.empty((out_groups, q.group_size), dtype=out_dtype, device=data.device)
    if out.numel() == 0:
        return out.reshape(shape)
    module = FP_OP.resolve([data, q.scale, out, *([] if idx is None else [idx])], use_kernel)
    if module is not None:
        module.dequantize_fp(data, q.scale, out, q.group_size, q.format, idx, row_groups)
        return out.reshape(shape)
    scale = q.scale
    if idx is not None:
        groups = (idx[:, None] * row_groups + torch.arange(row_groups, device=idx.device)).reshape(-1)
        data, scale = data[groups], scale[groups]
    values = rules.decode(rules.unpack(data, spec, q.group_size), spec) * scale[:, None]
    return values.to(out_dtype).reshape(shape)


def selective_dequantize(
    q: FPQuantizedTensor,
    index: Tensor | Sequence[int],
    dtype: torch.dtype | None = None,
    use_kernel: bool | None = None,
) -> Tensor:
    """The rows ``index`` of dimension 0 of ``q``, dequantized (and nothing else read): the
    name DeepSpeed's FP quantizer gives ``dequantize_fp(q, dtype, index=index)``, e.g. for the
    experts of a MoE layer that a batch routes to."""
    return dequantize_fp(q, dtype, index=index, use_kernel=use_kernel)
