from __future__ import annotations

from op_builder.ops._base import BuiltinCPUOp
from op_builder.ops._cpu_common import OPENMP_RUNTIME_PACKAGES


class CPUAdagradBuilder(BuiltinCPUOp):
    name = "cpu_adagrad"
    description = "Adagrad step on CPU tensors (SIMD + OpenMP), optional fp16/bf16 copy-out"
    # The binding (torch) and the kernels (torch-free) in two TUs: an edit to the math
    # recompiles only the kernels' one.
    sources = ("cpu_optim/cpu_adagrad.cpp", "cpu_optim/cpu_adagrad_kernel.cpp")
    runtime_packages = OPENMP_RUNTIME_PACKAGES
