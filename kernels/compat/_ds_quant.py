"""DeepSpeed's ``ds_quantizer`` (``deepspeed.ops.quantizer``): fake quantization on DeepSpeed's grid.

The rules are those of DeepSpeed's four kernels behind ``ds_quantizer`` (csrc/quantization/
fake_quantizer.cu, called from pt_binding.cpp). The input is cut into ``groups`` equal runs of
consecutive elements; each is quantized and dequantized on its own, in fp32, and written back::

    symmetric, m = max|x| of the group:
        s = float32(2**b / (2*m + 1e-5))               # the kernels divide in double
        nearest: q = clamp(round_half_even(x * s), -2**(b-1), 2**(b-1) - 1);  out = q * float32(1 / s)
        sr:      t = trunc(x * s);  t += sign(x) with probability |x - t / s| * s
                 when -2**(b-1) < t < 2**(b-1) - 1;   out = t / s
    asymmetric, lo = min(min x, 10000), hi = max(max x, -10000):
        s = float32((hi - lo + 1e-5) / 2**b)
        nearest: q = round_half_away((x - lo) * float32(1 / s)), not clamped;  out = fma(q, s, lo)
        sr:      t = trunc((x - lo) / s);  t += 1 with probability |x - fma(t, s, lo)| / s
                 when t < 2**b - 1;   out = fma(t, s, lo)

So the grid has 2**b steps across 2*m (+1e-5), where ours (``kernels.quantization``) has
2**b - 1 steps across 2*m: the two differ in every group, on purpose. Where DeepSpeed's kernels
have bugs, this module computes what the kernel evidently means instead; docs/deepspeed.md lists
each case (fp32 outputs rounded to integers, ``sr=True, asym=True`` running the symmetric kernel,
bf16 read as fp32, the group-size limits).

No compiled kernel computes this grid, so it runs as PyTorch ops on the input's device.
"""

from __future__ import annotations

import torch
from torch import Tensor

__all__ = ["ds_quantizer"]

_EPS = 1e-5  # DeepSpeed's literal: a double, so the kernels compute the scale in double
_BITS = range(2, 17)  # 1 bit leaves a symmetric grid of {-1, 0}; MoQ starts from 16


def _check(input: Tensor, groups: int, bit_num: int) -> None:
    if not input.is_floating_point():
        raise TypeError(f"ds_quantizer: input must be floating point, got {input.dtype}")
    if isinstance(bit_num, bool) or not isinstance(bit_num, int) or bit_num not in _BITS:
        raise ValueError(f"ds_quantizer: bit_num must be an int from 2 to 16, got {bit_num!r}")
    if isinstance(groups, bool) or not isinstance(groups, int) or groups < 1:
        raise ValueError(f"ds_quantizer: groups must be a positive int, got {groups!r}")
    if input.numel() % groups != 0:
        raise ValueError(
            f"ds_quantizer: groups ({groups}) must divide the input's {input.numel()} elements into "
            "equal groups"
        )


def _round_half_away(v: Tensor) -> Tensor:
    """C's ``roundf``, which the asymmetric kernel uses (torch.round rounds half to even)."""
    a = v.abs()
    whole = a.floor()
    return torch.copysign(whole + (a - whole >= 0.5).to(v.dtype), v)  # a - whole is exact


def _fma(a: Tensor, b: Tensor, c: Tensor) -> Tensor:
    """float32(a * b + c) rounded once: nvcc contracts the kernels' ``q * scale + min`` into a
    fused multiply-add (-fmad=true is its default). The product of two floats is exact in double;
    the sum is rounded to odd in double, then to nearest float, which equals one rounding
    (Boldo and Melquiond's round-to-odd)."""
    p, cd = a.double() * b.double(), c.double()
    s = p + cd
    back = s - p
    err = (p - (s - back)) + (cd - back)  # TwoSum: p + cd == s + err exactly
    even = (s.view(torch.int64) & 1) == 0
    towards = torch.where(err > 0, torch.full_like(s, torch.inf), torch.full_like(s, -torch.inf))
    s = torch.where((err != 0) & even, torch.nextafter(s, towards), s)
    return s.to(torch.float32)


def _symmetric(x: Tensor, bits: int, sr: bool) -> Tensor:
    m = x.abs().amax(-1, keepdim=True)
    # In double, rounded once to float, as the kernel assigns a double to its float scale; a tensor
    # by a tensor, as torch computes a number over a tensor as a reciprocal times the number.
    d = (2 * m).double() + _EPS
    s = (torch.full_like(d, 2.0**bits) / d).float()
    high, low = 2 ** (bits - 1) - 1, -(2 ** (bits - 1))
    if not sr:
        inv = torch.ones_like(s) / s  # the kernel multiplies by 1 / s, not divides by s
        return torch.round(x * s).clamp(low, high) * inv
    t = torch.trunc(x * s)  # the kernel's (int) cast truncates toward zero
    err = (x - t / s).abs() * s
    step = (torch.rand_like(x) < err) & (t > low) & (t < high)
    t = torch.where(step, t + torch.where(x > 0, 1.0, -1.0), t)
    return t / s  # unclamped: x * s can round up to 2**(b-1), as in the kernel


def _asymmetric(x: Tensor, bits: int, sr: bool) -> Tensor:
    # The kernels start their reductions at max = -10000 and min = 10000, so a group lying wholly
    # above 10000 (or below -10000) keeps that bound as its min (max).
    lo = x.amin(-1, keepdim=True).clamp(max=10000.0)
    hi = x.amax(-1, keepdim=True).clamp(min=-10000.0)
    s = (((hi - lo).double() + _EPS) / 2.0**bits).float()  # by a power of 2: exact in double
    if not sr:
        inv = torch.ones_like(s) / s
        q = _round_half_away((x - lo) * inv)  # 0 .. 2**b: 2**b + 1 levels, no clamp
        return _fma(q, s.expand_as(q), lo.expand_as(q))
    # DeepSpeed's launcher runs the symmetric kernel here; this is its asymmetric sr kernel's rule.
    t = torch.trunc((x - lo) / s)
    err = (x - _fma(t, s.expand_as(t), lo.expand_as(t))).abs() / s
    t = torch.where((torch.rand_like(x) < err) & (t < 2**bits - 1), t + 1, t)
    return _fma(t, s.expand_as(t), lo.expand_as(t))


def ds_quantizer(
    input: Tensor, groups: int = 1, bit_num: int = 8, sr: bool = False, asym: bool = False
) -> Tensor:
    """Quantize ``input`` to ``bit_num`` bits per group and back, in place, as DeepSpeed does:
    ``input`` is overwritten and returned. ``sr`` rounds stochastically (torch's generator for the
    input's device, not DeepSpeed's Philox stream); ``asym`` uses each group's min and max. A group
    holding a NaN or an infinity comes out all NaN."""
    _check(input, groups, bit_num)
    if input.numel() == 0:
        return input
    x = input.detach().reshape(groups, -1).to(torch.float32)
    out = (_asymmetric if asym else _symmetric)(x, bit_num, sr)
    finite = torch.isfinite(x).all(-1, keepdim=True)
    out = torch.where(finite, out, torch.full_like(out, torch.nan))
    with torch.no_grad():  # DeepSpeed's kernel writes the storage, outside autograd
        input.copy_(out.reshape(input.shape))
    return input
