"""The bound for comparing half-precision (bf16 / fp16) param trajectories with a reference.

Ours and the reference do the same fp32 math, rounded differently (FMAs, vector code that differs
between CPUs: torch's own AdamW on AVX2 vs AVX-512). Where that tips the rounding of a param to
its half dtype the other way, the two land one ulp of the half dtype apart, an ulp at the
magnitude the param had *then*. The update barely depends on the param, so that offset persists
as an absolute difference while the value shrinks: a bound relative to the final value cannot
hold (seen on an AMD AVX2 machine: one element of 1003, 2^-13 apart at a final value of 2.3e-3).
Hence a bound of ``ulps`` ulps at the largest magnitude the element had along the way, as
tests/gpu/test_gpu_optim.py bounds the kernels. A wrong rule is off by about lr per step on every
element, including those that stayed small.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor


def start_reach(params: Sequence[Tensor]) -> list[Tensor]:
    """The magnitudes of ``params`` now, in fp32: the start of :func:`track_reach`."""
    return [p.detach().abs().float() for p in params]


def track_reach(reach: list[Tensor], params: Sequence[Tensor]) -> None:
    """Raise each element of ``reach`` to the magnitude of ``params`` after a step."""
    for r, p in zip(reach, params, strict=True):
        torch.maximum(r, p.detach().abs().float().reshape(r.shape), out=r)


def assert_half_trajectory_close(
    ours: Tensor, ref: Tensor, reach: Tensor, dtype: torch.dtype, ulps: float = 2.0, atol: float = 1e-5
) -> None:
    """``ours`` within ``ulps`` ulps of ``dtype`` at the element's largest magnitude along the
    way (``reach``, tracked on either side: they stay within an ulp of each other, or the final
    reference value where larger), plus ``atol``."""
    a, b = ours.detach().float().reshape(-1), ref.detach().float().reshape(-1)
    scale = torch.maximum(reach.reshape(-1), b.abs())
    bound = ulps * torch.finfo(dtype).eps * scale + atol
    diff = (a - b).abs()
    bad = (diff > bound) | (a.isnan() != b.isnan())
    if bool(bad.any()):
        k = int(bad.nonzero()[0])
        raise AssertionError(
            f"{int(bad.sum())} of {b.numel()} elements off by more than {ulps} {dtype} ulps at "
            f"their largest magnitude; element {k}: ours {a[k].item()}, reference {b[k].item()}, "
            f"largest magnitude {scale[k].item():.4g}, bound {bound[k].item():.3g}"
        )
