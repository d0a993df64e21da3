// Reading and writing vectors of any storage Dtype, and writing the half-precision copy of a
// vector, written once against the names every instruction-set namespace of cpu_simd.h defines
// (V, H, vload, vstore, vload_bf16, vload_fp16, vbf16, vfp16, hstore, hstream) and included at
// the end of each of those namespaces. No include guard on purpose.

// kWidth values of a tensor stored as kDtype, widened to fp32.
template <Dtype kDtype>
inline V load(const storage_t<kDtype>* src) {
  if constexpr (kDtype == Dtype::kFloat) {
    return vload(src);
  } else if constexpr (kDtype == Dtype::kBFloat16) {
    return vload_bf16(src);
  } else {
    return vload_fp16(src);
  }
}

// x rounded to kDtype (to nearest even, as tensor.to(dtype)) and stored.
template <Dtype kDtype>
inline void store(storage_t<kDtype>* dst, V x) {
  if constexpr (kDtype == Dtype::kFloat) {
    vstore(dst, x);
  } else if constexpr (kDtype == Dtype::kBFloat16) {
    hstore(dst, vbf16(x));
  } else {
    hstore(dst, vfp16(x));
  }
}

// kStream: a non-temporal store (the destination must satisfy hstreamable).
template <HalfKind kHalf, bool kStream>
inline void store_half(uint16_t* dst, V x) {
  if constexpr (kHalf != HalfKind::kNone) {
    const H h = kHalf == HalfKind::kBF16 ? vbf16(x) : vfp16(x);
    if constexpr (kStream) {
      hstream(dst, h);
    } else {
      hstore(dst, h);
    }
  }
}
