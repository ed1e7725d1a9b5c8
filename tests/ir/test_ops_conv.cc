// Tests of conv2d, max_pool2d and avg_pool2d (compiler/ir/ops/conv.cc).
//
// Shape rules are checked on symbolic shapes with every error message verbatim; the
// references on fresh random images and window parameters against direct loops written
// here (one loop per index, groups spelled out) rather than the op's own indexing.
#include <algorithm>
#include <limits>

#include "tests/ir/op_harness.h"

namespace modelc::test {

namespace {

const Dim N = Dim::symbol("N"), W = Dim::symbol("W");  // H from op_harness.h

OneOp conv(const TensorType& x, const TensorType& w, Attrs a = {}, std::optional<TensorType> bias = std::nullopt) {
  return build_op(OpKind::Conv2d, {x, w, bias}, std::move(a));
}

}  // namespace

TEST(ConvRegistry, SignaturesAndFusionKinds) {
  EXPECT_EQ(signature_str(op_info(OpKind::Conv2d).params),
            "x: tensor, w: tensor, bias: tensor? = none, stride: ints = [1], padding: ints = [0], "
            "dilation: ints = [1], groups: int = 1");
  EXPECT_EQ(op_info(OpKind::Conv2d).fusion, FusionKind::Opaque);
  for (OpKind op : {OpKind::MaxPool2d, OpKind::AvgPool2d}) {
    EXPECT_EQ(signature_str(op_info(op).params), "x: tensor, kernel: ints, stride: ints = [], padding: ints = [0]");
    EXPECT_EQ(op_info(op).fusion, FusionKind::Reduction);
  }
  for (OpKind op : {OpKind::Conv2d, OpKind::MaxPool2d, OpKind::AvgPool2d})
    EXPECT_FALSE(op_info(op).summary.empty()) << op_name(op);
}

// --- conv2d shape rule ------------------------------------------------------------------------

TEST(ConvConv2d, ShapeRuleSymbolic) {
  // Stride 1: the output extent is a polynomial of the input's; attributes become pairs.
  auto o = conv(f32({N, 3, H, W}), f32({8, 3, 3, 3}), attrs({{"padding", Ints{1}}}), f32({8}));
  expect_type(o, f32({N, 8, H, W}));
  EXPECT_EQ(o.attrs().ints("stride"), (Ints{1, 1}));
  EXPECT_EQ(o.attrs().ints("padding"), (Ints{1, 1}));
  EXPECT_EQ(o.attrs().ints("dilation"), (Ints{1, 1}));
  expect_type(conv(f32({N, 3, H, W}), f32({8, 3, 3, 5}), attrs({{"dilation", Ints{2, 1}}})),
              f32({N, 8, H - 4, W - 4}));
  // A symbolic kernel works with stride 1 too.
  Dim K = Dim::symbol("K");
  expect_type(conv(f32({N, 3, H, W}), f32({8, 3, K, K})), f32({N, 8, H - K + 1, W - K + 1}));
  // Stride > 1 on known extents: floor division.
  expect_type(conv(tt(DType::BF16, {N, 3, 32, 31}), tt(DType::BF16, {8, 3, 3, 3}),
                   attrs({{"stride", Ints{2}}, {"padding", Ints{1}}})),
              tt(DType::BF16, {N, 8, 16, 16}));
  // Stride > 1 on a symbolic extent that divides evenly: patch embedding, 16*P -> P.
  Dim P = Dim::symbol("P"), Q = Dim::symbol("Q");
  expect_type(conv(f32({N, 3, P * 16, Q * 16}), f32({64, 3, 16, 16}), attrs({{"stride", Ints{16}}})),
              f32({N, 64, P, Q}));
  // Groups: each of 2 groups maps 2 input channels to 3 output channels.
  o = conv(f32({N, 4, 8, 8}), f32({6, 2, 3, 3}), attrs({{"groups", int64_t{2}}, {"stride", Ints{1, 2}}}));
  expect_type(o, f32({N, 6, 6, 3}));
  EXPECT_EQ(o.attrs().ints("stride"), (Ints{1, 2}));
}

TEST(ConvConv2d, ShapeRuleErrors) {
  const TensorType x = f32({N, 3, H, W}), w = f32({8, 3, 3, 3});
  expect_error(conv(tt(DType::I32, {N, 3, H, W}), w), "conv2d needs a float image [N,C,H,W], got i32[N,3,H,W]", 0);
  expect_error(conv(f32({3, H, W}), w), "conv2d needs a float image [N,C,H,W], got f32[3,H,W]", 0);
  expect_error(conv(x, tt(DType::BF16, {8, 3, 3, 3})),
               "conv2d weight must be f32[O,C/groups,kh,kw] for f32[N,3,H,W], got bf16[8,3,3,3]", 1);
  expect_error(conv(x, f32({8, 3, 3})),
               "conv2d weight must be f32[O,C/groups,kh,kw] for f32[N,3,H,W], got f32[8,3,3]", 1);
  expect_error(conv(x, w, attrs({{"groups", int64_t{0}}})), "conv2d groups must be >= 1, got 0", -1, "groups");
  expect_error(conv(x, w, attrs({{"stride", Ints{1, 2, 3}}})), "conv2d stride must have 1 or 2 entries, got [1, 2, 3]",
               -1, "stride");
  expect_error(conv(x, w, attrs({{"padding", Ints{}}})), "conv2d padding must have 1 or 2 entries, got []", -1,
               "padding");
  expect_error(conv(x, w, attrs({{"dilation", Ints{1, 2, 3}}})),
               "conv2d dilation must have 1 or 2 entries, got [1, 2, 3]", -1, "dilation");
  expect_error(conv(x, w, attrs({{"stride", Ints{0}}})), "conv2d stride must be positive, got [0]", -1, "stride");
  expect_error(conv(x, w, attrs({{"padding", Ints{1, -1}}})), "conv2d padding must be non-negative, got [1, -1]", -1,
               "padding");
  expect_error(conv(x, w, attrs({{"dilation", Ints{1, 0}}})), "conv2d dilation must be positive, got [1, 0]", -1,
               "dilation");
  expect_error(conv(f32({1, 3, 8, 8}), f32({8, 2, 3, 3})),
               "conv2d weight f32[8,2,3,3] with groups 1 expects 2 input channels, got f32[1,3,8,8]", 1);
  expect_error(conv(f32({1, 4, 8, 8}), f32({8, 4, 3, 3}), attrs({{"groups", int64_t{2}}})),
               "conv2d weight f32[8,4,3,3] with groups 2 expects 8 input channels, got f32[1,4,8,8]", 1);
  expect_error(conv(f32({1, 4, 8, 8}), f32({3, 2, 3, 3}), attrs({{"groups", int64_t{2}}})),
               "conv2d groups 2 does not divide the 3 output channels of weight f32[3,2,3,3]", -1, "groups");
  expect_error(conv(x, w, {}, f32({4})), "conv2d bias must be f32[8] for weight f32[8,3,3,3], got f32[4]", 2);
  expect_error(conv(x, w, {}, tt(DType::F16, {8})),
               "conv2d bias must be f32[8] for weight f32[8,3,3,3], got f16[8]", 2);
  expect_error(conv(x, w, attrs({{"stride", Ints{2}}, {"padding", Ints{1}}})),
               "conv2d with stride 2 needs a known input height, got H", 0);
  expect_error(conv(f32({N, 3, 32, W}), w, attrs({{"stride", Ints{1, 3}}})),
               "conv2d with stride 3 needs a known input width, got W", 0);
  expect_error(conv(f32({N, 3, 32, 32}), f32({8, 3, Dim::symbol("K"), 3}), attrs({{"stride", Ints{2}}})),
               "conv2d with stride 2 needs a known kernel height, got K", 1);
  expect_error(conv(f32({N, 3, 2, 2}), w), "conv2d output size 0x0 is not positive: input f32[N,3,2,2], kernel 3x3");
  expect_error(conv(f32({N, 3, 8, 2}), w, attrs({{"dilation", Ints{1, 2}}})),
               "conv2d output size 6x-2 is not positive: input f32[N,3,8,2], kernel 3x3");
  // Floor division, not truncation: (2 - 5)/2 + 1 is -1, not 0.
  expect_error(conv(f32({N, 3, 2, 9}), f32({8, 3, 5, 5}), attrs({{"stride", Ints{2}}})),
               "conv2d output size -1x3 is not positive: input f32[N,3,2,9], kernel 5x5");
}

// --- conv2d reference -------------------------------------------------------------------------

namespace {

// out[n][g*Og+o][i][j] = bias + sum over c < Cg, a < kh, b < kw of
//   x[n][g*Cg+c][i*s0 - p0 + a*d0][j*s1 - p1 + b*d1] * w[g*Og+o][c][a][b], zero outside.
RefTensor naive_conv(const RefTensor& x, const RefTensor& w, const RefTensor* bias, Ints s, Ints p, Ints d,
                     int64_t groups) {
  int64_t n_ = x.shape[0], h = x.shape[2], wd = x.shape[3];
  int64_t o_all = w.shape[0], cg = w.shape[1], kh = w.shape[2], kw = w.shape[3], og = o_all / groups;
  int64_t ho = (h + 2 * p[0] - d[0] * (kh - 1) - 1) / s[0] + 1;
  int64_t wo = (wd + 2 * p[1] - d[1] * (kw - 1) - 1) / s[1] + 1;
  RefTensor out(x.dtype, {n_, o_all, ho, wo});
  auto X = [&](int64_t n, int64_t c, int64_t i, int64_t j) {
    if (i < 0 || i >= h || j < 0 || j >= wd) return 0.0;
    return x.data[static_cast<size_t>(((n * x.shape[1] + c) * h + i) * wd + j)];
  };
  for (int64_t n = 0; n < n_; ++n)
    for (int64_t g = 0; g < groups; ++g)
      for (int64_t o = 0; o < og; ++o)
        for (int64_t i = 0; i < ho; ++i)
          for (int64_t j = 0; j < wo; ++j) {
            int64_t oc = g * og + o;
            double acc = bias ? bias->data[static_cast<size_t>(oc)] : 0.0;
            for (int64_t c = 0; c < cg; ++c)
              for (int64_t a = 0; a < kh; ++a)
                for (int64_t b = 0; b < kw; ++b)
                  acc += X(n, g * cg + c, i * s[0] - p[0] + a * d[0], j * s[1] - p[1] + b * d[1]) *
                         w.data[static_cast<size_t>(((oc * cg + c) * kh + a) * kw + b)];
            out.data[static_cast<size_t>(((n * o_all + oc) * ho + i) * wo + j)] = acc;
          }
  return out;
}

// A window attribute of one or two entries and its two-entry form.
Ints random_pair(int64_t lo, int64_t hi, Ints& both) {
  both = {rnd(lo, hi), rnd(lo, hi)};
  if (rnd(0, 2) == 0) {
    both[1] = both[0];
    return {both[0]};
  }
  return both;
}

}  // namespace

TEST(ConvConv2d, ReferenceMatchesNaive) {
  for (int trial = 0; trial < 40; ++trial) {
    int64_t groups = rnd(1, 3), cg = rnd(1, 3), og = rnd(1, 3), n = rnd(1, 2);
    int64_t kh = rnd(1, 4), kw = rnd(1, 4);
    Ints s, p, d;
    Ints sa = random_pair(1, 3, s), pa = random_pair(0, 2, p), da = random_pair(1, 2, d);
    // The smallest input a window of this span fits into, padded.
    int64_t min_h = std::max<int64_t>(1, d[0] * (kh - 1) + 1 - 2 * p[0]);
    int64_t min_w = std::max<int64_t>(1, d[1] * (kw - 1) + 1 - 2 * p[1]);
    int64_t h = rnd(min_h, min_h + 7), wd = rnd(min_w, min_w + 7);
    bool with_bias = trial % 3 != 0;
    RefTensor x = random_tensor(DType::F32, {n, groups * cg, h, wd});
    RefTensor w = random_tensor(DType::F32, {groups * og, cg, kh, kw});
    RefTensor bias = random_tensor(DType::F32, {groups * og});
    auto o = conv(f32({n, groups * cg, h, wd}), f32({groups * og, cg, kh, kw}),
                  attrs({{"stride", sa}, {"padding", pa}, {"dilation", da}, {"groups", groups}}),
                  with_bias ? std::optional(f32({groups * og})) : std::nullopt);
    ASSERT_FALSE(o.error) << o.error->message;
    std::vector<RefTensor> feeds = {x, w};
    if (with_bias) feeds.push_back(bias);
    RefTensor want = naive_conv(x, w, with_bias ? &bias : nullptr, s, p, d, groups);
    expect_near(run_op(o, feeds)[0], want, 1e-12, "conv2d trial " + std::to_string(trial));
  }
}

// --- pooling ------------------------------------------------------------------------------------

namespace {

OneOp pool(OpKind op, const TensorType& x, Attrs a) { return build_op(op, {x}, std::move(a)); }

}  // namespace

TEST(ConvPool, ShapeRuleSymbolic) {
  for (OpKind op : {OpKind::MaxPool2d, OpKind::AvgPool2d}) {
    // The stride defaults to the kernel; attributes become pairs.
    auto o = pool(op, f32({N, 16, 32, 30}), attrs({{"kernel", Ints{2}}}));
    expect_type(o, f32({N, 16, 16, 15}));
    EXPECT_EQ(o.attrs().ints("kernel"), (Ints{2, 2}));
    EXPECT_EQ(o.attrs().ints("stride"), (Ints{2, 2}));
    EXPECT_EQ(o.attrs().ints("padding"), (Ints{0, 0}));
    o = pool(op, tt(DType::BF16, {N, 3, 7, 7}),
             attrs({{"kernel", Ints{3, 2}}, {"stride", Ints{2, 1}}, {"padding", Ints{1}}}));
    expect_type(o, tt(DType::BF16, {N, 3, 4, 8}));
    EXPECT_EQ(o.attrs().ints("stride"), (Ints{2, 1}));
    expect_type(pool(op, f32({N, 3, H, W}), attrs({{"kernel", Ints{3}}, {"stride", Ints{1}}})),
                f32({N, 3, H - 2, W - 2}));
    Dim S = Dim::symbol("S");
    expect_type(pool(op, f32({N, 3, S * 2, S * 4}), attrs({{"kernel", Ints{2}}})), f32({N, 3, S, S * 2}));
  }
}

TEST(ConvPool, ShapeRuleErrors) {
  for (OpKind op : {OpKind::MaxPool2d, OpKind::AvgPool2d}) {
    std::string name(op_name(op));
    const TensorType x = f32({N, 3, 8, 8});
    expect_error(pool(op, tt(DType::I32, {N, 3, 8, 8}), attrs({{"kernel", Ints{2}}})),
                 name + " needs a float image [N,C,H,W], got i32[N,3,8,8]", 0);
    expect_error(pool(op, f32({8, 8}), attrs({{"kernel", Ints{2}}})),
                 name + " needs a float image [N,C,H,W], got f32[8,8]", 0);
    expect_error(pool(op, x, attrs({{"kernel", Ints{}}})), name + " kernel must have 1 or 2 entries, got []", -1,
                 "kernel");
    expect_error(pool(op, x, attrs({{"kernel", Ints{2, 0}}})), name + " kernel must be positive, got [2, 0]", -1,
                 "kernel");
    expect_error(pool(op, x, attrs({{"kernel", Ints{2}}, {"stride", Ints{1, 1, 1}}})),
                 name + " stride must have 1 or 2 entries, got [1, 1, 1]", -1, "stride");
    expect_error(pool(op, x, attrs({{"kernel", Ints{2}}, {"stride", Ints{-1}}})),
                 name + " stride must be positive, got [-1]", -1, "stride");
    expect_error(pool(op, x, attrs({{"kernel", Ints{2}}, {"padding", Ints{0, 0, 0}}})),
                 name + " padding must have 1 or 2 entries, got [0, 0, 0]", -1, "padding");
    expect_error(pool(op, x, attrs({{"kernel", Ints{2}}, {"padding", Ints{-1}}})),
                 name + " padding must be non-negative, got [-1]", -1, "padding");
    expect_error(pool(op, x, attrs({{"kernel", Ints{3}}, {"padding", Ints{2}}})),
                 name + " padding [2, 2] must be at most half the kernel [3, 3]", -1, "padding");
    expect_error(pool(op, x, attrs({{"kernel", Ints{4, 3}}, {"padding", Ints{2}}})),
                 name + " padding [2, 2] must be at most half the kernel [4, 3]", -1, "padding");
    expect_error(pool(op, f32({N, 3, H, 8}), attrs({{"kernel", Ints{2}}})),
                 name + " with stride 2 needs a known input height, got H", 0);
    expect_error(pool(op, f32({N, 3, 8, W}), attrs({{"kernel", Ints{3}}, {"stride", Ints{1, 2}}})),
                 name + " with stride 2 needs a known input width, got W", 0);
    // (2 - 3)/3 + 1 floors to 0.
    expect_error(pool(op, f32({N, 3, 2, 8}), attrs({{"kernel", Ints{3}}})),
                 name + " output size 0x2 is not positive: input f32[N,3,2,8], kernel 3x3");
  }
}

TEST(ConvPool, ReferenceMatchesNaive) {
  for (int trial = 0; trial < 40; ++trial) {
    bool is_max = trial % 2 == 0;
    Ints k, s, p;
    Ints ka = random_pair(1, 4, k), sa = random_pair(1, 3, s);
    p = {rnd(0, k[0] / 2), rnd(0, k[1] / 2)};
    bool default_stride = trial % 5 == 0;
    if (default_stride) sa = {}, s = k;
    int64_t n = rnd(1, 2), c = rnd(1, 3);
    int64_t h = rnd(std::max<int64_t>(1, k[0] - 2 * p[0]), 9), w = rnd(std::max<int64_t>(1, k[1] - 2 * p[1]), 9);
    RefTensor x = random_tensor(DType::F32, {n, c, h, w}, -5, 5);
    auto o = pool(is_max ? OpKind::MaxPool2d : OpKind::AvgPool2d, f32({n, c, h, w}),
                  attrs({{"kernel", ka}, {"stride", sa}, {"padding", Ints(p)}}));
    ASSERT_FALSE(o.error) << o.error->message;
    int64_t ho = (h + 2 * p[0] - k[0]) / s[0] + 1, wo = (w + 2 * p[1] - k[1]) / s[1] + 1;
    RefTensor want(DType::F32, {n, c, ho, wo});
    int64_t at = 0;
    for (int64_t plane = 0; plane < n * c; ++plane)
      for (int64_t i = 0; i < ho; ++i)
        for (int64_t j = 0; j < wo; ++j) {
          // The window's rows and columns clipped to the image; the padding around it adds
          // nothing to a sum and can never be a max.
          int64_t r0 = i * s[0] - p[0], c0 = j * s[1] - p[1];
          double mx = -std::numeric_limits<double>::infinity(), sum = 0;
          for (int64_t r = std::max<int64_t>(r0, 0); r < std::min(r0 + k[0], h); ++r)
            for (int64_t q = std::max<int64_t>(c0, 0); q < std::min(c0 + k[1], w); ++q) {
              double v = x.data[static_cast<size_t>((plane * h + r) * w + q)];
              mx = std::max(mx, v);
              sum += v;
            }
          want.data[static_cast<size_t>(at++)] = is_max ? mx : sum / static_cast<double>(k[0] * k[1]);
        }
    expect_near(run_op(o, {x})[0], want, 1e-12,
                (is_max ? "max_pool2d trial " : "avg_pool2d trial ") + std::to_string(trial));
  }
}

}  // namespace modelc::test
