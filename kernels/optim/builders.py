"""The optimizer ops: cpu_adam, cpu_adagrad, cpu_lion (CPU) and fused_adam, fused_lamb,
fused_lion (GPU). Sources in csrc/, headers in includes/ (and the shared kernels/includes)."""

from __future__ import annotations

from kernels._build_common import INCLUDE_DIRS, OPENMP_RUNTIME_PACKAGES
from op_builder.builder import CPUOpBuilder, CUDAOpBuilder

# Where this family's ops come among ours wherever ops are listed (op_builder.registry): CPU ops
# first, then GPU ops, each by family rank, lowest first, then in the order defined here.
FAMILY_RANK = 10


class CPUAdamBuilder(CPUOpBuilder):
    name = "cpu_adam"
    description = "Adam / AdamW step on CPU tensors (SIMD + OpenMP), optional fp16/bf16 copy-out"
    # The binding (torch) and the kernels (torch-free) in two TUs: an edit to the math
    # recompiles only the kernels' one.
    sources = ("csrc/cpu_adam.cpp", "csrc/cpu_adam_kernel.cpp")
    include_dirs = INCLUDE_DIRS
    runtime_packages = OPENMP_RUNTIME_PACKAGES
    selftest = "kernels.optim.selftest:run_cpu_adam"
    stable_abi = "2.10"


class CPUAdagradBuilder(CPUOpBuilder):
    name = "cpu_adagrad"
    description = "Adagrad step on CPU tensors (SIMD + OpenMP), optional fp16/bf16 copy-out"
    sources = ("csrc/cpu_adagrad.cpp", "csrc/cpu_adagrad_kernel.cpp")
    include_dirs = INCLUDE_DIRS
    runtime_packages = OPENMP_RUNTIME_PACKAGES
    selftest = "kernels.optim.selftest:run_cpu_adagrad"
    stable_abi = "2.10"


class CPULionBuilder(CPUOpBuilder):
    name = "cpu_lion"
    description = "Lion step on CPU tensors (SIMD + OpenMP), optional fp16/bf16 copy-out"
    sources = ("csrc/cpu_lion.cpp", "csrc/cpu_lion_kernel.cpp")
    include_dirs = INCLUDE_DIRS
    runtime_packages = OPENMP_RUNTIME_PACKAGES
    selftest = "kernels.optim.selftest:run_cpu_lion"
    stable_abi = "2.10"


class FusedAdamBuilder(CUDAOpBuilder):
    name = "fused_adam"
    description = "Multi-tensor Adam / AdamW on GPU (fp32, fp16, bf16 params)"
    sources = ("csrc/fused_adam.cu", "csrc/fused_adam_bindings.cpp")
    include_dirs = INCLUDE_DIRS
    selftest = "kernels.optim.selftest:run_fused_adam"
    stable_abi = "2.10"


class FusedLambBuilder(CUDAOpBuilder):
    name = "fused_lamb"
    description = "Multi-tensor Lamb (Adam with layer-wise trust ratio) on GPU"
    sources = ("csrc/fused_lamb.cu", "csrc/fused_lamb_bindings.cpp")
    include_dirs = INCLUDE_DIRS
    selftest = "kernels.optim.selftest:run_fused_lamb"
    stable_abi = "2.10"


class FusedLionBuilder(CUDAOpBuilder):
    name = "fused_lion"
    description = "Multi-tensor Lion on GPU"
    sources = ("csrc/fused_lion.cu", "csrc/fused_lion_bindings.cpp")
    include_dirs = INCLUDE_DIRS
    selftest = "kernels.optim.selftest:run_fused_lion"
    stable_abi = "2.10"
