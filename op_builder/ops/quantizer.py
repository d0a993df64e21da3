from __future__ import annotations

from dataclasses import replace

from op_builder.context import BuildContext, OpFlags
from op_builder.ops._base import BuiltinCUDAOp

# nvcc flags that keep fp32 IEEE in the quantizers' device code. The base flags'
# --use_fast_math implies -ftz=true, which flushes denormal operands and results of
# every fp32 op (__fdiv_rn, min / max, compares included): a group whose absmax is below
# about 1e-36 has a denormal scale and came out as all zeros where the PyTorch reference
# does not (issue 12, item 6). An explicit -ftz=false wins over the implied one in any
# order; -prec-div=true keeps a plain '/' IEEE as well.
IEEE_FP32_NVCC_FLAGS = ("-ftz=false", "-prec-div=true")


def with_ieee_fp32(flags: OpFlags) -> OpFlags:
    """``flags`` with the quantizers' IEEE fp32 switches added to an nvcc command line.
    (hipcc is not given fast math: nothing to undo there.)"""
    if flags.device_compiler != "nvcc":
        return flags
    return replace(flags, device=(*flags.device, *IEEE_FP32_NVCC_FLAGS))


class QuantizerBuilder(BuiltinCUDAOp):
    name = "quantizer"
    description = "Grouped int8 / int4 quantize and dequantize, symmetric and asymmetric"
    sources = ("quantizer/quantizer.cu", "quantizer/bindings.cpp")

    def flags(self, ctx: BuildContext) -> OpFlags:
        return with_ieee_fp32(super().flags(ctx))
