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

#include "cpu_one_state_rule.h"

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

  // One vector of elements (see cpu_one_state_rule.h); the state is the momentum m.
  void update(isa::V& p, isa::V g, isa::V& m) const {
    const isa::V interp = isa::vadd(isa::vround(isa::vmul(m, beta1)), isa::vround(isa::vmul(g, one_minus_beta1)));
    if (use_decay) p = isa::vround(isa::vmul(p, decay));
    p = isa::vsub(p, isa::vmul(lr, isa::vsign(interp)));  // lr * (+-1 or 0) is exact
    m = isa::vadd(isa::vround(isa::vmul(m, beta2)), isa::vround(isa::vmul(g, one_minus_beta2)));
  }
};

template <cpu_simd::Dtype kParam, cpu_simd::HalfKind kHalf, cpu_simd::Dtype kState>
void step_range(const LionArgs& a, int64_t begin, int64_t end) {
  one_state_step_range<LionConsts, kParam, kHalf, kState>(a, a.m, begin, end);
}
