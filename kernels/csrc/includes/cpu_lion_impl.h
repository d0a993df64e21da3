// The Lion kernel body, included by cpu_lion.cpp once per instruction set inside a namespace
// where `isa` names that set's primitives (see cpu_adam_impl.h). No include guard.
//
// Per element (Chen et al. 2023, "Symbolic Discovery of Optimization Algorithms"):
//   c = beta1 * m + (1 - beta1) * g
//   p = p * (1 - lr * wd) - lr * sign(c)
//   m = beta2 * m + (1 - beta2) * g
//
// sign() turns a one-ulp difference in c near zero into a step of 2 * lr, so c and m are
// rounded exactly like the plain chain of torch ops (two products, then a sum; no FMA),
// and so is the decayed p: vround keeps the compiler from contracting them. Results then match such a reference
// bit for bit.

struct LionConsts {
  isa::V beta1, one_minus_beta1, beta2, one_minus_beta2, decay, lr;
  bool use_decay;
  explicit LionConsts(const LionArgs& a)
      : beta1(isa::vset1(a.beta1)),
        one_minus_beta1(isa::vset1(a.one_minus_beta1)),
        beta2(isa::vset1(a.beta2)),
        one_minus_beta2(isa::vset1(a.one_minus_beta2)),
        decay(isa::vset1(a.decay)),
        lr(isa::vset1(a.lr)),
        use_decay(a.decay != 1.0f) {}
};

template <cpu_simd::HalfKind kHalf>
inline void lion_vector(const LionConsts& c, float* pp, const float* gp, float* mp, uint16_t* hp) {
  const isa::V g = isa::vload(gp);
  const isa::V m = isa::vload(mp);
  isa::V p = isa::vload(pp);
  const isa::V interp =
      isa::vadd(isa::vround(isa::vmul(m, c.beta1)), isa::vround(isa::vmul(g, c.one_minus_beta1)));
  if (c.use_decay) p = isa::vround(isa::vmul(p, c.decay));  // not fused into the subtraction
  p = isa::vsub(p, isa::vmul(c.lr, isa::vsign(interp)));  // lr * (+-1 or 0) is exact
  const isa::V m_new = isa::vadd(isa::vround(isa::vmul(m, c.beta2)), isa::vround(isa::vmul(g, c.one_minus_beta2)));
  isa::vstore(pp, p);
  isa::vstore(mp, m_new);
  if constexpr (kHalf == cpu_simd::HalfKind::kBF16) isa::vstore_bf16(hp, p);
  if constexpr (kHalf == cpu_simd::HalfKind::kFP16) isa::vstore_fp16(hp, p);
}

template <cpu_simd::HalfKind kHalf>
void lion_range(const LionArgs& a, int64_t begin, int64_t end) {
  constexpr int64_t W = isa::kWidth;
  const LionConsts c(a);
  int64_t i = begin;
  for (; i + W <= end; i += W) {
    lion_vector<kHalf>(c, a.p + i, a.g + i, a.m + i, kHalf == cpu_simd::HalfKind::kNone ? nullptr : a.half + i);
  }
  if (i < end) {  // the tail through the same vector code, on zero-padded copies
    const int64_t r = end - i;
    float p[W] = {}, g[W] = {}, m[W] = {};
    uint16_t h[W] = {};
    std::memcpy(p, a.p + i, r * sizeof(float));
    std::memcpy(g, a.g + i, r * sizeof(float));
    std::memcpy(m, a.m + i, r * sizeof(float));
    lion_vector<kHalf>(c, p, g, m, h);
    std::memcpy(a.p + i, p, r * sizeof(float));
    std::memcpy(a.m + i, m, r * sizeof(float));
    if (kHalf != cpu_simd::HalfKind::kNone) std::memcpy(a.half + i, h, r * sizeof(uint16_t));
  }
}
