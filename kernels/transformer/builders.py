"""The transformer op: LayerNorm, bias + GeLU and scaled masked softmax, forward and backward."""

from __future__ import annotations

from kernels._build_common import INCLUDE_DIRS
from op_builder.builder import CUDAOpBuilder

# Where this family's ops come among ours wherever ops are listed (op_builder.registry): CPU ops
# first, then GPU ops, each by family rank, lowest first, then in the order defined here.
FAMILY_RANK = 30


class TransformerBuilder(CUDAOpBuilder):
    name = "transformer"
    description = "Fused LayerNorm, bias+GeLU and scaled masked softmax, forward and backward"
    sources = (
        "csrc/layer_norm.cu",
        "csrc/bias_gelu.cu",
        "csrc/softmax.cu",
        "csrc/bindings.cpp",
    )
    include_dirs = INCLUDE_DIRS
    selftest = "kernels.transformer.selftest:run_transformer"
    stable_abi = "2.10"
