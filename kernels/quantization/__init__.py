"""Grouped quantization backed by the ``quantizer`` (int8 / int4) and ``fp_quantizer`` (FP8,
FP6, FP4, 12-bit) ops, each with a PyTorch implementation of the same rules.

``quantize`` / ``dequantize`` and ``quantize_fp8`` / ``dequantize_fp8``: ``kernels.quantization.quantizer``
(the rules are in its docstring); ``quantize_fp`` / ``dequantize_fp`` / ``selective_dequantize``
of the bit-packed small float formats: ``kernels.quantization.fp_quantizer``.

An op package: ``builders.py`` (both ops), ``csrc/`` and ``includes/``, the fronts, and
``selftest.py``. The names below are imported on first use, so that importing the package
(op_builder does, for its builders) imports neither torch nor the fronts.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from kernels._lazy import LazyExports

if TYPE_CHECKING:
    from kernels.quantization.fp_quantizer import (
        FP_FORMATS,
        FpFormatSpec,
        FPQuantizedTensor,
        dequantize_fp,
        quantize_fp,
        selective_dequantize,
    )
    from kernels.quantization.quantizer import (
        FP8Tensor,
        QuantizedTensor,
        dequantize,
        dequantize_fp8,
        quantize,
        quantize_fp8,
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

_EXPORTS = LazyExports(
    __name__,
    {
        "quantizer": (
            "FP8Tensor",
            "QuantizedTensor",
            "dequantize",
            "dequantize_fp8",
            "quantize",
            "quantize_fp8",
        ),
        "fp_quantizer": (
            "FP_FORMATS",
            "FPQuantizedTensor",
            "FpFormatSpec",
            "dequantize_fp",
            "quantize_fp",
            "selective_dequantize",
        ),
    },
)


def __getattr__(name: str) -> Any:
    return _EXPORTS.get(name)
