// The launcher of acme_rmsnorm_cuda: raw pointers, sizes and a stream, so that the device
// code (rmsnorm_cuda.cu) needs no torch header and the binding no CUDA kernel syntax.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

namespace acme {

enum class DType { kFloat32, kFloat16, kBFloat16 };

// y[r, :] = x[r, :] / sqrt(mean(x[r, :]^2) + eps) * weight, for rows x cols contiguous
// x and y and a weight of cols elements, all of `dtype`; fp32 math.
cudaError_t rms_norm_forward(const void* x, const void* weight, void* y, int64_t rows, int64_t cols,
                             float eps, DType dtype, cudaStream_t stream);

// Whether this build has bf16 kernels: the op builder defines BF16_AVAILABLE when every arch
// of the op's list is sm_80 or newer.
bool has_bf16();

}  // namespace acme
