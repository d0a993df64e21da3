// The Adam/AdamW kernel body. cpu_adam.cpp includes this file (through cpu_optim_dispatch.h)
// once per instruction set, each time inside its own namespace where `isa` names that set's
// primitives (cpu_simd.h) and the matching `#pragma GCC target` is active, so one source
// yields the scalar, AVX2 and AVX-512 variants (scalar, NEON and SVE on aarch64). Hence no
// include guard.
//
// Per element, in torch.optim.Adam's order (single-tensor implementation):
//   g  = g + wd * p                      (Adam only: L2 penalty)
//   p  = p * (1 - lr * wd)               (AdamW only: decoupled decay)
//   m  = m + (1 - beta1) * (g - m)       (torch's lerp)
//   v  = beta2 * v + (1 - beta2) * g * g
//   p  = p - step_size * m / (sqrt(v) / sqrt(bc2) + eps)
// The last line is computed as p - (step_size * sqrt(bc2)) * m / (sqrt(v) + eps * sqrt(bc2)):
// the same value with one division instead of two.

struct AdamConsts {
  // Loop invariants, as the isa:: arithmetic takes them (isa::C: a vector; a float on SVE).
  isa::C l2, decay, one_minus_beta1, beta2, one_minus_beta2, eps_bc2, neg_step_bc2;
  bool use_l2, use_decay;
  explicit AdamConsts(const AdamArgs& a)
      : l2(isa::vconst(a.l2)),
        decay(isa::vconst(a.decay)),
        one_minus_beta1(isa::vconst(a.one_minus_beta1)),
        beta2(isa::vconst(a.beta2)),
        one_minus_beta2(isa::vconst(a.one_minus_beta2)),
        eps_bc2(isa::vconst(a.eps * a.bc2_sqrt)),
        neg_step_bc2(isa::vconst(-a.step_size * a.bc2_sqrt)),
        use_l2(a.l2 != 0.0f),
        use_decay(a.decay != 1.0f) {}
};

// One vector of elements. Params and grads are stored as kParam (fp32, or bf16 / fp16 params
// updated directly: widened on load, the fp32 result rounded on store), the moments as kState
// (fp32, or bf16: this step's update uses the fp32 moments it computed; only what is stored for
// the next step is rounded).
template <cpu_simd::Dtype kParam, cpu_simd::Dtype kState, cpu_simd::HalfKind kHalf, bool kStream>
inline void adam_vector(const AdamConsts& c, cpu_simd::storage_t<kParam>* pp, const cpu_simd::storage_t<kParam>* gp,
                        cpu_simd::storage_t<kState>* mp, cpu_simd::storage_t<kState>* vp, uint16_t* hp) {
  isa::V p = isa::load<kParam>(pp);
  isa::V g = isa::load<kParam>(gp);
  if (c.use_l2) g = isa::vfmadd(c.l2, p, g);
  if (c.use_decay) p = isa::vmul(p, c.decay);
  isa::V m = isa::load<kState>(mp);
  m = isa::vfmadd(c.one_minus_beta1, isa::vsub(g, m), m);
  const isa::V v = isa::vfmadd(c.one_minus_beta2, isa::vmul(g, g), isa::vmul(c.beta2, isa::load<kState>(vp)));
  const isa::V denom = isa::vadd(isa::vsqrt(v), c.eps_bc2);
  p = isa::vfmadd(c.neg_step_bc2, isa::vdiv(m, denom), p);
  isa::store<kParam>(pp, p);
  isa::store<kState>(mp, m);
  isa::store<kState>(vp, v);
  isa::store_half<kHalf, kStream>(hp, p);
}

template <cpu_simd::Dtype kParam, cpu_simd::Dtype kState, cpu_simd::HalfKind kHalf, bool kStream>
void adam_loop(const AdamArgs& a, int64_t begin, int64_t end) {
  using P = cpu_simd::storage_t<kParam>;
  using S = cpu_simd::storage_t<kState>;
  const int64_t W = isa::width();  // fixed, except SVE's (the CPU's)
  const AdamConsts c(a);
  // Locals, so that stores through the data pointers cannot make the compiler reload them.
  P* const pp = static_cast<P*>(a.p);
  const P* const gp = static_cast<const P*>(a.g);
  S* const mp = static_cast<S*>(a.m);
  S* const vp = static_cast<S*>(a.v);
  uint16_t* const hp = a.half;
  int64_t i = begin;
  for (; i + W <= end; i += W) {
    adam_vector<kParam, kState, kHalf, kStream>(c, pp + i, gp + i, mp + i, vp + i, hp == nullptr ? nullptr : hp + i);
  }
  if (i < end) {
    // The tail goes through the same vector code via zero-padded copies, so every element
    // of a tensor is computed identically whatever its position.
    const int64_t r = end - i;
    P p[isa::kMaxWidth] = {}, g[isa::kMaxWidth] = {};
    S m[isa::kMaxWidth] = {}, v[isa::kMaxWidth] = {};
    uint16_t h[isa::kMaxWidth] = {};
    std::memcpy(p, pp + i, r * sizeof(P));
    std::memcpy(g, gp + i, r * sizeof(P));
    std::memcpy(m, mp + i, r * sizeof(S));
    std::memcpy(v, vp + i, r * sizeof(S));
    adam_vector<kParam, kState, kHalf, false>(c, p, g, m, v, h);
    std::memcpy(pp + i, p, r * sizeof(P));
    std::memcpy(mp + i, m, r * sizeof(S));
    std::memcpy(vp + i, v, r * sizeof(S));
    if (hp != nullptr) std::memcpy(hp + i, h, r * sizeof(uint16_t));
  }
}

// Elements [begin, end) of one tensor: one pass over p, g, m, v (and the half copy).
template <cpu_simd::Dtype kParam, cpu_simd::HalfKind kHalf, cpu_simd::Dtype kState>
void step_range(const AdamArgs& a, int64_t begin, int64_t end) {
  if constexpr (kHalf != cpu_simd::HalfKind::kNone) {
    if (isa::hstreamable(a.half + begin)) {
      adam_loop<kParam, kState, kHalf, true>(a, begin, end);
      isa::vfence();  // streamed stores are weakly ordered: drain them before the join
      return;
    }
  }
  adam_loop<kParam, kState, kHalf, false>(a, begin, end);
}
