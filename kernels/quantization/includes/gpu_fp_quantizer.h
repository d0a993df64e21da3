// Launchers of the grouped FP8 quantizer (OCP e4m3 "fn" and e5m2), and of the packed
// quantizer of small float formats (fp_quantize / fp_dequantize, below).
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

// ---- packed small float formats (fp_packed.cu; rules in gpu_fp_format.h and
// kernels/fp_quantization.py)
//
// x is [groups, group_size]; scale = max|x| / fmax as above; each code is encode(x / scale) of
// gpu_fp_format.h, rounded to nearest even or (stochastic) by the Philox word of the element's
// flat index under `seed`. A group whose scale is not > 0 gets codes 0. The codes of a group
// are packed into group_size * bits / 8 bytes, least significant bit first (group_size must
// make whole bytes): q is [groups, group_size * bits / 8].
enum class FpFormat : int { kE4M3 = 0, kE5M2 = 1, kE3M2 = 2, kE2M3 = 3, kE2M1 = 4, kE4M7 = 5 };

constexpr int fp_format_bits(FpFormat format) {
  switch (format) {
    case FpFormat::kE4M3:
    case FpFormat::kE5M2:
      return 8;
    case FpFormat::kE3M2:
    case FpFormat::kE2M3:
      return 6;
    case FpFormat::kE2M1:
      return 4;
    case FpFormat::kE4M7:
      return 12;
  }
  return 0;
}

gpuError_t fp_quantize(const void* x, uint8_t* q, float* scale, int64_t groups, int64_t group_size,
                       FpFormat format, bool stochastic, uint64_t seed, DType dtype, gpuStream_t stream);

// y is [out_groups, group_size]. Without `index` (nullptr) out_groups is q's groups. With it,
// output row r (row_groups groups) is input row index[r]: out_groups = rows named * row_groups,
// and an index outside [0, rows) gives NaN (the bindings' caller checks them first).
gpuError_t fp_dequantize(const uint8_t* q, const float* scale, void* y, int64_t out_groups, int64_t group_size,
                         FpFormat format, const int64_t* index, int64_t row_groups, int64_t rows, DType dtype,
                         gpuStream_t stream);

}  // namespace gpu_ops
