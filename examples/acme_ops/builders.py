"""The builders of acme_ops: what op_builder needs to compile, select, install and verify each op.

Sources and include dirs are relative to this folder, but for ``SHARED_INCLUDE_DIR``: the
headers op_builder ships for every op, ``op_abi.h`` among them, which both bindings are written
against once for both of torch's ABIs. Each op's name becomes its build variable
(``DS_BUILD_ACME_RMSNORM=1``) and its module's name.
"""

from __future__ import annotations

from op_builder import SHARED_INCLUDE_DIR, CPUOpBuilder, CUDAOpBuilder

# This package's headers, then op_builder's shared ones (op_abi.h, gpu_bindings.h).
INCLUDE_DIRS = ("includes", SHARED_INCLUDE_DIR)
# Built with torch >= 2.10 on linux/amd64, each op is one stable-ABI module that loads on every
# torch from 2.10 on (a CUDA one with the same CUDA major); an older torch, ROCm or arm64 builds a
# module for that torch alone, from the same sources.
STABLE_ABI = "2.10"


class RMSNormBuilder(CPUOpBuilder):
    name = "acme_rmsnorm"
    description = "RMSNorm forward on CPU tensors (fp32, fp16, bf16; OpenMP over rows)"
    sources = ("csrc/rmsnorm.cpp",)
    include_dirs = INCLUDE_DIRS
    stable_abi = STABLE_ABI
    # -fopenmp links GCC's OpenMP runtime, which slim runtime images lack.
    runtime_packages = ("libgomp1",)
    selftest = "acme_ops.selftest:run_cpu"


class RMSNormCUDABuilder(CUDAOpBuilder):
    name = "acme_rmsnorm_cuda"
    description = "RMSNorm forward on CUDA tensors (fp32, fp16, bf16 from sm_80), one block per row"
    # Device code (.cu) includes only CUDA headers and ours; the torch binding is a .cpp.
    sources = ("csrc/rmsnorm_cuda.cu", "csrc/rmsnorm_cuda_binding.cpp")
    include_dirs = INCLUDE_DIRS
    stable_abi = STABLE_ABI
    selftest = "acme_ops.selftest:run_cuda"
