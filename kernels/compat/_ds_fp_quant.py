"""DeepSpeed's ``FP_Quantize`` (``deepspeed.ops.fp_quantizer``): its own small float formats.

The rules are those of DeepSpeed's csrc/fp_quantizer (fp_quantize.cpp, fp_quantize_impl.cu) and
deepspeed/ops/fp_quantizer/quantize.py. Per group of ``group_size`` consecutive elements::

    scale = q_range / max|x|                      # fp32; the codes hold x * scale
    code  = x * scale rounded to the format:      # on the fp32 bits of x * scale
              mantissa + half an ulp of the format, then truncated: ties away from zero;
              stochastic_mode adds Poisson(10) & (the dropped bits' mask) instead
              magnitudes below the smallest normal become it (no subnormals)
    value = code * (max|x| / q_range)             # the second fp32 scale, stored with the codes

The formats use every exponent, the top one included (no inf / NaN codes), so each one's largest
value is ``q_range``: q_bits 8 is e4m3 (max 480, where OCP's e4m3fn stops at 448) or, with
``q_mantisa_bits=2``, e5m2 (max 114688, OCP 57344); q_bits 12 is e4m7 (510), 6 is e3m2 (28),
4 is e2m1 (6). Codes are packed least significant bit first, ``group_size * q_bits / 8`` bytes
per group, followed by the group's fp32 scale as 4 bytes: a ``uint8 [groups, bytes + 4]``.

DeepSpeed encodes an exact 0 with a wrapped exponent that decodes to 2 * scale; here 0 gets the
all-zero code (sign kept), which DeepSpeed would read as 2**-bias * scale. No compiled kernel here
computes these formats, so this runs as PyTorch ops on the input's device.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

__all__ = ["FP_Quantize", "QuantizationConfig"]


@dataclass
class QuantizationConfig:
    """``deepspeed.linear.QuantizationConfig``: FP_Quantize reads ``group_size`` only."""

    q_bits: int = 8
    mantissa_bits: int = 3
    group_size: int = 512
    q_dtype: torch.dtype = torch.uint8


@dataclass(frozen=True)
class _Format:
    bits: int
    exp_bits: int
    man_bits: int

    @property
    def bias(self) -> int:
        return (1 << (self.exp_bits - 1)) - 1

    @property
    def q_range(self) -> float:
        """The largest value, DeepSpeed's q_range: the top exponent is an ordinary binade."""
        return 2.0 ** ((1 << self.exp_bits) - 1 - self.bias) * (2 - 2.0**-self.man_bits)


_FP8 = {3: _Format(8, 4, 3), 2: _Format(8, 5, 2)}  # by q_mantisa_bits
# DeepSpeed's q_bits 12 / 6 / 4 ignore q_mantisa_bits (quantize.py overrides it, and its kernel
# switch maps the result to e4m7 / e3m2 / e2m1).
_NARROW = {12: _Format(12, 4, 7), 6: _Format(6, 3, 2), 4: _Format(4, 2, 1)}


def _format(q_bits: int, q_mantisa_bits: int) -> _Format:
    if q_bits == 8:
        if q_mantisa_bits not in (3, 2):
            raise ValueError(
                f"FP_Quantize: q_bits=8 takes q_mantisa_bits 3 (e4m3) or 2 (e5m2), got {q_mantisa_bits!r}"
            )
        return _FP8[q_mantisa_bits]
    if q_bits in _NARROW:
        return _NARROW[q_bits]
    raise ValueError(f"FP_Quantize: q_bits must be 8, 12, 6 or 4 (DeepSpeed's formats), got {q_bits!r}")


def _encode(v: Tensor, fmt: _Format, stochastic: bool) -> Tensor:
    """Codes (int64) of the fp32 values ``v``, rounded on their bits as DeepSpeed's kernel does."""
    bits = v.contiguous().view(torch.int32).to(torch.int64) & 0xFFFFFFFF
    sign, exp, man = bits >> 31, (bits >> 23) & 0xFF, bits & 0x7FFFFF
    drop = 23 - fmt.man_bits
    if stochastic:
        # DeepSpeed's "stochastic" offset: a Poisson(10) draw, so nearly always a truncation.
        offset = torch.poisson(torch.full_like(v, 10.0)).to(torch.int64) & ((1 << drop) - 1)
        man = man + offset
    else:
        man = man + (1 << (drop - 1))
    exp = exp + (man >> 23)  # a carry out of the mantissa moves to the next binade
    man = (man >> drop) & ((1 << fmt.man_bits) - 1)
    smallest = 127 - fmt.bias + 1  # fp32 biased exponent of the smallest normal
    largest = 127 + (1 << fmt.exp_bits) - 1 - fmt.bias
    tiny = exp < smallest  # DeepSpeed's clip(): up to the smallest normal
    man, exp = torch.where(tiny, 0, man), torch.where(tiny, smallest, exp)
    # Not reached from finite inputs (|x * scale| <= q_range): only a stochastic carry off the top.
    big = exp > largest
    man, exp = torch.where(big, (1 << fmt.man_bits) - 1, man), torch.where(big, largest, exp)
    code = (sign << (fmt.bits - 1)) | ((exp - 127 + fmt.bias) << fmt.man_bits) | man
    # 0 and fp32 denormals (which DeepSpeed's --use_fast_math build flushes to 0) skip clip() in
    # the kernel; the all-zero code keeps them 0.
    zero = (bits & 0x7FFFFFFF) < (1 << 23)
    return torch.where(zero, sign << (fmt.bits - 1), code)


def _decode(codes: Tensor, fmt: _Format) -> Tensor:
    """fp32 values of the codes: DeepSpeed's reading, every exponent field a normal binade,
    except the all-zero code (sign aside), which is 0 here."""
    exp = (codes >> fmt.man_bits) & ((1 << fmt.exp_bits) - 1)
    man = codes & ((1 << fmt.man_bits) - 1)
    bits = ((exp - fmt.bias + 127) << 23) | (man << (23 - fmt.man_bits))
    mag = bits.to(torch.int32).view(torch.float32)
    mag = torch.where((exp == 0) & (man == 0), torch.zeros_like(mag), mag)
    return torch.where(((codes >> (fmt.bits - 1)) & 1) == 1, -mag, mag)


def _pack(codes: Tensor, q_bits: int) -> Tensor:
    """[groups, n] codes -> [groups, n * q_bits / 8] bytes, least significant bit first (the
    layout DeepSpeed's kernel writes: two e2m1 codes per byte, low nibble first; 6 and 12 bits
    as a little-endian bit stream)."""
    if q_bits == 8:
        return codes.to(torch.uint8)
    shifts = torch.arange(q_bits, device=codes.device)
    stream = ((codes[..., None] >> shifts) & 1).reshape(codes.shape[0], -1, 8)
    return (stream << torch.arange(8, device=codes.device)).sum(-1).to(torch.uint8)


def _unpack(data: Tensor, q_bits: int, n: int) -> Tensor:
    if q_bits == 8:
        return data.to(torch.int64)
    stream = (data.to(torch.int64)[..., None] >> torch.arange(8, device=data.device)) & 1
    stream = stream.reshape(data.shape[0], n, q_bits)
    return (stream << torch.arange(q_bits, device=data.device)).sum(-1)


def _scale_bytes(scale: Tensor) -> Tensor:
    return scale.to(torch.float32).reshape(-1, 1).contiguous().view(torch.uint8)


class FP_Quantize:
    """``deepspeed.ops.fp_quantizer.FP_Quantize``: its formats, its packed layout and its methods
    (``quantize``, ``dequantize``, ``selective_dequantize``, ``get_scales``, ``to``), computed in
    PyTorch on the input's device. Inputs may be bf16 (DeepSpeed's only dtype), fp16 or fp32."""

    def __init__(self, quantization_config: Any) -> None:
        self.group_size: int = int(quantization_config.group_size)
        if self.group_size <= 0:
            raise ValueError(f"FP_Quantize: group_size must be positive, got {self.group_size}")
        self.q_config = quantization_config
        self.cuda_impl = True  # DeepSpeed's flag for the layout with the scales inside the codes
        self.orig_dtype: torch.dtype | None = None
        self.orig_shape: torch.Size | None = None
        self.num_groups: int | None = None
        self.input_q: Tensor | None = None
        self.scale: Tensor | None = None

    def _row_bytes(self, fmt: _Format) -> int:
        if self.group_size * fmt.bits % 8:
            raise ValueError(
                f"FP_Quantize: group_size {self.group_size} times {fmt.bits} bits is not whole bytes"
            )
        return self.group_size * fmt.bits // 8

    def quantize(
        self,
        input: Tensor,
        q_bits: int = 8,
        q_mantisa_bits: int = 3,
        stochastic_mode: bool = False,
        return_meta_tensor: bool = False,
    ) -> Tensor | tuple[Tensor, Tensor]:
        """``uint8 [groups, bytes + 4]``: each group's packed codes, then its fp32 scale; with
        ``return_meta_tensor`` (8 bits only), the codes in ``input``'s shape and the scales'
        bytes ``[groups, 4]``."""
        if input.dtype not in (torch.bfloat16, torch.float16, torch.float32):
            raise TypeError(f"FP_Quantize.quantize: input must be bf16, fp16 or fp32, got {input.dtype}")
        fmt = _format(q_bits, q_mantisa_bits)
        if return_meta_tensor and q_bits != 8:
            raise ValueError(f"FP_Quantize.quantize: return_meta_tensor needs q_bits=8, got {q_bits}")
        nbytes = self._row_bytes(fmt)
        if input.numel() % self.group_size:
            raise ValueError(
                f"FP_Quantize.quantize: the input's {input.numel()} elements are not a multiple of "
                f"group_size {self.group_size}"
            )
        self.orig_dtype, self.orig_shape = input.dtype, input.shape
        self.num_groups = input.numel() // self.group_size
        x = input.detach().reshape(self.num_groups, self.group_size).to(torch.float32)
        amax = x.abs().amax(-1, keepdim=True)
        q_range = torch.full_like(amax, fmt.q_range)
        # Two fp32 divisions, as the kernel: q_range / max to quantize, max / q_range to store.
        # (Tensor by tensor: torch computes a number divided by a tensor as a reciprocal times it.)
        v = x * (q_range / amax)
        v = torch.where(amax == 0, x, v)  # an all-zero group stays 0 (0 * inf would be NaN)
        # A NaN or an infinity spoils its group: its scale is NaN, so it dequantizes to NaN.
        scale = torch.where(torch.isfinite(x).all(-1, keepdim=True), amax / q_range, torch.nan)
        codes = _pack(_encode(v, fmt, bool(stochastic_mode)), q_bits)
        out = torch.cat([codes, _scale_bytes(scale)], dim=1)
        if return_meta_tensor:
            data, self.scale = out[:, :nbytes].reshape(input.shape), out[:, nbytes:].contiguous()
            self.input_q = None
            return data, self.scale
        self.input_q, self.scale = out, None
        return out

    def _rows(self, input_q: Tensor, scale: Tensor | None, fmt: _Format, groups: int) -> Tensor:
        nbytes = self._row_bytes(fmt)
        if input_q.dtype != torch.uint8:
            raise TypeError(f"FP_Quantize: quantized data must be uint8, got {input_q.dtype}")
        if scale is not None:
            # The scales apart (return_meta_tensor's bytes, or fp32 values): join them as DeepSpeed does.
            data = input_q.reshape(-1, nbytes)
            raw = scale if scale.dtype == torch.uint8 else _scale_bytes(scale)
            if raw.numel() != 4 * data.shape[0]:
                raise ValueError(f"FP_Quantize: {raw.numel() // 4} scales for {data.shape[0]} groups")
            input_q = torch.cat([data, raw.reshape(-1, 4).to(data.device)], dim=1)
        if input_q.numel() != groups * (nbytes + 4):
            raise ValueError(
                f"FP_Quantize: {input_q.numel()} bytes of quantized data, expected {groups} groups of "
                f"{nbytes} + 4 ({fmt.bits}-bit codes and a scale)"
            )
        return input_q.reshape(groups, nbytes + 4)

    def _values(self, rows: Tensor, fmt: _Format) -> Tensor:
        nbytes = rows.shape[1] - 4
        scale = rows[:, nbytes:].contiguous().view(torch.float32)
        return _decode(_unpack(rows[:, :nbytes], fmt.bits, self.group_size), fmt) * scale

    def _prepared(self, q_bits: int, q_mantisa_bits: int) -> _Format:
        if self.orig_dtype is None:
            raise RuntimeError("[De-quantization Error]: you need to call quantize before dequantizing!")
        return _format(q_bits, q_mantisa_bits)

    def dequantize(
        self,
        input_q: Tensor,
        fp_out: Tensor | None = None,
        q_bits: int = 8,
        q_mantisa_bits: int = 3,
        scale: Tensor | None = None,
    ) -> Tensor:
        """The values of ``input_q`` (``quantize``'s output, or its codes with ``scale``) written
        into ``fp_out`` (default: a new tensor of the quantized input's shape and dtype)."""
        fmt = self._prepared(q_bits, q_mantisa_bits)
        assert self.orig_shape is not None and self.orig_dtype is not None
        if fp_out is None:
            fp_out = torch.empty(self.orig_shape, dtype=self.orig_dtype, device=input_q.device)
        if fp_out.numel() % self.group_size:
            raise ValueError(
                f"FP_Quantize.dequantize: fp_out's {fp_out.numel()} elements are not whole groups of "
                f"{self.group_size}"
            )
        rows = self._rows(input_q, scale, fmt, fp_out.numel() // self.group_size)
        with torch.no_grad():
            fp_out.copy_(self._values(rows, fmt).reshape(fp_out.shape))
        return fp_out

    def selective_dequantize(
        self,
        input_q: Tensor,
        indexes: Tensor,
        fp_out: Tensor | None = None,
        q_bits: int = 8,
        q_mantisa_bits: int = 3,
        scale: Tensor | None = None,
    ) -> Tensor:
        """Dequantize the slices ``indexes`` of the first dimension of the (3-d) quantized input."""
        fmt = self._prepared(q_bits, q_mantisa_bits)
        assert self.orig_shape is not None and self.orig_dtype is not None
        if len(self.orig_shape) != 3:
            raise ValueError(
                "Selective-Dequantization works on 3d tensor only! Please reshape the tensor before "
                "calling dequantize function."
            )
        shape = (indexes.shape[0], *self.orig_shape[1:])
        if fp_out is None:
            fp_out = torch.empty(shape, dtype=self.orig_dtype, device=input_q.device)
        groups = self.orig_shape.numel() // self.group_size
        values = self._values(self._rows(input_q, scale, fmt, groups), fmt).reshape(self.orig_shape)
        with torch.no_grad():
            fp_out.copy_(values.index_select(0, indexes.to(values.device, torch.int64)).reshape(fp_out.shape))
        return fp_out

    def get_scales(self) -> Tensor:
        """The last quantization's fp32 scales, ``[groups, 1]`` (what the codes are multiplied by)."""
        raw = self.scale
        if raw is None and self.input_q is not None:
            raw = self.input_q[:, -4:]
        if raw is None:
            raise RuntimeError("FP_Quantize.get_scales: nothing has been quantized yet")
        return raw.contiguous().view(torch.float32).reshape(-1, 1)

    def to(self, *args: Any, **kwargs: Any) -> None:
        """Moves the kept quantized data and scales, as DeepSpeed's ``to``."""
        if self.input_q is not None:
            self.input_q = self.input_q.to(*args, **kwargs)
        if self.scale is not None:
            self.scale = self.scale.to(*args, **kwargs)
