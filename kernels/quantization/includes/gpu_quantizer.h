// Launchers of the grouped integer quantizer (int8 / int4, symmetric / asymmetric).
//
// x is [groups, group_size]. Symmetric: scale = max|x| / qmax (qmax = 127 or 7),
// q = clamp(round(x / scale), -qmax, qmax) stored as int8 (bits 8) or as 4-bit two's
// complement. Asymmetric: scale = (max - min) / (2^bits - 1), offset = min,
// q = clamp(round((x - min) / scale), 0, 2^bits - 1) stored unsigned.
// Rounding is to nearest even; a group whose scale is not > 0 (0, or NaN) quantizes
// to code 0. Non-finite inputs as torch's amin / amax / division give them: a NaN
// makes its group's scale (and offset) NaN; an infinity makes the scale infinite, so
// every code of the group is 0 (inf / inf is NaN, stored as 0). Dequantized, such a
// group is NaN throughout.
// Int4 packs two codes per byte: element 2i in the low nibble, 2i + 1 in the high.
// Dequantize: x = q * scale (+ offset).
// The op is built with fast math but without flush-to-zero (op_builder/ops/quantizer.py),
// so groups with denormal scales (absmax below about 1e-36) match the PyTorch
// reference bit for bit like all others. x and q need no alignment beyond their types'.
#pragma once

#include "gpu_runtime.h"

namespace gpu_ops {

// q: bits 8 -> groups * group_size bytes; bits 4 -> groups * group_size / 2 bytes
// (group_size even). offset is written (and read) only when !symmetric.
gpuError_t quantize_int(const void* x, uint8_t* q, float* scale, float* offset, int64_t groups,
                        int64_t group_size, int bits, bool symmetric, DType dtype, gpuStream_t stream);

gpuError_t dequantize_int(const uint8_t* q, const float* scale, const float* offset, void* y, int64_t groups,
                          int64_t group_size, int bits, bool symmetric, DType dtype, gpuStream_t stream);

}  // namespace gpu_ops
