from __future__ import annotations

from op_builder.ops._base import BuiltinCUDAOp


class FusedAdamBuilder(BuiltinCUDAOp):
    name = "fused_adam"
    description = "Multi-tensor Adam / AdamW on GPU (fp32, fp16, bf16 params)"
    sources = ("fused_optim/fused_adam.cu", "fused_optim/fused_adam_bindings.cpp")


class FusedLambBuilder(BuiltinCUDAOp):
    name = "fused_lamb"
    description = "Multi-tensor Lamb (Adam with layer-wise trust ratio) on GPU"
    sources = ("fused_optim/fused_lamb.cu", "fused_optim/fused_lamb_bindings.cpp")


class FusedLionBuilder(BuiltinCUDAOp):
    name = "fused_lion"
    description = "Multi-tensor Lion on GPU"
    sources = ("fused_optim/fused_lion.cu", "fused_optim/fused_lion_bindings.cpp")
