// Writing the half-precision copy of a vector, written once against the names every
// instruction-set namespace of cpu_simd.h defines (H, vbf16, vfp16, hstore, hstream) and
// included at the end of each of those namespaces. No include guard on purpose.

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
