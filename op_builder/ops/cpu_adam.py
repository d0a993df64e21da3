from __future__ import annotations

from op_builder.ops._base import BuiltinCPUOp
from op_builder.ops._cpu_common import OPENMP_RUNTIME_PACKAGES


class CPUAdamBuilder(BuiltinCPUOp):
    name = "cpu_adam"
    description = "Adam / AdamW step on CPU tensors (SIMD + OpenMP), optional fp16/bf16 copy-out"
    # The binding (torch) and the kernels (torch-free) in two TUs: an edit to the math
    # recompiles only the kernels' one.
    sources = ("cpu_optim/cpu_adam.cpp", "cpu_optim/cpu_adam_kernel.cpp")
    runtime_packages = OPENMP_RUNTIME_PACKAGES
