"""The quantizer ops: quantizer (int8 / int4) and fp_quantizer (FP8 / FP6 / FP4 / 12-bit)."""

from __future__ import annotations

from kernels._build_common import INCLUDE_DIRS
from op_builder import archs as arch_lib
from op_builder.archs import ArchLimits, CudaArch
from op_builder.builder import CUDAOpBuilder

# Where this family's ops come among ours wherever ops are listed (op_builder.registry): CPU ops
# first, then GPU ops, each by family rank, lowest first, then in the order defined here.
FAMILY_RANK = 40

# nvcc flags that keep fp32 IEEE in the quantizers' device code. The common flags'
# --use_fast_math implies -ftz=true, which flushes denormal operands and results of every
# fp32 op (__fdiv_rn, min / max, compares included): a group whose absmax is below about
# 1e-36 has a denormal scale and came out as all zeros where the PyTorch reference does not.
# An explicit -ftz=false wins over the implied one in any order; -prec-div=true keeps a plain
# '/' IEEE as well. (hipcc is not given fast math: nothing to undo there.)
IEEE_FP32_NVCC_FLAGS = ("-ftz=false", "-prec-div=true")


class QuantizerBuilder(CUDAOpBuilder):
    name = "quantizer"
    description = "Grouped int8 / int4 quantize and dequantize, symmetric and asymmetric"
    sources = ("csrc/quantizer/quantizer.cu", "csrc/quantizer/bindings.cpp")
    include_dirs = INCLUDE_DIRS
    nvcc_flags = IEEE_FP32_NVCC_FLAGS
    selftest = "kernels.quantization.selftest:run_quantizer"
    stable_abi = "2.10"


class FPQuantizerBuilder(CUDAOpBuilder):
    name = "fp_quantizer"
    description = "Grouped FP8 / FP6 / FP4 / 12-bit float quantize and dequantize of fp32 / fp16 / bf16"
    sources = (
        "csrc/fp_quantizer/fp_quantizer.cu",
        "csrc/fp_quantizer/fp_packed.cu",
        "csrc/fp_quantizer/bindings.cpp",
    )
    include_dirs = INCLUDE_DIRS
    # The kernels use bf16 arithmetic and FP8 types throughout: sm_80 and newer only.
    arch_limits = ArchLimits(min_capability=(8, 0))
    # Denormal scales must round as the reference's: see IEEE_FP32_NVCC_FLAGS.
    nvcc_flags = IEEE_FP32_NVCC_FLAGS
    selftest = "kernels.quantization.selftest:run_fp_quantizer"
    stable_abi = "2.10"

    def arch_defines(self, archs: tuple[CudaArch, ...]) -> tuple[str, ...]:
        native = ("-DFP8_NATIVE",) if arch_lib.fp8_native(archs) else ()
        return (*super().arch_defines(archs), *native)
