from __future__ import annotations

from op_builder.ops._base import BuiltinCUDAOp

# nvcc flags that keep fp32 IEEE in the quantizers' device code. The common flags'
# --use_fast_math implies -ftz=true, which flushes denormal operands and results of every
# fp32 op (__fdiv_rn, min / max, compares included): a group whose absmax is below about
# 1e-36 has a denormal scale and came out as all zeros where the PyTorch reference does not.
# An explicit -ftz=false wins over the implied one in any order; -prec-div=true keeps a plain
# '/' IEEE as well. (hipcc is not given fast math: nothing to undo there.)
IEEE_FP32_NVCC_FLAGS = ("-ftz=false", "-prec-div=true")


class QuantizerBuilder(BuiltinCUDAOp):
    name = "quantizer"
    description = "Grouped int8 / int4 quantize and dequantize, symmetric and asymmetric"
    sources = ("quantizer/quantizer.cu", "quantizer/bindings.cpp")
    nvcc_flags = IEEE_FP32_NVCC_FLAGS
