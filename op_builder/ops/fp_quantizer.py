from __future__ import annotations

from op_builder import archs as arch_lib
from op_builder.archs import ArchLimits, CudaArch
from op_builder.ops._base import BuiltinCUDAOp
from op_builder.ops.quantizer import IEEE_FP32_NVCC_FLAGS


class FPQuantizerBuilder(BuiltinCUDAOp):
    name = "fp_quantizer"
    description = "Grouped FP8 / FP6 / FP4 / 12-bit float quantize and dequantize of fp32 / fp16 / bf16"
    sources = ("fp_quantizer/fp_quantizer.cu", "fp_quantizer/fp_packed.cu", "fp_quantizer/bindings.cpp")
    # The kernels use bf16 arithmetic and FP8 types throughout: sm_80 and newer only.
    arch_limits = ArchLimits(min_capability=(8, 0))
    # Denormal scales must round as the reference's: see IEEE_FP32_NVCC_FLAGS.
    nvcc_flags = IEEE_FP32_NVCC_FLAGS

    def arch_defines(self, archs: tuple[CudaArch, ...]) -> tuple[str, ...]:
        native = ("-DFP8_NATIVE",) if arch_lib.fp8_native(archs) else ()
        return (*super().arch_defines(archs), *native)
