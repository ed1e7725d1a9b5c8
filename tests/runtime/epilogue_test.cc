// Library epilogues (runtime/base/program.h, ints["epilogue"]; kernels/cpu/epilogue.h): the
// activations against double precision, matmul and conv2d with every epilogue against the
// unfused computation, and the errors of malformed epilogues.
//
// Tolerances. An activation: |got - ref| <= 1e-6 |ref| + 2e-7 max(1, |x|) (the absolute
// term covers gelu's cancellation near -4, which the compiler's f32 definition shares).
// matmul, both paths (kernels/cpu/gemm.h): against the same matmul without an epilogue
// followed by the bias and activation in double, with the activation's tolerance plus 1 ulp
// of the f32 sum; the blas path computes bitwise the same product (the same sgemm calls),
// the oneDNN path another rounding of it: 1e-5 of the sum of |a_ik b_kj| + 1e-6 more. conv2d: against a double-precision convolution plus
// bias and activation, 1e-5 of the sum of |terms| (bias included) + 1e-6, plus the
// activation's tolerance (oneDNN may pick another kernel once a post-op is attached).
#include <fmt/format.h>

#include <cmath>

#include "kernels/cpu/conv.h"
#include "kernels/cpu/epilogue.h"
#include "kernels/cpu/gemm.h"
#include "tests/runtime/rt_harness.h"

namespace modelc::rt::test {

namespace {

using Act = EpilogueActivation;
constexpr Act kActs[] = {Act::None, Act::Relu, Act::GeluErf, Act::GeluTanh, Act::Tanh, Act::Sigmoid};

// The compiler's definitions (compiler/ir/ops/elementwise.cc) in double.
double ref_act(Act a, double x) {
  switch (a) {
    case Act::None: return x;
    case Act::Relu: return std::isnan(x) ? x : x < 0 ? 0 : x;
    case Act::GeluErf: return 0.5 * x * (1 + std::erf(x * 0.7071067811865476));
    case Act::GeluTanh: return 0.5 * x * (1 + std::tanh(0.7978845608028654 * (x + 0.044715 * x * x * x)));
    case Act::Tanh: return std::tanh(x);
    case Act::Sigmoid: return x >= 0 ? 1 / (1 + std::exp(-x)) : std::exp(x) / (1 + std::exp(x));
  }
  return NAN;
}

double act_tol(double ref, double x) { return 1e-6 * std::abs(ref) + 2e-7 * std::max(1.0, std::abs(x)); }

// act(pre), `pre` the f32 pre-activation; the sum's rounding (half an ulp, times a slope of
// at most 1.13) joins the tolerance.
void expect_act(float got, double pre, Act a, double extra_tol, const std::string& what) {
  const double want = ref_act(a, pre);
  const double tol = act_tol(want, pre) + 1.2 * 6e-8 * std::abs(pre) + extra_tol;
  if (std::isnan(want)) {
    EXPECT_TRUE(std::isnan(got)) << what;
  } else if (std::isinf(want)) {
    EXPECT_EQ(got, want) << what;
  } else {
    EXPECT_NEAR(got, want, tol) << what << " pre-activation " << pre;
  }
}

Ints epilogue_attr(bool bias, Act a) { return {{"epilogue", {bias ? 1 : 0, static_cast<int64_t>(a)}}}; }

}  // namespace

TEST(Epilogue, ActivationsMatchTheCompilersDefinitions) {
  std::vector<float> xs;
  for (double v = -100; v <= 100; v += 1.0 / 64) xs.push_back(static_cast<float>(v));
  for (int i = 0; i < 4000; ++i) xs.push_back(static_cast<float>(std::ldexp(random_f32({1}).f32()[0], static_cast<int>(rnd(-30, 8)))));
  for (float special : {NAN, INFINITY, -INFINITY, -0.0f, 0.0f, 0.5f, -0.5f, 88.5f, -87.5f, -90.0f})
    xs.push_back(special);
  for (Act a : kActs) {
    std::vector<float> y = xs;
    kernels::apply_activation(a, y.data(), static_cast<int64_t>(y.size()));
    int bad = 0;
    for (size_t i = 0; i < xs.size(); ++i) {
      const double want = ref_act(a, xs[i]);
      const bool ok = std::isnan(want) ? std::isnan(y[i])
                      : std::isinf(want) ? y[i] == want
                                         : std::abs(y[i] - want) <= act_tol(want, xs[i]);
      if (!ok && ++bad <= 5)
        ADD_FAILURE() << epilogue_activation_name(a) << "(" << xs[i] << ") = " << y[i] << ", expected " << want;
    }
    EXPECT_EQ(bad, 0) << epilogue_activation_name(a);
  }
  // relu keeps NaN (as max(x, 0) does in the generated kernels).
  float v[5] = {NAN, -1, 2, -0.0f, 3};
  kernels::apply_activation(Act::Relu, v, 5);
  EXPECT_TRUE(std::isnan(v[0]));
  EXPECT_EQ(v[1], 0.0f);
  EXPECT_EQ(v[2], 2.0f);
}

TEST(Epilogue, MatmulWithEveryEpilogueMatchesTheUnfusedComputation) {
  ThreadPool pool(3);
  for (int rep = 0; rep < 49; ++rep) {
    // Shapes: small and pool-split products, a stack folded into one sgemm, a broadcast
    // batch, vector operands on either side.
    std::vector<int64_t> sa, sb;
    const int64_t K = rnd(1, 80);
    switch (rep % 7) {
      case 0: sa = {rnd(1, 9), K}, sb = {K, rnd(1, 9)}; break;
      case 1: sa = {rnd(150, 300), K + 60}, sb = {K + 60, rnd(20, 140)}; break;  // split by rows
      case 6: sa = {rnd(8, 40), K + 100}, sb = {K + 100, rnd(120, 300)}; break;  // split by columns
      case 2: sa = {rnd(1, 3), rnd(1, 5), K}, sb = {K, rnd(1, 20)}; break;
      case 3: sa = {rnd(2, 4), rnd(1, 5), K}, sb = {1, K, rnd(1, 7)}; break;
      case 4: sa = {K}, sb = {K, rnd(1, 30)}; break;
      default: sa = {rnd(1, 3), rnd(1, 6), K}, sb = {K}; break;
    }
    HostTensor a = random_f32(sa), b = random_f32(sb);
    // numpy's output shape; the product without an epilogue, which every epilogue's result
    // must match once the bias and activation are applied to it in double.
    std::vector<int64_t> out_shape;
    if (sb.size() == 1) {
      out_shape.assign(sa.begin(), sa.end() - 1);
    } else {
      std::vector<int64_t> ba(sa.begin(), sa.end() - (sa.size() == 1 ? 1 : 2)), bb(sb.begin(), sb.end() - 2);
      const size_t nb = std::max(ba.size(), bb.size());
      for (size_t k = 0; k < nb; ++k) {
        int64_t da = k + ba.size() >= nb ? ba[k + ba.size() - nb] : 1, db = k + bb.size() >= nb ? bb[k + bb.size() - nb] : 1;
        out_shape.push_back(std::max(da, db));
      }
      if (sa.size() >= 2) out_shape.push_back(sa[sa.size() - 2]);
      out_shape.push_back(sb.back());
    }
    HostTensor plain = filled_f32(out_shape, NAN), scale = filled_f32(out_shape, NAN);
    run_op("matmul", {&a, &b}, {&plain}, {}, {}, &pool);
    HostTensor abs_a = a, abs_b = b;  // sum |a_ik b_kj|, the scale of an element's rounding
    for (int64_t i = 0; i < abs_a.numel(); ++i) abs_a.f32()[i] = std::abs(abs_a.f32()[i]);
    for (int64_t i = 0; i < abs_b.numel(); ++i) abs_b.f32()[i] = std::abs(abs_b.f32()[i]);
    run_op("matmul", {&abs_a, &abs_b}, {&scale}, {}, {}, &pool);
    const int64_t L = out_shape.empty() ? 1 : out_shape.back();
    const std::pair<const char*, kernels::LibraryFn> paths[] = {{"blas", kernels::matmul_blas}, {"onednn", kernels::matmul_onednn}};
    for (const auto& [path, fn] : paths)
      for (Act act : kActs)
        for (bool with_bias : {false, true}) {
          if (!with_bias && act == Act::None) continue;
          // The bias as [L] or [1, L].
          HostTensor bias = random_f32(rnd(0, 1) ? std::vector<int64_t>{L} : std::vector<int64_t>{1, L});
          HostTensor out = filled_f32(out_shape, NAN);
          std::vector<HostTensor*> ins{&a, &b};
          if (with_bias) ins.push_back(&bias);
          run_op("matmul", ins, {&out}, epilogue_attr(with_bias, act), {}, &pool, fn);
          const std::string what = fmt::format("{}: {} @ {} bias {} {}", path, a.shape_str(), b.shape_str(), with_bias,
                                               epilogue_activation_name(act));
          // blas computes the very product `plain` holds; oneDNN another rounding of it.
          const bool same_product = std::string(path) == "blas";
          for (int64_t i = 0; i < out.numel(); ++i) {
            const double pre = static_cast<double>(plain.f32()[i]) + (with_bias ? bias.f32()[i % L] : 0.0);
            const double extra = same_product ? 0.0 : 1.2 * (1e-5 * scale.f32()[i] + 1e-6);
            expect_act(out.f32()[i], pre, act, extra, what + fmt::format(" element {}", i));
            if (testing::Test::HasFailure()) return;
          }
        }
  }
}

namespace {

struct ConvCase {
  int64_t N, C, H, W, O, KH, KW, groups, stride, pad, HO, WO;
  Ints attrs() const { return {{"stride", {stride, stride}}, {"padding", {pad, pad}}, {"groups", {groups}}}; }
};

ConvCase random_conv() {
  for (;;) {
    ConvCase c{};
    c.groups = rnd(1, 2);
    c.N = rnd(1, 4), c.C = c.groups * rnd(1, 3), c.O = c.groups * rnd(1, 4);
    c.H = rnd(3, 10), c.W = rnd(3, 10), c.KH = rnd(1, 3), c.KW = rnd(1, 3), c.stride = rnd(1, 2), c.pad = rnd(0, 1);
    int64_t nh = c.H + 2 * c.pad - c.KH, nw = c.W + 2 * c.pad - c.KW;
    if (nh < 0 || nw < 0) continue;
    c.HO = nh / c.stride + 1, c.WO = nw / c.stride + 1;
    return c;
  }
}

// The convolution in double, and per element the sum of |terms|.
void ref_conv(const ConvCase& c, const HostTensor& x, const HostTensor& w, std::vector<double>& y, std::vector<double>& scale) {
  const int64_t Cg = c.C / c.groups, Og = c.O / c.groups;
  y.assign(static_cast<size_t>(c.N * c.O * c.HO * c.WO), 0);
  scale = y;
  for (int64_t n = 0; n < c.N; ++n)
    for (int64_t o = 0; o < c.O; ++o)
      for (int64_t i = 0; i < c.HO; ++i)
        for (int64_t j = 0; j < c.WO; ++j) {
          double acc = 0, s = 0;
          for (int64_t ci = 0; ci < Cg; ++ci)
            for (int64_t a = 0; a < c.KH; ++a)
              for (int64_t b = 0; b < c.KW; ++b) {
                int64_t h = i * c.stride - c.pad + a, v = j * c.stride - c.pad + b;
                if (h < 0 || h >= c.H || v < 0 || v >= c.W) continue;
                double p = static_cast<double>(x.f32()[((n * c.C + (o / Og) * Cg + ci) * c.H + h) * c.W + v]) *
                           w.f32()[((o * Cg + ci) * c.KH + a) * c.KW + b];
                acc += p, s += std::abs(p);
              }
          const size_t k = static_cast<size_t>(((n * c.O + o) * c.HO + i) * c.WO + j);
          y[k] = acc, scale[k] = s;
        }
}

struct ConvBackend {
  const char* name;
  kernels::LibraryFn fn;
};
const ConvBackend kConvBackends[] = {{"im2col", kernels::conv2d_im2col}, {"onednn", kernels::conv2d_onednn}};

}  // namespace

TEST(Epilogue, Conv2dWithEveryEpilogueMatchesTheUnfusedComputation) {
  ThreadPool pool(2);
  for (int rep = 0; rep < 12; ++rep) {
    const ConvCase c = random_conv();
    HostTensor x = random_f32({c.N, c.C, c.H, c.W}), w = random_f32({c.O, c.C / c.groups, c.KH, c.KW});
    std::vector<double> ref, scale;
    ref_conv(c, x, w, ref, scale);
    const int64_t P = c.HO * c.WO;
    for (const ConvBackend& be : kConvBackends)
      for (Act act : kActs)
        for (int bias_kind = 0; bias_kind < 3; ++bias_kind) {  // none, the conv's own, an epilogue bias
          if (bias_kind == 0 && act == Act::None) continue;
          HostTensor bias = random_f32(bias_kind == 2 && rnd(0, 1) ? std::vector<int64_t>{c.O, 1, 1} : std::vector<int64_t>{c.O});
          HostTensor y = filled_f32({c.N, c.O, c.HO, c.WO}, NAN);
          std::vector<HostTensor*> ins{&x, &w};
          if (bias_kind == 1) ins.push_back(&bias);
          if (bias_kind == 2) ins.insert(ins.end(), {nullptr, &bias});
          Ints attrs = c.attrs();
          attrs["epilogue"] = {bias_kind == 2 ? 1 : 0, static_cast<int64_t>(act)};
          run_op("conv2d", ins, {&y}, attrs, {}, &pool, be.fn);
          const std::string what = fmt::format("{} x{} w{} bias kind {} {}", be.name, x.shape_str(), w.shape_str(),
                                               bias_kind, epilogue_activation_name(act));
          for (int64_t i = 0; i < y.numel(); ++i) {
            const double b = bias_kind ? bias.f32()[i / P % c.O] : 0.0;
            const size_t k = static_cast<size_t>(i);
            expect_act(y.f32()[i], ref[k] + b, act, 1.2 * (1e-5 * (scale[k] + std::abs(b)) + 1e-6), what + fmt::format(" element {}", i));
            if (testing::Test::HasFailure()) return;
          }
        }
  }
}

TEST(Epilogue, MalformedEpiloguesFailNamingTheOpAndLocation) {
  HostTensor a = random_f32({4, 3}), b = random_f32({3, 5}), bias = random_f32({5}), out = filled_f32({4, 5}, 0);
  HostTensor long_bias = random_f32({6}), matrix_bias = random_f32({5, 5}), i32_bias(ElemType::I32, {5});
  const std::string at = "matmul at test.model:1:1";
  expect_error([&] { run_op("matmul", {&a, &b}, {&out}, epilogue_attr(false, static_cast<Act>(9))); },
               {at, "unknown epilogue activation code 9"});
  expect_error([&] { run_op("matmul", {&a, &b}, {&out}, epilogue_attr(false, static_cast<Act>(-1))); },
               {at, "unknown epilogue activation code -1"});
  expect_error([&] { run_op("matmul", {&a, &b, &bias}, {&out}, {{"epilogue", {2, 1}}}); }, {at, "bias flag must be 0 or 1, got 2"});
  expect_error([&] { run_op("matmul", {&a, &b, &bias}, {&out}, {{"epilogue", {1, 1, 0}}}); }, {at, "'epilogue' must be {bias, activation}"});
  expect_error([&] { run_op("matmul", {&a, &b, &long_bias}, {&out}, epilogue_attr(true, Act::Relu)); },
               {at, "epilogue bias must be f32[5] (one value per output column), got f32[6]"});
  expect_error([&] { run_op("matmul", {&a, &b, &matrix_bias}, {&out}, epilogue_attr(true, Act::None)); },
               {at, "epilogue bias must be f32[5]", "got f32[5,5]"});
  expect_error([&] { run_op("matmul", {&a, &b, &i32_bias}, {&out}, epilogue_attr(true, Act::None)); }, {at, "got i32[5]"});
  expect_error([&] { run_op("matmul", {&a, &b}, {&out}, epilogue_attr(true, Act::Relu)); }, {at, "epilogue bias (input 2) is missing"});
  expect_error([&] { run_op("matmul", {&a, &b, &bias}, {&out}); }, {at, "expects 2 inputs, got 3"});
  expect_error([&] { run_op("matmul", {&a, &b, &bias}, {&out}, epilogue_attr(false, Act::Relu)); }, {at, "its epilogue has no bias"});

  HostTensor x = random_f32({1, 2, 4, 4}), w = random_f32({3, 2, 3, 3}), y = filled_f32({1, 3, 2, 2}, 0);
  HostTensor cb = random_f32({3}), bad_cb = random_f32({2, 1, 1});
  for (const ConvBackend& be : kConvBackends) {
    const std::string cat = "conv2d at test.model:1:1";
    expect_error([&] { run_op("conv2d", {&x, &w, &cb, &cb}, {&y}, epilogue_attr(true, Act::Relu), {}, nullptr, be.fn); },
                 {cat, "has a bias of its own (input 2) and an epilogue bias (input 3)"});
    expect_error([&] { run_op("conv2d", {&x, &w, nullptr, &bad_cb}, {&y}, epilogue_attr(true, Act::Relu), {}, nullptr, be.fn); },
                 {cat, "epilogue bias must be f32[3] (one value per output channel), got f32[2,1,1]"});
    expect_error([&] { run_op("conv2d", {&x, &w}, {&y}, epilogue_attr(false, static_cast<Act>(6)), {}, nullptr, be.fn); },
                 {cat, "unknown epilogue activation code 6"});
  }
}

}  // namespace modelc::rt::test
