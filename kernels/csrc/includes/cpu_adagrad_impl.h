// The Adagrad kernel body, included through cpu_optim_dispatch.h by cpu_adagrad.cpp once per
// instruction set inside a namespace where `isa` names that set's primitives (see
// cpu_adam_impl.h). No include guard.
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

template <cpu_simd::HalfKind kHalf, bool kStream>
inline void adagrad_vector(const AdagradConsts& c, float* pp, const float* gp, float* sp, uint16_t* hp) {
  isa::V p = isa::vload(pp);
  isa::V g = isa::vload(gp);
  if (c.use_l2) g = isa::vfmadd(c.l2, p, g);
  const isa::V sum = isa::vfmadd(g, g, isa::vload(sp));
  const isa::V std = isa::vadd(isa::vsqrt(sum), c.eps);
  p = isa::vfmadd(c.neg_clr, isa::vdiv(g, std), p);
  isa::vstore(pp, p);
  isa::vstore(sp, sum);
  isa::store_half<kHalf, kStream>(hp, p);
}

template <cpu_simd::HalfKind kHalf, bool kStream>
void adagrad_loop(const AdagradArgs& a, int64_t begin, int64_t end) {
  constexpr int64_t W = isa::kWidth;
  const AdagradConsts c(a);
  float* const pp = a.p;  // locals: stores through them cannot force reloads
  const float* const gp = a.g;
  float* const sp = a.sum;
  uint16_t* const hp = a.half;
  int64_t i = begin;
  for (; i + W <= end; i += W) {
    adagrad_vector<kHalf, kStream>(c, pp + i, gp + i, sp + i, hp == nullptr ? nullptr : hp + i);
  }
  if (i < end) {  // the tail through the same vector code, on zero-padded copies
    const int64_t r = end - i;
    float p[W] = {}, g[W] = {}, s[W] = {};
    uint16_t h[W] = {};
    std::memcpy(p, pp + i, r * sizeof(float));
    std::memcpy(g, gp + i, r * sizeof(float));
    std::memcpy(s, sp + i, r * sizeof(float));
    adagrad_vector<kHalf, false>(c, p, g, s, h);
    std::memcpy(pp + i, p, r * sizeof(float));
    std::memcpy(sp + i, s, r * sizeof(float));
    if (hp != nullptr) std::memcpy(hp + i, h, r * sizeof(uint16_t));
  }
}

template <cpu_simd::HalfKind kHalf>
void step_range(const AdagradArgs& a, int64_t begin, int64_t end) {
  if constexpr (kHalf != cpu_simd::HalfKind::kNone) {
    if (isa::hstreamable(a.half + begin)) {
      adagrad_loop<kHalf, true>(a, begin, end);
      isa::vfence();  // streamed stores are weakly ordered: drain them before the join
      return;
    }
  }
  adagrad_loop<kHalf, false>(a, begin, end);
}
