from __future__ import annotations

from op_builder.builder import CUDAOpBuilder


class QuantizerBuilder(CUDAOpBuilder):
    name = "quantizer"
    description = "Grouped int8 / int4 quantize and dequantize, symmetric and asymmetric"
    sources = ("quantizer/quantizer.cu", "quantizer/bindings.cpp")
