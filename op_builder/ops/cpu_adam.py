from __future__ import annotations

from op_builder.builder import CPUOpBuilder
from op_builder.ops._cpu_common import OPENMP_RUNTIME_PACKAGES


class CPUAdamBuilder(CPUOpBuilder):
    name = "cpu_adam"
    description = "Adam / AdamW step on CPU tensors (SIMD + OpenMP), optional fp16/bf16 copy-out"
    sources = ("cpu_optim/cpu_adam.cpp",)
    runtime_packages = OPENMP_RUNTIME_PACKAGES
