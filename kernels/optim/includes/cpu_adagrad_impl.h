// The Adagrad kernel body, included through cpu_optim_dispatch.h by cpu_adagrad.cpp once per
// instruction set inside a namespace where `isa` names that set's primitives (see
// cpu_adam_impl.h). No include guard.
//
// Per element, as torch.optim.Adagrad (single-tensor implementation):
//   g   = g + wd * p
//   sum = sum + g * g
//   p   = p - clr * g / (sqrt(sum) + eps)     clr = lr / (1 + (step - 1) * lr_decay)

#include "cpu_one_state_rule.h"

struct AdagradConsts {
  // Loop invariants, as the isa:: arithmetic takes them (isa::C: a vector; a float on SVE).
  isa::C l2, eps, neg_clr;
  bool use_l2;
  explicit AdagradConsts(const AdagradArgs& a)
      : l2(isa::vconst(a.l2)), eps(isa::vconst(a.eps)), neg_clr(isa::vconst(-a.clr)), use_l2(a.l2 != 0.0f) {}

  // One vector of elements (see cpu_one_state_rule.h); the state is the sum.
  void update(isa::V& p, isa::V g, isa::V& sum) const {
    if (use_l2) g = isa::vfmadd(l2, p, g);
    sum = isa::vfmadd(g, g, sum);
    const isa::V std = isa::vadd(isa::vsqrt(sum), eps);
    p = isa::vfmadd(neg_clr, isa::vdiv(g, std), p);
  }
};

template <cpu_simd::Dtype kParam, cpu_simd::HalfKind kHalf, cpu_simd::Dtype kState>
void step_range(const AdagradArgs& a, int64_t begin, int64_t end) {
  one_state_step_range<AdagradConsts, kParam, kHalf, kState>(a, a.sum, begin, end);
}
