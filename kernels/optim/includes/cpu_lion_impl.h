// The Lion kernel body, included through cpu_optim_dispatch.h by cpu_lion.cpp once per
// instruction set inside a namespace where `isa` names that set's primitives (see
// cpu_adam_impl.h). No include guard.
//
// Per element (Chen et al. 2023, "Symbolic Discovery of Optimization Algorithms"):
//   c = beta1 * m + (1 - beta1) * g
//   p = p * (1 - lr * wd) - lr * sign(c)
//   m = beta2 * m + (1 - beta2) * g
//
// sign() turns a one-ulp difference in c near zero into a step of 2 * lr, so c and m are
// rounded exactly like the plain chain of torch ops (two products, then a sum; no FMA), and
// so is the decayed p: vround keeps the compiler from contracting them. Results then match
// such a reference bit for bit.

struct LionConsts {
  // Loop invariants, as the isa:: arithmetic takes them (isa::C: a vector; a float on SVE).
  isa::C beta1, one_minus_beta1, beta2, one_minus_beta2, decay, lr;
  bool use_decay;
  explicit LionConsts(const LionArgs& a)
      : beta1(isa::vconst(a.beta1)),
        one_minus_beta1(isa::vconst(a.one_minus_beta1)),
        beta2(isa::vconst(a.beta2)),
        one_minus_beta2(isa::vconst(a.one_minus_beta2)),
        decay(isa::vconst(a.decay)),
        lr(isa::vconst(a.lr)),
        use_decay(a.decay != 1.0f) {}
};

// Params and grads stored as kParam (see cpu_adam_impl.h); the momentum is fp32.
template <cpu_simd::Dtype kParam, cpu_simd::HalfKind kHalf, bool kStream>
inline void lion_vector(const LionConsts& c, cpu_simd::storage_t<kParam>* pp, const cpu_simd::storage_t<kParam>* gp,
                        float* mp, uint16_t* hp) {
  const isa::V g = isa::load<kParam>(gp);
  const isa::V m = isa::vload(mp);
  isa::V p = isa::load<kParam>(pp);
  const isa::V interp =
      isa::vadd(isa::vround(isa::vmul(m, c.beta1)), isa::vround(isa::vmul(g, c.one_minus_beta1)));
  if (c.use_decay) p = isa::vround(isa::vmul(p, c.decay));
  p = isa::vsub(p, isa::vmul(c.lr, isa::vsign(interp)));  // lr * (+-1 or 0) is exact
  const isa::V m_new = isa::vadd(isa::vround(isa::vmul(m, c.beta2)), isa::vround(isa::vmul(g, c.one_minus_beta2)));
  isa::store<kParam>(pp, p);
  isa::vstore(mp, m_new);
  isa::store_half<kHalf, kStream>(hp, p);
}

template <cpu_simd::Dtype kParam, cpu_simd::HalfKind kHalf, bool kStream>
void lion_loop(const LionArgs& a, int64_t begin, int64_t end) {
  using P = cpu_simd::storage_t<kParam>;
  const int64_t W = isa::width();  // fixed, except SVE's (the CPU's)
  const LionConsts c(a);
  P* const pp = static_cast<P*>(a.p);  // locals: stores through them cannot force reloads
  const P* const gp = static_cast<const P*>(a.g);
  float* const mp = a.m;
  uint16_t* const hp = a.half;
  int64_t i = begin;
  for (; i + W <= end; i += W) {
    lion_vector<kParam, kHalf, kStream>(c, pp + i, gp + i, mp + i, hp == nullptr ? nullptr : hp + i);
  }
  if (i < end) {  // the tail through the same vector code, on zero-padded copies
    const int64_t r = end - i;
    P p[isa::kMaxWidth] = {}, g[isa::kMaxWidth] = {};
    float m[isa::kMaxWidth] = {};
    uint16_t h[isa::kMaxWidth] = {};
    std::memcpy(p, pp + i, r * sizeof(P));
    std::memcpy(g, gp + i, r * sizeof(P));
    std::memcpy(m, mp + i, r * sizeof(float));
    lion_vector<kParam, kHalf, false>(c, p, g, m, h);
    std::memcpy(pp + i, p, r * sizeof(P));
    std::memcpy(mp + i, m, r * sizeof(float));
    if (hp != nullptr) std::memcpy(hp + i, h, r * sizeof(uint16_t));
  }
}

// kState: the dispatch's state storage; this rule keeps its state in fp32 only.
template <cpu_simd::Dtype kParam, cpu_simd::HalfKind kHalf, cpu_simd::Dtype kState>
void step_range(const LionArgs& a, int64_t begin, int64_t end) {
  static_assert(kState == cpu_simd::Dtype::kFloat, "fp32 state only");
  if constexpr (kHalf != cpu_simd::HalfKind::kNone) {
    if (isa::hstreamable(a.half + begin)) {
      lion_loop<kParam, kHalf, true>(a, begin, end);
      isa::vfence();  // streamed stores are weakly ordered: drain them before the join
      return;
    }
  }
  lion_loop<kParam, kHalf, false>(a, begin, end);
}
