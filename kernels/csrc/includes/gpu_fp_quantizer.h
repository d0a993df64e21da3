// Launchers of the grouped FP8 quantizer (OCP e4m3 "fn" and e5m2).
//
// x is [groups, group_size]; scale = max|x| / fmax (448 for e4m3, 57344 for e5m2);
// q = fp8(clamp(x / scale, -fmax, fmax)) rounded to nearest even, stored as bytes
// with the layout of torch.float8_e4m3fn / torch.float8_e5m2. A group of zeros has
// scale 0 and codes 0. Dequantize: y = float(q) * scale. Non-finite inputs as in
// torch: a NaN makes its group's scale NaN and every code 0; an infinity makes the
// scale infinite, finite elements signed zeros and infinite ones NaN codes (the clamp
// keeps NaN). Either way the group dequantizes to NaN. As for gpu_quantizer.h, the
// CUDA build keeps fp32 denormals (no flush-to-zero): tiny groups match the reference.
#pragma once

#include "gpu_runtime.h"

namespace gpu_ops {

enum class Fp8Format : int { kE4M3 = 0, kE5M2 = 1 };

gpuError_t fp8_quantize(const void* x, uint8_t* q, float* scale, int64_t groups, int64_t group_size,
                        Fp8Format format, DType dtype, gpuStream_t stream);

gpuError_t fp8_dequantize(const uint8_t* q, const float* scale, void* y, int64_t groups, int64_t group_size,
                          Fp8Format format, DType dtype, gpuStream_t stream);

}  // namespace gpu_ops
