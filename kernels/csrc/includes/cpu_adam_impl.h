// The Adam/AdamW kernel body. cpu_adam.cpp includes this file once per instruction set, each
// time inside its own namespace where `isa` names that set's primitives (cpu_simd.h) and the
// matching `#pragma GCC target` is active, so one source yields the scalar, AVX2 and AVX-512
// variants. Hence no include guard.
//
// Per element, in torch.optim.Adam's order (single-tensor implementation):
//   g  = g + wd * p                      (Adam only: L2 penalty)
//   p  = p * (1 - lr * wd)               (AdamW only: decoupled decay)
//   m  = m + (1 - beta1) * (g - m)       (torch's lerp)
//   v  = beta2 * v + (1 - beta2) * g * g
//   p  = p - step_size * m / (sqrt(v) / sqrt(bc2) + eps)

struct AdamConsts {
  isa::V l2, decay, one_minus_beta1, beta2, one_minus_beta2, bc2_sqrt, eps, neg_step_size;
  bool use_l2, use_decay;
  explicit AdamConsts(const AdamArgs& a)
      : l2(isa::vset1(a.l2)),
        decay(isa::vset1(a.decay)),
        one_minus_beta1(isa::vset1(a.one_minus_beta1)),
        beta2(isa::vset1(a.beta2)),
        one_minus_beta2(isa::vset1(a.one_minus_beta2)),
        bc2_sqrt(isa::vset1(a.bc2_sqrt)),
        eps(isa::vset1(a.eps)),
        neg_step_size(isa::vset1(-a.step_size)),
        use_l2(a.l2 != 0.0f),
        use_decay(a.decay != 1.0f) {}
};

template <cpu_simd::HalfKind kHalf>
inline void adam_vector(const AdamConsts& c, float* pp, const float* gp, float* mp, float* vp, uint16_t* hp) {
  isa::V p = isa::vload(pp);
  isa::V g = isa::vload(gp);
  if (c.use_l2) g = isa::vfmadd(c.l2, p, g);
  if (c.use_decay) p = isa::vmul(p, c.decay);
  isa::V m = isa::vload(mp);
  m = isa::vfmadd(c.one_minus_beta1, isa::vsub(g, m), m);
  const isa::V v = isa::vfmadd(c.one_minus_beta2, isa::vmul(g, g), isa::vmul(c.beta2, isa::vload(vp)));
  const isa::V denom = isa::vadd(isa::vdiv(isa::vsqrt(v), c.bc2_sqrt), c.eps);
  p = isa::vfmadd(c.neg_step_size, isa::vdiv(m, denom), p);
  isa::vstore(pp, p);
  isa::vstore(mp, m);
  isa::vstore(vp, v);
  if constexpr (kHalf == cpu_simd::HalfKind::kBF16) isa::vstore_bf16(hp, p);
  if constexpr (kHalf == cpu_simd::HalfKind::kFP16) isa::vstore_fp16(hp, p);
}

// Elements [begin, end) of one tensor: one pass over p, g, m, v (and the half copy).
template <cpu_simd::HalfKind kHalf>
void adam_range(const AdamArgs& a, int64_t begin, int64_t end) {
  constexpr int64_t W = isa::kWidth;
  const AdamConsts c(a);
  int64_t i = begin;
  for (; i + W <= end; i += W) {
    adam_vector<kHalf>(c, a.p + i, a.g + i, a.m + i, a.v + i, kHalf == cpu_simd::HalfKind::kNone ? nullptr : a.half + i);
  }
  if (i < end) {
    // The tail goes through the same vector code via zero-padded copies, so every element
    // of a tensor is computed identically whatever its position.
    const int64_t r = end - i;
    float p[W] = {}, g[W] = {}, m[W] = {}, v[W] = {};
    uint16_t h[W] = {};
    std::memcpy(p, a.p + i, r * sizeof(float));
    std::memcpy(g, a.g + i, r * sizeof(float));
    std::memcpy(m, a.m + i, r * sizeof(float));
    std::memcpy(v, a.v + i, r * sizeof(float));
    adam_vector<kHalf>(c, p, g, m, v, h);
    std::memcpy(a.p + i, p, r * sizeof(float));
    std::memcpy(a.m + i, m, r * sizeof(float));
    std::memcpy(a.v + i, v, r * sizeof(float));
    if (kHalf != cpu_simd::HalfKind::kNone) std::memcpy(a.half + i, h, r * sizeof(uint16_t));
  }
}
