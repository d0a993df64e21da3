// The Adagrad kernel body, included through cpu_optim_dispatch.h by cpu_adagrad.cpp once per
// instruction set inside a namespace where `isa` names that set's primitives (see
// cpu_adam_impl.h). No include guard.
//
// Per element, as torch.optim.Adagrad (single-tensor implementation):
//   g   = g + wd * p
//   sum = sum + g * g
//   p   = p - clr * g / (sqrt(sum) + eps)     clr = lr / (1 + (step - 1) * lr_decay)

struct AdagradConsts {
  // Loop invariants, as the isa:: arithmetic takes them (isa::C: a vector; a float on SVE).
  isa::C l2, eps, neg_clr;
  bool use_l2;
  explicit AdagradConsts(const AdagradArgs& a)
      : l2(isa::vconst(a.l2)), eps(isa::vconst(a.eps)), neg_clr(isa::vconst(-a.clr)), use_l2(a.l2 != 0.0f) {}
};

// Params and grads stored as kParam (see cpu_adam_impl.h); the sum is fp32.
template <cpu_simd::Dtype kParam, cpu_simd::HalfKind kHalf, bool kStream>
inline void adagrad_vector(const AdagradConsts& c, cpu_simd::storage_t<kParam>* pp,
                           const cpu_simd::storage_t<kParam>* gp, float* sp, uint16_t* hp) {
  isa::V p = isa::load<kParam>(pp);
  isa::V g = isa::load<kParam>(gp);
  if (c.use_l2) g = isa::vfmadd(c.l2, p, g);
  const isa::V sum = isa::vfmadd(g, g, isa::vload(sp));
  const isa::V std = isa::vadd(isa::vsqrt(sum), c.eps);
  p = isa::vfmadd(c.neg_clr, isa::vdiv(g, std), p);
  isa::store<kParam>(pp, p);
  isa::vstore(sp, sum);
  isa::store_half<kHalf, kStream>(hp, p);
}

template <cpu_simd::Dtype kParam, cpu_simd::HalfKind kHalf, bool kStream>
void adagrad_loop(const AdagradArgs& a, int64_t begin, int64_t end) {
  using P = cpu_simd::storage_t<kParam>;
  const int64_t W = isa::width();  // fixed, except SVE's (the CPU's)
  const AdagradConsts c(a);
  P* const pp = static_cast<P*>(a.p);  // locals: stores through them cannot force reloads
  const P* const gp = static_cast<const P*>(a.g);
  float* const sp = a.sum;
  uint16_t* const hp = a.half;
  int64_t i = begin;
  for (; i + W <= end; i += W) {
    adagrad_vector<kParam, kHalf, kStream>(c, pp + i, gp + i, sp + i, hp == nullptr ? nullptr : hp + i);
  }
  if (i < end) {  // the tail through the same vector code, on zero-padded copies
    const int64_t r = end - i;
    P p[isa::kMaxWidth] = {}, g[isa::kMaxWidth] = {};
    float s[isa::kMaxWidth] = {};
    uint16_t h[isa::kMaxWidth] = {};
    std::memcpy(p, pp + i, r * sizeof(P));
    std::memcpy(g, gp + i, r * sizeof(P));
    std::memcpy(s, sp + i, r * sizeof(float));
    adagrad_vector<kParam, kHalf, false>(c, p, g, s, h);
    std::memcpy(pp + i, p, r * sizeof(P));
    std::memcpy(sp + i, s, r * sizeof(float));
    if (hp != nullptr) std::memcpy(hp + i, h, r * sizeof(uint16_t));
  }
}

// kState: the dispatch's state storage; this rule keeps its state in fp32 only.
template <cpu_simd::Dtype kParam, cpu_simd::HalfKind kHalf, cpu_simd::Dtype kState>
void step_range(const AdagradArgs& a, int64_t begin, int64_t end) {
  static_assert(kState == cpu_simd::Dtype::kFloat, "fp32 state only");
  if constexpr (kHalf != cpu_simd::HalfKind::kNone) {
    if (isa::hstreamable(a.half + begin)) {
      adagrad_loop<kParam, kHalf, true>(a, begin, end);
      isa::vfence();  // streamed stores are weakly ordered: drain them before the join
      return;
    }
  }
  adagrad_loop<kParam, kHalf, false>(a, begin, end);
}
