// The storage conversions of one instruction set, shaped as an optimizer kernel body so that
// cpu_optim_dispatch.h compiles it once per instruction set (in its target region) and picks it
// by level like the real kernels. simd_check.cpp includes it through that header; no include guard.
//
// The five variants the dispatch instantiates, on ConvArgs {in, out}:
//   fp32 params, no copy     out (float)    = in (float): a plain vector copy
//   fp32 params, bf16 copy   out (uint16_t) = store_half<kBF16>(in)
//   fp32 params, fp16 copy   out (uint16_t) = store_half<kFP16>(in)
//   bf16 params              out (float)    = load<kBFloat16>(in)
//   fp16 params              out (float)    = load<kHalf>(in)

template <cpu_simd::Dtype kParam, cpu_simd::HalfKind kHalf>
inline void convert_vector(const void* in, void* out) {
  using cpu_simd::Dtype;
  if constexpr (kParam != Dtype::kFloat) {
    isa::vstore(static_cast<float*>(out), isa::load<kParam>(static_cast<const uint16_t*>(in)));
  } else if constexpr (kHalf == cpu_simd::HalfKind::kNone) {
    isa::vstore(static_cast<float*>(out), isa::vload(static_cast<const float*>(in)));
  } else {
    isa::store_half<kHalf, false>(static_cast<uint16_t*>(out), isa::vload(static_cast<const float*>(in)));
  }
}

template <cpu_simd::Dtype kParam, cpu_simd::HalfKind kHalf, cpu_simd::Dtype kState>
void step_range(const ConvArgs& a, int64_t begin, int64_t end) {
  static_assert(kState == cpu_simd::Dtype::kFloat, "no state");
  const size_t in_size = kParam == cpu_simd::Dtype::kFloat ? sizeof(float) : sizeof(uint16_t);
  const size_t out_size = kHalf == cpu_simd::HalfKind::kNone ? sizeof(float) : sizeof(uint16_t);
  const char* in = static_cast<const char*>(a.in);
  char* out = static_cast<char*>(a.out);
  const int64_t W = isa::width();
  int64_t i = begin;
  for (; i + W <= end; i += W) convert_vector<kParam, kHalf>(in + i * in_size, out + i * out_size);
  if (i < end) {  // the tail through zero-padded buffers, as the kernels do
    float in_tail[isa::kMaxWidth] = {}, out_tail[isa::kMaxWidth] = {};
    std::memcpy(in_tail, in + i * in_size, (end - i) * in_size);
    convert_vector<kParam, kHalf>(in_tail, out_tail);
    std::memcpy(out + i * out_size, out_tail, (end - i) * out_size);
  }
}
