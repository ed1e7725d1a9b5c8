// conv2d, conv2d_grad_input and conv2d_grad_weight against double-precision loops, through
// both backends (im2col + sgemm and oneDNN), on random shapes, strides, paddings,
// dilations and groups; the two backends agree; every error. Tolerance: 1e-5 of the sum
// of |terms| of an element, plus 1e-6.
#include <fmt/format.h>

#include "kernels/cpu/conv.h"
#include "tests/runtime/rt_harness.h"

namespace modelc::rt::test {

namespace {

struct Case {
  int64_t N, C, H, W, O, KH, KW, groups, sh, sw, ph, pw, dh, dw, HO, WO;
  Ints attrs() const {
    return {{"stride", {sh, sw}}, {"padding", {ph, pw}}, {"dilation", {dh, dw}}, {"groups", {groups}}};
  }
};

Case random_case() {
  for (;;) {
    Case c{};
    c.groups = rnd(1, 3);
    c.N = rnd(1, 3), c.C = c.groups * rnd(1, 3), c.O = c.groups * rnd(1, 3);
    c.H = rnd(1, 9), c.W = rnd(1, 9), c.KH = rnd(1, 4), c.KW = rnd(1, 4);
    c.sh = rnd(1, 3), c.sw = rnd(1, 3), c.ph = rnd(0, 2), c.pw = rnd(0, 2), c.dh = rnd(1, 2), c.dw = rnd(1, 2);
    int64_t nh = c.H + 2 * c.ph - c.dh * (c.KH - 1) - 1, nw = c.W + 2 * c.pw - c.dw * (c.KW - 1) - 1;
    if (nh < 0 || nw < 0) continue;
    c.HO = nh / c.sh + 1, c.WO = nw / c.sw + 1;
    return c;
  }
}

// Calls f(n, o, i, j, x_index, w_index) for every product of the convolution.
template <class F>
void each_term(const Case& c, F f) {
  int64_t Cg = c.C / c.groups, Og = c.O / c.groups;
  for (int64_t n = 0; n < c.N; ++n)
    for (int64_t o = 0; o < c.O; ++o)
      for (int64_t i = 0; i < c.HO; ++i)
        for (int64_t j = 0; j < c.WO; ++j)
          for (int64_t ci = 0; ci < Cg; ++ci)
            for (int64_t a = 0; a < c.KH; ++a)
              for (int64_t b = 0; b < c.KW; ++b) {
                int64_t h = i * c.sh - c.ph + a * c.dh, v = j * c.sw - c.pw + b * c.dw;
                if (h < 0 || h >= c.H || v < 0 || v >= c.W) continue;
                int64_t cin = (o / Og) * Cg + ci;
                f(((n * c.O + o) * c.HO + i) * c.WO + j, ((n * c.C + cin) * c.H + h) * c.W + v,
                  ((o * Cg + ci) * c.KH + a) * c.KW + b);
              }
}

struct Backend {
  const char* name;
  kernels::LibraryFn fwd, gin, gw;
};

const Backend kBackends[] = {
    {"im2col", kernels::conv2d_im2col, kernels::conv2d_grad_input_im2col, kernels::conv2d_grad_weight_im2col},
    {"onednn", kernels::conv2d_onednn, kernels::conv2d_grad_input_onednn, kernels::conv2d_grad_weight_onednn},
};

std::string describe(const Case& c) {
  return fmt::format("x[{},{},{},{}] w[{},{},{},{}] groups {} stride {}x{} pad {}x{} dil {}x{}", c.N, c.C, c.H, c.W, c.O,
                     c.C / c.groups, c.KH, c.KW, c.groups, c.sh, c.sw, c.ph, c.pw, c.dh, c.dw);
}

void check_case(const Case& c, const Backend& be) {
  std::string what = std::string(be.name) + " " + describe(c);
  HostTensor x = random_f32({c.N, c.C, c.H, c.W}), w = random_f32({c.O, c.C / c.groups, c.KH, c.KW});
  HostTensor bias = random_f32({c.O}), gy = random_f32({c.N, c.O, c.HO, c.WO});
  bool with_bias = rnd(0, 1);
  Ints attrs = c.attrs();
  // forward
  std::vector<double> y(static_cast<size_t>(gy.numel()), 0), ys(y.size(), 0);
  each_term(c, [&](int64_t yi, int64_t xi, int64_t wi) {
    double p = static_cast<double>(x.f32()[xi]) * w.f32()[wi];
    y[static_cast<size_t>(yi)] += p, ys[static_cast<size_t>(yi)] += std::abs(p);
  });
  if (with_bias)
    for (size_t i = 0; i < y.size(); ++i) {
      double b = bias.f32()[(static_cast<int64_t>(i) / (c.HO * c.WO)) % c.O];
      y[i] += b, ys[i] += std::abs(b);
    }
  HostTensor out = filled_f32(gy.shape, NAN);
  run_op("conv2d", {&x, &w, with_bias ? &bias : nullptr}, {&out}, attrs, {}, nullptr, be.fwd);
  expect_close(out, y, 1e-5, 1e-6, &ys, "conv2d " + what);
  // gradients
  std::vector<double> dx(static_cast<size_t>(x.numel()), 0), dxs(dx.size(), 0);
  std::vector<double> dw(static_cast<size_t>(w.numel()), 0), dws(dw.size(), 0);
  each_term(c, [&](int64_t yi, int64_t xi, int64_t wi) {
    double g = gy.f32()[yi];
    dx[static_cast<size_t>(xi)] += g * w.f32()[wi], dxs[static_cast<size_t>(xi)] += std::abs(g * w.f32()[wi]);
    dw[static_cast<size_t>(wi)] += g * x.f32()[xi], dws[static_cast<size_t>(wi)] += std::abs(g * x.f32()[xi]);
  });
  HostTensor gx = filled_f32(x.shape, NAN), gwt = filled_f32(w.shape, NAN);
  Ints ga = attrs, gwa = attrs;
  ga["input_shape"] = x.shape;
  gwa["weight_shape"] = w.shape;
  run_op("conv2d_grad_input", {&gy, &w}, {&gx}, ga, {}, nullptr, be.gin);
  expect_close(gx, dx, 1e-5, 1e-6, &dxs, "conv2d_grad_input " + what);
  run_op("conv2d_grad_weight", {&x, &gy}, {&gwt}, gwa, {}, nullptr, be.gw);
  expect_close(gwt, dw, 1e-5, 1e-6, &dws, "conv2d_grad_weight " + what);
}

}  // namespace

TEST(Conv2d, RandomCasesBothBackends) {
  for (int rep = 0; rep < 40; ++rep) {
    Case c = random_case();
    for (const Backend& be : kBackends) check_case(c, be);
  }
}

// Two f32 convolutions agree within rounding: each output is a sum of C*kh*kw products, so
// the tolerance is relative to the sum of the products' magnitudes (the same convolution of
// |x|, |w| and |b|), not to the result, which may cancel.
void expect_backends_agree(const HostTensor& got, const HostTensor& want, const std::vector<HostTensor*>& in,
                           const Ints& attrs, const std::string& what) {
  std::vector<HostTensor> abs_in;
  for (const HostTensor* t : in) {
    HostTensor a = *t;
    for (int64_t i = 0; i < a.numel(); ++i) a.f32()[i] = std::abs(a.f32()[i]);
    abs_in.push_back(std::move(a));
  }
  std::vector<HostTensor*> ptrs;
  for (HostTensor& a : abs_in) ptrs.push_back(&a);
  HostTensor mag = want;
  run_op("conv2d", ptrs, {&mag}, attrs, {}, nullptr, kernels::conv2d_im2col);
  std::vector<double> ref(want.f32(), want.f32() + want.numel()), scale(mag.f32(), mag.f32() + mag.numel());
  expect_close(got, ref, 1e-6, 1e-6, &scale, what);
}

TEST(Conv2d, FashionCnnShapesBackendsAgree) {
  // The second conv of fashion_cnn at batch 1: 32 -> 64 channels, 14x14, 3x3 pad 1.
  Case c{1, 32, 14, 14, 64, 3, 3, 1, 1, 1, 1, 1, 1, 1, 14, 14};
  for (const Backend& be : kBackends) check_case(c, be);
  HostTensor x = random_f32({c.N, c.C, c.H, c.W}), w = random_f32({c.O, c.C, 3, 3}), b = random_f32({c.O});
  HostTensor y1(ElemType::F32, {c.N, c.O, 14, 14}), y2 = y1;
  run_op("conv2d", {&x, &w, &b}, {&y1}, c.attrs(), {}, nullptr, kernels::conv2d_im2col);
  run_op("conv2d", {&x, &w, &b}, {&y2}, c.attrs(), {}, nullptr, kernels::conv2d_onednn);
  expect_backends_agree(y2, y1, {&x, &w, &b}, c.attrs(), "oneDNN vs im2col");
}

TEST(Conv2d, OneDnnWeightGradientIsTheSameForAnyThreadCount) {
  Case c{9, 6, 7, 7, 8, 3, 3, 2, 1, 1, 1, 1, 1, 1, 7, 7};
  HostTensor x = random_f32({c.N, c.C, c.H, c.W}), gy = random_f32({c.N, c.O, c.HO, c.WO});
  std::vector<uint8_t> first;
  for (int threads : {1, 2, 3, 5}) {
    ThreadPool pool(threads);
    HostTensor dw = filled_f32({c.O, c.C / c.groups, 3, 3}, NAN);
    run_op("conv2d_grad_weight", {&x, &gy}, {&dw}, c.attrs(), {}, &pool, kernels::conv2d_grad_weight_onednn);
    if (first.empty()) first = dw.bytes;
    EXPECT_EQ(dw.bytes, first) << "threads " << threads;
  }
}

TEST(Conv2d, TableDispatchAndBackendSwitch) {
  kernels::ConvBackend before = kernels::conv_backend();
  Case c = random_case();
  HostTensor x = random_f32({c.N, c.C, c.H, c.W}), w = random_f32({c.O, c.C / c.groups, c.KH, c.KW});
  HostTensor y1(ElemType::F32, {c.N, c.O, c.HO, c.WO}), y2 = y1;
  kernels::set_conv_backend(kernels::ConvBackend::Im2col);
  run_op("conv2d", {&x, &w}, {&y1}, c.attrs());
  if (kernels::onednn_available()) kernels::set_conv_backend(kernels::ConvBackend::OneDnn);
  run_op("conv2d", {&x, &w}, {&y2}, c.attrs());
  kernels::set_conv_backend(before);
  expect_backends_agree(y2, y1, {&x, &w}, c.attrs(), describe(c));
}

// The geometry check for backends that take f16/bf16 natively (cuDNN): one float type for
// all three operands; the CPU kernels (low_float off) take f32 only.
TEST(Conv2d, LowFloatGeometryTakesOneTypeForAllOperands) {
  std::vector<uint16_t> xs(1 * 4 * 5 * 5), ws(6 * 2 * 3 * 3), ys(1 * 6 * 3 * 3);
  std::vector<float> wf(ws.size());
  const Ints g2{{"groups", {2}}};
  for (ElemType t : {ElemType::F16, ElemType::BF16}) {
    kernels::LibCall c;
    c.op = "conv2d";
    c.where = "m.model:2:3";
    c.ints = &g2;
    const kernels::TensorArg x{xs.data(), t, {1, 4, 5, 5}}, w{ws.data(), t, {6, 2, 3, 3}}, y{ys.data(), t, {1, 6, 3, 3}};
    const kernels::ConvGeom g = kernels::conv_geometry(c, x, w, y, "input", "weight", "output", /*low_float=*/true);
    EXPECT_EQ(g.HO, 3);
    EXPECT_EQ(g.Og, 3);
    const kernels::TensorArg w32{wf.data(), ElemType::F32, {6, 2, 3, 3}};
    expect_error([&] { kernels::conv_geometry(c, x, w32, y, "input", "weight", "output", true); },
                 {"conv2d at m.model:2:3", fmt::format("weight must be {}, got f32[6,2,3,3]", dtype_name(t))});
    expect_error([&] { kernels::conv_geometry(c, x, w, y, "input", "weight", "output"); },
                 {fmt::format("input must be f32, got {}[1,4,5,5]", dtype_name(t))});
  }
}

TEST(Conv2d, Errors) {
  for (const Backend& be : kBackends) {
    HostTensor x = random_f32({1, 4, 5, 5}), w = random_f32({6, 2, 3, 3}), y = random_f32({1, 6, 3, 3});
    Ints g2{{"groups", {2}}};
    HostTensor bad_y = random_f32({1, 6, 4, 3});
    expect_error([&] { run_op("conv2d", {&x, &w}, {&bad_y}, g2, {}, nullptr, be.fwd); },
                 {"conv2d", "test.model:1:1", "output has shape [1,6,4,3]", "expected [1,6,3,3]"});
    expect_error([&] { run_op("conv2d", {&x, &w}, {&y}, {{"groups", {3}}}, {}, nullptr, be.fwd); },
                 {"weight [6,2,3,3] with groups 3 does not fit input [1,4,5,5]"});
    expect_error([&] { run_op("conv2d", {&x, &w}, {&y}, {{"groups", {0}}}, {}, nullptr, be.fwd); }, {"groups must be >= 1"});
    expect_error([&] { run_op("conv2d", {&x, &w}, {&y}, {{"groups", {2}}, {"stride", {0}}}, {}, nullptr, be.fwd); },
                 {"stride"});
    expect_error([&] { run_op("conv2d", {&x, &w}, {&y}, {{"groups", {2}}, {"stride", {1, 1, 1}}}, {}, nullptr, be.fwd); },
                 {"'stride' must have 1 or 2 entries"});
    HostTensor bias = random_f32({5});
    expect_error([&] { run_op("conv2d", {&x, &w, &bias}, {&y}, g2, {}, nullptr, be.fwd); }, {"bias must be f32[6]"});
    HostTensor x3 = random_f32({4, 5, 5});
    expect_error([&] { run_op("conv2d", {&x3, &w}, {&y}, g2, {}, nullptr, be.fwd); }, {"input must have rank 4"});
    HostTensor gx = random_f32({1, 4, 5, 5});
    Ints bad_shape{{"groups", {2}}, {"input_shape", {1, 4, 5, 6}}};
    expect_error([&] { run_op("conv2d_grad_input", {&y, &w}, {&gx}, bad_shape, {}, nullptr, be.gin); },
                 {"conv2d_grad_input", "input_shape [1,4,5,6] disagrees"});
    HostTensor gw = random_f32({6, 2, 3, 3});
    Ints bad_w{{"groups", {2}}, {"weight_shape", {6, 2, 3, 2}}};
    expect_error([&] { run_op("conv2d_grad_weight", {&x, &y}, {&gw}, bad_w, {}, nullptr, be.gw); },
                 {"conv2d_grad_weight", "weight_shape [6,2,3,2] disagrees"});
    HostTensor small = random_f32({1, 6, 2, 2});
    expect_error([&] { run_op("conv2d_grad_weight", {&x, &small}, {&gw}, g2, {}, nullptr, be.gw); },
                 {"output gradient has shape [1,6,2,2]"});
  }
}

}  // namespace modelc::rt::test
