// The Adagrad kernel body, included by cpu_adagrad.cpp once per instruction set inside a
// namespace where `isa` names that set's primitives (see cpu_adam_impl.h). No include guard.
//
// Per element, as torch.optim.Adagrad (single-tensor implementation):
//   g   = g + wd * p
//   sum = sum + g * g
//   p   = p - clr * g / (sqrt(sum) + eps)     clr = lr / (1 + (step - 1) * lr_decay)

struct AdagradConsts {
  isa::V l2, eps, neg_clr;
  bool use_l2;
  explicit AdagradConsts(const AdagradArgs& a)
      : l2(isa::vset1(a.l2)), eps(isa::vset1(a.eps)), neg_clr(isa::vset1(-a.clr)), use_l2(a.l2 != 0.0f) {}
};

template <cpu_simd::HalfKind kHalf>
inline void adagrad_vector(const AdagradConsts& c, float* pp, const float* gp, float* sp, uint16_t* hp) {
  isa::V p = isa::vload(pp);
  isa::V g = isa::vload(gp);
  if (c.use_l2) g = isa::vfmadd(c.l2, p, g);
  const isa::V sum = isa::vfmadd(g, g, isa::vload(sp));
  const isa::V std = isa::vadd(isa::vsqrt(sum), c.eps);
  p = isa::vfmadd(c.neg_clr, isa::vdiv(g, std), p);
  isa::vstore(pp, p);
  isa::vstore(sp, sum);
  if constexpr (kHalf == cpu_simd::HalfKind::kBF16) isa::vstore_bf16(hp, p);
  if constexpr (kHalf == cpu_simd::HalfKind::kFP16) isa::vstore_fp16(hp, p);
}

template <cpu_simd::HalfKind kHalf>
void adagrad_range(const AdagradArgs& a, int64_t begin, int64_t end) {
  constexpr int64_t W = isa::kWidth;
  const AdagradConsts c(a);
  int64_t i = begin;
  for (; i + W <= end; i += W) {
    adagrad_vector<kHalf>(c, a.p + i, a.g + i, a.sum + i, kHalf == cpu_simd::HalfKind::kNone ? nullptr : a.half + i);
  }
  if (i < end) {  // the tail through the same vector code, on zero-padded copies
    const int64_t r = end - i;
    float p[W] = {}, g[W] = {}, s[W] = {};
    uint16_t h[W] = {};
    std::memcpy(p, a.p + i, r * sizeof(float));
    std::memcpy(g, a.g + i, r * sizeof(float));
    std::memcpy(s, a.sum + i, r * sizeof(float));
    adagrad_vector<kHalf>(c, p, g, s, h);
    std::memcpy(a.p + i, p, r * sizeof(float));
    std::memcpy(a.sum + i, s, r * sizeof(float));
    if (kHalf != cpu_simd::HalfKind::kNone) std::memcpy(a.half + i, h, r * sizeof(uint16_t));
  }
}
