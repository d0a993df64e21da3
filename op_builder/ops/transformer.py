from __future__ import annotations

from op_builder.ops._base import BuiltinCUDAOp


class TransformerBuilder(BuiltinCUDAOp):
    name = "transformer"
    description = "Fused LayerNorm, bias+GeLU and scaled masked softmax, forward and backward"
    sources = (
        "transformer/layer_norm.cu",
        "transformer/bias_gelu.cu",
        "transformer/softmax.cu",
        "transformer/bindings.cpp",
    )
