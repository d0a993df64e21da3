// simd_check: the CPU optimizer kernels (kernels/optim/includes/cpu_*_impl.h) and their storage
// conversions at every instruction set this CPU runs, against simd_check_ref.h's independent
// scalar reference, without torch, so that it also runs where no torch does: cross-compiled for
// aarch64 and run under qemu by tests/kernels/test_aarch64_cross.py, and natively there too.
//
//   g++ -O3 -std=c++17 -fopenmp -I kernels/optim/includes -I tests/kernels/csrc simd_check.cpp
//
// No -march: the levels are chosen at run time, as in the ops. Prints the best level, one line
// per level run, then `ran: <levels>` and PASS or FAIL; exits 1 on any failure.
#include <algorithm>
#include <chrono>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "cpu_simd.h"
#include "simd_check_ref.h"

// The argument structs of kernels/optim/csrc/*.cpp, with the fields the kernel bodies read (one missing
// here fails to compile). Each op's dispatch (its `pick`) lives in the op's own namespace.
namespace adam_op {
struct AdamArgs {
  void* p;
  const void* g;
  void* m;
  void* v;
  uint16_t* half;
  float l2, decay, one_minus_beta1, beta2, one_minus_beta2, bc2_sqrt, eps, step_size;
};
#define CPU_OPTIM_KERNEL "cpu_adam_impl.h"
#define CPU_OPTIM_BF16_STATE
#include "cpu_optim_dispatch.h"
#undef CPU_OPTIM_BF16_STATE
#undef CPU_OPTIM_KERNEL
}  // namespace adam_op

namespace adagrad_op {
struct AdagradArgs {
  void* p;
  const void* g;
  float* sum;
  uint16_t* half;
  float l2, eps, clr;
};
#define CPU_OPTIM_KERNEL "cpu_adagrad_impl.h"
#include "cpu_optim_dispatch.h"
#undef CPU_OPTIM_KERNEL
}  // namespace adagrad_op

namespace lion_op {
struct LionArgs {
  void* p;
  const void* g;
  float* m;
  uint16_t* half;
  float beta1, one_minus_beta1, beta2, one_minus_beta2, decay, lr;
};
#define CPU_OPTIM_KERNEL "cpu_lion_impl.h"
#include "cpu_optim_dispatch.h"
#undef CPU_OPTIM_KERNEL
}  // namespace lion_op

namespace conv_op {
struct ConvArgs {
  const void* in;
  void* out;
};
#define CPU_OPTIM_KERNEL "simd_check_conv.h"
#include "cpu_optim_dispatch.h"
#undef CPU_OPTIM_KERNEL
}  // namespace conv_op

#if defined(CPU_SIMD_SVE)
#pragma GCC push_options
#pragma GCC target("+sve")
static int64_t sve_bits() { return cpu_simd::sve::width() * 32; }
#pragma GCC pop_options
#endif

namespace {

using cpu_simd::Dtype;
using cpu_simd::HalfKind;
using cpu_simd::Level;

// ---------------------------------------------------------------- reporting

struct Checker {
  long compared = 0;
  long failures = 0;
  void fail(const char* format, ...) __attribute__((format(printf, 2, 3))) {
    if (failures++ >= 20) return;  // the first ones say enough
    va_list args;
    va_start(args, format);
    std::fputs("FAIL ", stdout);
    std::vprintf(format, args);
    std::fputc('\n', stdout);
    va_end(args);
  }
};

const char* dtype_name(Dtype d) {
  return d == Dtype::kFloat ? "fp32" : d == Dtype::kBFloat16 ? "bf16" : "fp16";
}
const char* half_name(HalfKind h) {
  return h == HalfKind::kNone ? "" : h == HalfKind::kBF16 ? "+bf16 copy" : "+fp16 copy";
}

// ---------------------------------------------------------------- tensors as the kernels see them

constexpr int64_t kGuard = 64;  // elements past the end that a kernel must leave alone

// n values stored as `dtype` (rounded by the reference), then kGuard sentinels.
struct Tensor {
  Dtype dtype;
  int64_t n;
  std::vector<float> f32;
  std::vector<uint16_t> bits16;  // bf16 or fp16
  Tensor(Dtype d, const std::vector<float>& values) : dtype(d), n(static_cast<int64_t>(values.size())) {
    if (d == Dtype::kFloat) {
      f32 = values;
      f32.resize(n + kGuard, -7.0f);
    } else {
      for (float v : values) bits16.push_back(d == Dtype::kBFloat16 ? ref::to_bf16(v) : ref::to_fp16(v));
      bits16.resize(n + kGuard, 0xDEAD);
    }
  }
  void* data() { return dtype == Dtype::kFloat ? static_cast<void*>(f32.data()) : bits16.data(); }
  double at(int64_t i) const {
    if (dtype == Dtype::kFloat) return f32[i];
    return dtype == Dtype::kBFloat16 ? ref::from_bf16(bits16[i]) : ref::from_fp16(bits16[i]);
  }
  bool guard_intact() const {
    for (int64_t i = n; i < n + kGuard; ++i) {
      if (dtype == Dtype::kFloat ? f32[i] != -7.0f : bits16[i] != 0xDEAD) return false;
    }
    return true;
  }
  std::string raw() const {  // the stored bytes, for comparing levels bit for bit
    return dtype == Dtype::kFloat ? std::string(reinterpret_cast<const char*>(f32.data()), n * sizeof(float))
                                  : std::string(reinterpret_cast<const char*>(bits16.data()), n * 2);
  }
};

// Half the spacing of `dtype`'s values, relative: what rounding a result to it may cost.
double rounding(Dtype d) { return d == Dtype::kFloat ? 0x1p-24 : d == Dtype::kBFloat16 ? 0x1p-8 : 0x1p-11; }

// |got - want| within the storage's rounding of want, plus 1e-6 of `scale` (the size of the
// terms that made it: what fp32 arithmetic may lose to double's).
void expect_close(Checker& ck, const std::string& label, const char* what, const Tensor& got, int64_t i, double want,
                  double scale) {
  ++ck.compared;
  const double tol = 1.01 * rounding(got.dtype) * std::fabs(want) + 1e-6 * scale + 0x1p-25;
  if (!(std::fabs(got.at(i) - want) <= tol)) {
    ck.fail("%s %s: element %lld is %.9g, expected %.9g (tolerance %.3g)", label.c_str(), what,
            static_cast<long long>(i), got.at(i), want, tol);
  }
}

void expect_guard(Checker& ck, const std::string& label, const Tensor& t, const char* what) {
  ++ck.compared;
  if (!t.guard_intact()) ck.fail("%s: wrote %s past its end", label.c_str(), what);
}

// The half copy is params.to(half dtype): exactly the reference rounding of the stored params.
void expect_half_copy(Checker& ck, const std::string& label, HalfKind kind, const Tensor& p, const uint16_t* half) {
  if (kind == HalfKind::kNone) return;
  for (int64_t i = 0; i < p.n; ++i) {
    ++ck.compared;
    const uint16_t want = kind == HalfKind::kBF16 ? ref::to_bf16(p.f32[i]) : ref::to_fp16(p.f32[i]);
    if (half[i] != want) {
      ck.fail("%s: half copy element %lld is 0x%04x, expected 0x%04x", label.c_str(), static_cast<long long>(i),
              half[i], want);
    }
  }
  ++ck.compared;
  if (half[p.n] != 0xBEEF) ck.fail("%s: wrote the half copy past its end", label.c_str());
}

// The half copy's buffer: 64-byte aligned (so x86's streaming stores run), or one element
// off (so they do not).
struct HalfBuffer {
  std::vector<uint16_t> storage;
  uint16_t* data = nullptr;
  HalfBuffer(HalfKind kind, int64_t n, bool misalign) : storage(n + 64, 0xBEEF) {
    if (kind == HalfKind::kNone) return;
    const auto address = reinterpret_cast<uintptr_t>(storage.data());
    data = storage.data() + ((64 - address % 64) % 64) / 2 + (misalign ? 1 : 0);
  }
};

// ---------------------------------------------------------------- inputs

std::vector<float> uniform(std::mt19937& rng, int64_t n, float lo, float hi) {
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> v(n);
  for (auto& x : v) x = dist(rng);
  return v;
}

// The variants each op's dispatch offers: fp32 params with no copy, a bf16 or an fp16 copy;
// bf16 and fp16 params.
struct Variant {
  Dtype param;
  HalfKind half;
};
constexpr Variant kVariants[] = {{Dtype::kFloat, HalfKind::kNone},
                                 {Dtype::kFloat, HalfKind::kBF16},
                                 {Dtype::kFloat, HalfKind::kFP16},
                                 {Dtype::kBFloat16, HalfKind::kNone},
                                 {Dtype::kHalf, HalfKind::kNone}};
// Sizes around the vector widths (1 to 64 lanes), and one large enough for two threads
// (cpu_simd::kMinPerThread each), run with two.
constexpr int64_t kThreadedSize = 2 * cpu_simd::kMinPerThread + 37;
constexpr int64_t kSizes[] = {1, 7, 33, 1000, kThreadedSize};

// What threads add (ranges that start mid-tensor) is the same for every variant, and the
// large size is slow under emulation: it runs for fp32 params and state, no copy, only.
bool runs(int64_t n, Variant v, Dtype state = Dtype::kFloat) {
  return n != kThreadedSize || (v.param == Dtype::kFloat && v.half == HalfKind::kNone && state == Dtype::kFloat);
}

// One kernel over [0, n): through parallel_for as the bindings run it, on two threads for the
// large size.
template <class Args>
void run(void (*fn)(const Args&, int64_t, int64_t), const Args& args, int64_t n) {
  cpu_simd::parallel_for(n, n == kThreadedSize ? 2 : 1, [&](int64_t begin, int64_t end) { fn(args, begin, end); });
}

// Results by case (op, variant, size: no level), per level, to compare levels bit for bit.
using Results = std::map<std::string, std::string>;

std::string case_key(const char* op, Variant v, Dtype state, int64_t n) {
  char buf[160];
  std::snprintf(buf, sizeof(buf), "%s %s%s%s n=%lld", op, dtype_name(v.param), half_name(v.half),
                state == Dtype::kBFloat16 ? " bf16-state" : "", static_cast<long long>(n));
  return buf;
}

std::string case_label(const std::string& key, Level level) {
  return key + " [" + cpu_simd::level_name(level) + "]";
}

// ---------------------------------------------------------------- Adam / AdamW

void check_adam(Checker& ck, Level level, Results& results) {
  for (const bool adamw : {false, true}) {
    const ref::Adam hyper{1e-3, 0.9, 0.999, 1e-8, 0.01, 5, adamw};
    for (const Dtype state : {Dtype::kFloat, Dtype::kBFloat16}) {
      for (const Variant variant : kVariants) {
        for (const int64_t n : kSizes) {
          if (!runs(n, variant, state)) continue;
          std::mt19937 rng(static_cast<unsigned>(n * 7 + static_cast<int>(variant.param) * 3 + adamw));
          Tensor p(variant.param, uniform(rng, n, -1.0f, 1.0f)), g(variant.param, uniform(rng, n, -1.0f, 1.0f));
          Tensor m(state, uniform(rng, n, -0.1f, 0.1f)), v(state, uniform(rng, n, 0.0f, 0.01f));
          const Tensor p0 = p, g0 = g, m0 = m, v0 = v;
          HalfBuffer half(variant.half, n, n == 33);

          // The scalars as cpu_adam.cpp derives them.
          adam_op::AdamArgs a{};
          a.p = p.data();
          a.g = g.data();
          a.m = m.data();
          a.v = v.data();
          a.half = half.data;
          a.l2 = adamw ? 0.0f : static_cast<float>(hyper.weight_decay);
          a.decay = adamw ? static_cast<float>(1.0 - hyper.lr * hyper.weight_decay) : 1.0f;
          a.one_minus_beta1 = static_cast<float>(1.0 - hyper.beta1);
          a.beta2 = static_cast<float>(hyper.beta2);
          a.one_minus_beta2 = static_cast<float>(1.0 - hyper.beta2);
          a.bc2_sqrt = static_cast<float>(std::sqrt(1.0 - std::pow(hyper.beta2, hyper.step)));
          a.eps = static_cast<float>(hyper.eps);
          a.step_size = static_cast<float>(hyper.lr / (1.0 - std::pow(hyper.beta1, hyper.step)));
          run(adam_op::pick(level, variant.param, variant.half, state), a, n);

          const std::string key = case_key(adamw ? "adamw" : "adam", variant, state, n);
          const std::string label = case_label(key, level);
          for (int64_t i = 0; i < n; ++i) {
            double pr = p0.at(i), mr = m0.at(i), vr = v0.at(i);
            hyper.apply(pr, g0.at(i), mr, vr);
            const double g_scale = std::fabs(g0.at(i)) + hyper.weight_decay;
            expect_close(ck, label, "param", p, i, pr, std::fabs(p0.at(i)) + std::fabs(pr - p0.at(i)));
            expect_close(ck, label, "exp_avg", m, i, mr, std::fabs(m0.at(i)) + g_scale);
            expect_close(ck, label, "exp_avg_sq", v, i, vr, vr);
          }
          expect_guard(ck, label, p, "params");
          expect_guard(ck, label, m, "exp_avg");
          expect_guard(ck, label, v, "exp_avg_sq");
          expect_half_copy(ck, label, variant.half, p, half.data);
          results[key] = p.raw() + m.raw() + v.raw();
        }
      }
    }
  }
}

// ---------------------------------------------------------------- Adagrad

void check_adagrad(Checker& ck, Level level, Results& results) {
  const ref::Adagrad hyper{1e-2, 0.01, 1e-10, 0.01, 3};
  for (const Variant variant : kVariants) {
    for (const int64_t n : kSizes) {
      if (!runs(n, variant)) continue;
      std::mt19937 rng(static_cast<unsigned>(n * 5 + static_cast<int>(variant.param)));
      Tensor p(variant.param, uniform(rng, n, -1.0f, 1.0f)), g(variant.param, uniform(rng, n, -1.0f, 1.0f));
      Tensor sum(Dtype::kFloat, uniform(rng, n, 0.0f, 0.5f));
      const Tensor p0 = p, g0 = g, sum0 = sum;
      HalfBuffer half(variant.half, n, n == 33);

      adagrad_op::AdagradArgs a{};  // as cpu_adagrad.cpp derives them
      a.p = p.data();
      a.g = g.data();
      a.sum = sum.f32.data();
      a.half = half.data;
      a.l2 = static_cast<float>(hyper.weight_decay);
      a.eps = static_cast<float>(hyper.eps);
      a.clr = static_cast<float>(hyper.lr / (1.0 + static_cast<double>(hyper.step - 1) * hyper.lr_decay));
      run(adagrad_op::pick(level, variant.param, variant.half), a, n);

      const std::string key = case_key("adagrad", variant, Dtype::kFloat, n);
      const std::string label = case_label(key, level);
      for (int64_t i = 0; i < n; ++i) {
        double pr = p0.at(i), sr = sum0.at(i);
        hyper.apply(pr, g0.at(i), sr);
        expect_close(ck, label, "param", p, i, pr, std::fabs(p0.at(i)) + std::fabs(pr - p0.at(i)));
        expect_close(ck, label, "sum", sum, i, sr, sr);
      }
      expect_guard(ck, label, p, "params");
      expect_guard(ck, label, sum, "state_sum");
      expect_half_copy(ck, label, variant.half, p, half.data);
      results[key] = p.raw() + sum.raw();
    }
  }
}

// ---------------------------------------------------------------- Lion

void check_lion(Checker& ck, Level level, Results& results) {
  const ref::Lion hyper{1e-4, 0.9, 0.99, 0.1};
  for (const Variant variant : kVariants) {
    for (const int64_t n : kSizes) {
      if (!runs(n, variant)) continue;
      std::mt19937 rng(static_cast<unsigned>(n * 3 + static_cast<int>(variant.param)));
      std::vector<float> grads = uniform(rng, n, -1.0f, 1.0f), moments = uniform(rng, n, -0.1f, 0.1f);
      for (int64_t i = 5; i < n; i += 11) grads[i] = moments[i] = 0.0f;  // sign(0) = 0: no step but the decay
      Tensor p(variant.param, uniform(rng, n, -1.0f, 1.0f)), g(variant.param, grads), m(Dtype::kFloat, moments);
      const Tensor p0 = p, g0 = g, m0 = m;
      HalfBuffer half(variant.half, n, n == 33);

      lion_op::LionArgs a{};  // as cpu_lion.cpp derives them
      a.p = p.data();
      a.g = g.data();
      a.m = m.f32.data();
      a.half = half.data;
      a.beta1 = static_cast<float>(hyper.beta1);
      a.one_minus_beta1 = static_cast<float>(1.0 - hyper.beta1);
      a.beta2 = static_cast<float>(hyper.beta2);
      a.one_minus_beta2 = static_cast<float>(1.0 - hyper.beta2);
      a.decay = static_cast<float>(1.0 - hyper.lr * hyper.weight_decay);
      a.lr = static_cast<float>(hyper.lr);
      run(lion_op::pick(level, variant.param, variant.half), a, n);

      const std::string key = case_key("lion", variant, Dtype::kFloat, n);
      const std::string label = case_label(key, level);
      for (int64_t i = 0; i < n; ++i) {
        double pr = p0.at(i), mr = 0.0;
        hyper.apply(pr, static_cast<float>(g0.at(i)), m0.f32[i], mr);
        expect_close(ck, label, "param", p, i, pr, std::fabs(p0.at(i)) + hyper.lr);
        expect_close(ck, label, "exp_avg", m, i, mr, std::fabs(m0.at(i)) + std::fabs(g0.at(i)));
      }
      expect_guard(ck, label, p, "params");
      expect_guard(ck, label, m, "exp_avg");
      expect_half_copy(ck, label, variant.half, p, half.data);
      results[key] = p.raw() + m.raw();
    }
  }
}

// ---------------------------------------------------------------- conversions

// Narrowing: special values, exact ties of both formats (where rounding to even decides),
// fp16's subnormal range and overflow edge, and random bit patterns.
std::vector<float> narrowing_inputs() {
  const float inf = std::numeric_limits<float>::infinity(), nan = std::numeric_limits<float>::quiet_NaN();
  std::vector<float> x = {0.0f,      -0.0f,        1.0f,          -1.0f,        65504.0f,    65519.99f, 65520.0f,
                          -65520.0f, 65536.0f,     0x1p-24f,      0x1p-25f,     0x3p-26f,    0x1p-14f,  0x1.ffcp-15f,
                          0x1p-26f,  inf,          -inf,          nan,          -nan,        3.0e38f,   1e-40f,
                          -1e-45f,   0x1.008p0f,   0x1.018p0f,    0x1.00ffp0f,  0x1.0101p0f, 0.1f,      -2.5f};
  std::mt19937 rng(2024);
  for (int i = 0; i < 4096; ++i) {
    const uint32_t upper = rng() & 0xFFFF0000u, mantissa = rng() % 1024, exponent = rng() % 30;
    x.push_back(ref::from_bits(upper | 0x8000u));                                  // bf16 ties
    x.push_back(std::ldexp(mantissa + 0.5f, -24));                                  // fp16 subnormal ties
    x.push_back(std::ldexp(1024 + mantissa + 0.5f, static_cast<int>(exponent) - 25));  // fp16 ties, any binade
  }
  for (int i = 0; i < 40000; ++i) x.push_back(ref::from_bits(static_cast<uint32_t>(rng())));
  return x;
}

void check_conversions(Checker& ck, Level level) {
  const char* name = cpu_simd::level_name(level);
  const std::vector<float> x = narrowing_inputs();
  const int64_t n = static_cast<int64_t>(x.size());
  std::vector<uint16_t> bf(n), fp(n);
  std::vector<float> copy(n);
  conv_op::ConvArgs a{x.data(), bf.data()};
  conv_op::pick(level, Dtype::kFloat, HalfKind::kBF16)(a, 0, n);
  a.out = fp.data();
  conv_op::pick(level, Dtype::kFloat, HalfKind::kFP16)(a, 0, n);
  a.out = copy.data();
  conv_op::pick(level, Dtype::kFloat, HalfKind::kNone)(a, 0, n);
  for (int64_t i = 0; i < n; ++i) {
    ck.compared += 3;
    const uint16_t want_bf = ref::to_bf16(x[i]), want_fp = ref::to_fp16(x[i]);
    if (bf[i] != want_bf) ck.fail("%s: bf16(%a) = 0x%04x, expected 0x%04x", name, x[i], bf[i], want_bf);
    // NaN payloads differ between converters (scalar: 0x7E00, F16C / FCVT: truncated payload),
    // as in torch itself: only NaN-ness and sign are compared.
    const bool nan_alike = (fp[i] & 0x7C00) == 0x7C00 && (fp[i] & 0x3FF) && (fp[i] >> 15) == (want_fp >> 15);
    const bool same = std::isnan(x[i]) ? nan_alike : fp[i] == want_fp;
    if (!same) ck.fail("%s: fp16(%a) = 0x%04x, expected 0x%04x", name, x[i], fp[i], want_fp);
    if (ref::bits(copy[i]) != ref::bits(x[i])) ck.fail("%s: fp32 copy of %a is %a", name, x[i], copy[i]);
  }
  // Widening: every bf16 and fp16 value, exactly (NaNs included).
  std::vector<uint16_t> all(65536);
  for (int i = 0; i < 65536; ++i) all[i] = static_cast<uint16_t>(i);
  std::vector<float> from_bf(65536), from_fp(65536);
  conv_op::ConvArgs w{all.data(), from_bf.data()};
  conv_op::pick(level, Dtype::kBFloat16, HalfKind::kNone)(w, 0, 65536);
  w.out = from_fp.data();
  conv_op::pick(level, Dtype::kHalf, HalfKind::kNone)(w, 0, 65536);
  for (int i = 0; i < 65536; ++i) {
    ck.compared += 2;
    const uint32_t got_bf = ref::bits(from_bf[i]), want_bf = ref::bits(ref::from_bf16(all[i]));
    const uint32_t got_fp = ref::bits(from_fp[i]), want_fp = ref::bits(ref::from_fp16(all[i]));
    if (got_bf != want_bf) ck.fail("%s: bf16 0x%04x -> 0x%08x, expected 0x%08x", name, i, got_bf, want_bf);
    if (got_fp != want_fp) ck.fail("%s: fp16 0x%04x -> 0x%08x, expected 0x%08x", name, i, got_fp, want_fp);
  }
}

// The vector levels compute the same operations in the same order with fused multiply-adds, so
// they store the same bits; Lion rounds every step explicitly, so its scalar path does too. (The
// scalar Adam and Adagrad may fuse differently: compared with the reference only.)
void expect_same_bits(Checker& ck, const char* prefix, const Results& base, const Results& other, Level a, Level b) {
  for (const auto& [key, bytes] : base) {
    if (key.rfind(prefix, 0) != 0) continue;
    ++ck.compared;
    const auto it = other.find(key);
    if (it == other.end() || it->second != bytes) {
      ck.fail("%s: %s and %s store different bits", key.c_str(), cpu_simd::level_name(a), cpu_simd::level_name(b));
    }
  }
}

}  // namespace

int main() {
  const Level best = cpu_simd::supported_level();
  std::printf("simd_check: best level %s", cpu_simd::level_name(best));
#if defined(CPU_SIMD_SVE)
  if (best == Level::kSve) std::printf(" (%lld-bit vectors)", static_cast<long long>(sve_bits()));
#endif
  std::printf("\n");
  Checker ck;
  std::string ran;
  std::vector<Results> results;
  for (int l = 0; l <= static_cast<int>(best); ++l) {
    // As the bindings do: force the level, then dispatch on the active one.
    cpu_simd::forced_level().store(l);
    const Level level = cpu_simd::active_level();
    const long failures = ck.failures;
    const auto start = std::chrono::steady_clock::now();
    Results r;
    check_conversions(ck, level);
    check_adam(ck, level, r);
    check_adagrad(ck, level, r);
    check_lion(ck, level, r);
    const std::chrono::duration<double> seconds = std::chrono::steady_clock::now() - start;
    std::printf("level %s: %s (%.2f s)\n", cpu_simd::level_name(level), ck.failures == failures ? "ok" : "FAILED",
                seconds.count());
    ran += (ran.empty() ? "" : " ") + std::string(cpu_simd::level_name(level));
    results.push_back(std::move(r));
  }
  for (size_t l = 2; l < results.size(); ++l) {
    expect_same_bits(ck, "", results[1], results[l], Level(1), Level(l));
  }
  for (size_t l = 1; l < results.size(); ++l) {
    expect_same_bits(ck, "lion ", results[0], results[l], Level(0), Level(l));
  }
  std::printf("ran: %s\n", ran.c_str());
  if (ck.failures) {
    std::printf("FAIL: %ld of %ld comparisons\n", ck.failures, ck.compared);
    return 1;
  }
  std::printf("PASS: %ld comparisons\n", ck.compared);
  return 0;
}
