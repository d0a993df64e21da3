"""The builders of acme_ops: what op_builder needs to compile, select, install and verify each op.

Sources and include dirs are relative to this folder. Each op's name becomes its build
variable (``DS_BUILD_ACME_RMSNORM=1``) and its module's name.
"""

from __future__ import annotations

from op_builder import CPUOpBuilder, CUDAOpBuilder


class RMSNormBuilder(CPUOpBuilder):
    name = "acme_rmsnorm"
    description = "RMSNorm forward on CPU tensors (fp32, fp16, bf16; OpenMP over rows)"
    sources = ("csrc/rmsnorm.cpp",)
    # -fopenmp links GCC's OpenMP runtime, which slim runtime images lack.
    runtime_packages = ("libgomp1",)
    selftest = "acme_ops.selftest:run_cpu"


class RMSNormCUDABuilder(CUDAOpBuilder):
    name = "acme_rmsnorm_cuda"
    description = "RMSNorm forward on CUDA tensors (fp32, fp16, bf16 from sm_80), one block per row"
    # Device code (.cu) includes only CUDA headers and ours; the torch binding is a .cpp.
    sources = ("csrc/rmsnorm_cuda.cu", "csrc/rmsnorm_cuda_binding.cpp")
    selftest = "acme_ops.selftest:run_cuda"
