// The element loop of a CPU optimizer rule with one fp32 state tensor (Adagrad's sum, Lion's
// momentum), shared by cpu_adagrad_impl.h and cpu_lion_impl.h. Included by those headers, so
// once per instruction set inside a namespace where `isa` names that set's primitives (see
// cpu_optim_dispatch.h). No include guard.
//
// A rule is its Consts struct (the loop invariants, built from the op's Args), with
//     void update(isa::V& p, isa::V g, isa::V& state) const;
// the update of one vector of elements, in fp32 (params and grads are stored as kParam, see
// cpu_adam_impl.h, and widened on load; the state is fp32).

// One vector of elements: loads, the rule's update, stores (the half copy last).
template <typename Consts, cpu_simd::Dtype kParam, cpu_simd::HalfKind kHalf, bool kStream>
inline void one_state_vector(const Consts& c, cpu_simd::storage_t<kParam>* pp, const cpu_simd::storage_t<kParam>* gp,
                             float* sp, uint16_t* hp) {
  isa::V p = isa::load<kParam>(pp);
  isa::V s = isa::vload(sp);
  c.update(p, isa::load<kParam>(gp), s);
  isa::store<kParam>(pp, p);
  isa::vstore(sp, s);
  isa::store_half<kHalf, kStream>(hp, p);
}

// Elements [begin, end) of one tensor: one pass over p, g, the state (and the half copy).
template <typename Consts, cpu_simd::Dtype kParam, cpu_simd::HalfKind kHalf, bool kStream, typename Args>
void one_state_loop(const Args& a, float* const sp, int64_t begin, int64_t end) {
  using P = cpu_simd::storage_t<kParam>;
  const int64_t W = isa::width();  // fixed, except SVE's (the CPU's)
  const Consts c(a);
  P* const pp = static_cast<P*>(a.p);  // locals: stores through them cannot force reloads
  const P* const gp = static_cast<const P*>(a.g);
  uint16_t* const hp = a.half;
  int64_t i = begin;
  for (; i + W <= end; i += W) {
    one_state_vector<Consts, kParam, kHalf, kStream>(c, pp + i, gp + i, sp + i, hp == nullptr ? nullptr : hp + i);
  }
  if (i < end) {  // the tail through the same vector code, on zero-padded copies
    const int64_t r = end - i;
    P p[isa::kMaxWidth] = {}, g[isa::kMaxWidth] = {};
    float s[isa::kMaxWidth] = {};
    uint16_t h[isa::kMaxWidth] = {};
    std::memcpy(p, pp + i, r * sizeof(P));
    std::memcpy(g, gp + i, r * sizeof(P));
    std::memcpy(s, sp + i, r * sizeof(float));
    one_state_vector<Consts, kParam, kHalf, false>(c, p, g, s, h);
    std::memcpy(pp + i, p, r * sizeof(P));
    std::memcpy(sp + i, s, r * sizeof(float));
    if (hp != nullptr) std::memcpy(hp + i, h, r * sizeof(uint16_t));
  }
}

// The step_range of such a rule (cpu_optim_dispatch.h); `state` is the op's fp32 state array.
// kState: the dispatch's state storage; these rules keep their state in fp32 only.
template <typename Consts, cpu_simd::Dtype kParam, cpu_simd::HalfKind kHalf, cpu_simd::Dtype kState,
          typename Args>
void one_state_step_range(const Args& a, float* state, int64_t begin, int64_t end) {
  static_assert(kState == cpu_simd::Dtype::kFloat, "fp32 state only");
  if constexpr (kHalf != cpu_simd::HalfKind::kNone) {
    if (isa::hstreamable(a.half + begin)) {
      one_state_loop<Consts, kParam, kHalf, true>(a, state, begin, end);
      isa::vfence();  // streamed stores are weakly ordered: drain them before the join
      return;
    }
  }
  one_state_loop<Consts, kParam, kHalf, false>(a, state, begin, end);
}
