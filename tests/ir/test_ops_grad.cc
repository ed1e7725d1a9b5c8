// Tests of erf, one_hot and the ops gradients are built from (compiler/ir/ops/grad_ops.cc):
// shape rules with their error messages, references on hand-computed cases, and the
// *_grad ops against the adjoint identity <op(x), g> = <x, op_grad(g)> on fresh random
// shapes and attributes (exact in double up to rounding).
#include "tests/ir/op_harness.h"

namespace modelc::test {
namespace {

RefTensor vals(DType t, std::vector<int64_t> shape, std::vector<double> v) {
  RefTensor x(t, std::move(shape));
  x.data = std::move(v);
  return x;
}

double dot(const RefTensor& a, const RefTensor& b) {
  EXPECT_EQ(a.shape, b.shape);
  double s = 0;
  for (int64_t i = 0; i < a.numel(); ++i) s += a[i] * b[i];
  return s;
}

TEST(OpsGrad, Erf) {
  OneOp o = build_op(OpKind::Erf, {f32({B, T})});
  expect_type(o, f32({B, T}));
  RefTensor got = run_op(o, {vals(DType::F32, {1, 3}, {0, 1, -0.5})})[0];
  EXPECT_EQ(got.data[0], 0.0);
  EXPECT_NEAR(got.data[1], 0.8427007929497149, 1e-15);
  EXPECT_NEAR(got.data[2], -0.5204998778130465, 1e-15);
  expect_error(build_op(OpKind::Erf, {tt(DType::I32, {B})}), "erf expects a floating-point tensor, got i32[B]", 0);
}

TEST(OpsGrad, OneHot) {
  OneOp o = build_op(OpKind::OneHot, {tt(DType::I32, {B, T})}, attrs({{"classes", int64_t{3}}}));
  expect_type(o, f32({B, T, Dim(3)}));
  EXPECT_EQ(op_info(OpKind::OneHot).fusion, FusionKind::Injective);
  RefTensor got = run_op(o, {vals(DType::I32, {2, 2}, {0, 2, -1, 3})})[0];
  EXPECT_EQ(got.shape, (std::vector<int64_t>{2, 2, 3}));
  EXPECT_EQ(got.data, (std::vector<double>{1, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0}));  // out of range: zeros
  expect_error(build_op(OpKind::OneHot, {f32({B})}, attrs({{"classes", int64_t{3}}})),
               "one_hot ids must be i32, got f32[B]", 0);
  expect_error(build_op(OpKind::OneHot, {tt(DType::I32, {B})}, attrs({{"classes", int64_t{0}}})),
               "one_hot classes must be >= 1, got 0", -1, "classes");
}

TEST(OpsGrad, EmbeddingGradAddsRowsUp) {
  OneOp o = build_op(OpKind::EmbeddingGrad, {tt(DType::I32, {B}), f32({B, C})}, attrs({{"rows", int64_t{3}}}));
  expect_type(o, f32({Dim(3), C}));
  EXPECT_FALSE(op_info(OpKind::EmbeddingGrad).callable);
  RefTensor got = run_op(o, {vals(DType::I32, {3}, {1, 0, 1}), vals(DType::F32, {3, 2}, {1, 2, 3, 4, 5, 6})})[0];
  EXPECT_EQ(got.data, (std::vector<double>{3, 4, 6, 8, 0, 0}));
  EXPECT_THROW(run_op(o, {vals(DType::I32, {1}, {3}), vals(DType::F32, {1, 2}, {1, 2})}), UserError);
  expect_error(build_op(OpKind::EmbeddingGrad, {tt(DType::I32, {B}), f32({T, C})}, attrs({{"rows", int64_t{3}}})),
               "embedding_grad gradient must be float [[B]..., W] for ids i32[B], got f32[T,C]", 1);
  expect_error(build_op(OpKind::EmbeddingGrad, {tt(DType::I32, {B}), f32({B, C})}, attrs({{"rows", int64_t{0}}})),
               "embedding_grad rows must be >= 1, got 0", -1, "rows");
}

// <conv2d(x, w), g> = <x, conv2d_grad_input(g, w)> = <w, conv2d_grad_weight(x, g)>.
TEST(OpsGrad, ConvGradsAreTheAdjointsOfConv2d) {
  for (int rep = 0; rep < 10; ++rep) {
    int64_t groups = rnd(1, 3), N = rnd(1, 2), C = groups * rnd(1, 2), O = groups * rnd(1, 2);
    int64_t kh = rnd(1, 3), kw = rnd(1, 3);
    Ints stride{rnd(1, 3), rnd(1, 3)}, pad{rnd(0, 2), rnd(0, 2)}, dil{rnd(1, 2), rnd(1, 2)};
    int64_t H = dil[0] * (kh - 1) + rnd(1, 5), W = dil[1] * (kw - 1) + rnd(1, 5);
    Attrs a = attrs({{"stride", stride}, {"padding", pad}, {"dilation", dil}, {"groups", groups}});
    RefTensor x = random_tensor(DType::F32, {N, C, H, W}), w = random_tensor(DType::F32, {O, C / groups, kh, kw});
    OneOp fwd = build_op(OpKind::Conv2d, {type_of(x), type_of(w), std::nullopt}, a);
    ASSERT_FALSE(fwd.error) << fwd.error->message;
    RefTensor y = run_op(fwd, {x, w})[0];
    RefTensor g = random_tensor(DType::F32, y.shape);
    Attrs ai = a, aw = a;
    ai.set("input_shape", to_dims(x.shape));
    aw.set("weight_shape", to_dims(w.shape));
    OneOp gi = build_op(OpKind::Conv2dGradInput, {type_of(g), type_of(w)}, ai);
    OneOp gw = build_op(OpKind::Conv2dGradWeight, {type_of(x), type_of(g)}, aw);
    expect_type(gi, type_of(x));
    expect_type(gw, type_of(w));
    double want = dot(y, g);
    EXPECT_NEAR(dot(x, run_op(gi, {g, w})[0]), want, 1e-12 * (1 + std::fabs(want)));
    EXPECT_NEAR(dot(w, run_op(gw, {x, g})[0]), want, 1e-12 * (1 + std::fabs(want)));
  }
}

TEST(OpsGrad, ConvGradInputOfAStridedConvolution) {
  // A 1x1 kernel of 2 with stride 2 over 3x3: the gradient lands on the corners only.
  OneOp o = build_op(OpKind::Conv2dGradInput, {f32({Dim(1), Dim(1), Dim(2), Dim(2)}), f32({Dim(1), Dim(1), Dim(1), Dim(1)})},
                     attrs({{"input_shape", Shape{Dim(1), Dim(1), Dim(3), Dim(3)}}, {"stride", Ints{2}}}));
  expect_type(o, f32({Dim(1), Dim(1), Dim(3), Dim(3)}));
  EXPECT_EQ(o.attrs().ints("stride"), (Ints{2, 2}));  // canonical two-entry form
  RefTensor got = run_op(o, {vals(DType::F32, {1, 1, 2, 2}, {1, 2, 3, 4}), vals(DType::F32, {1, 1, 1, 1}, {2})})[0];
  EXPECT_EQ(got.data, (std::vector<double>{2, 0, 4, 0, 0, 0, 6, 0, 8}));
}

TEST(OpsGrad, ConvGradShapeErrors) {
  Shape in{B, Dim(4), Dim(8), Dim(8)};
  TensorType w = f32({Dim(6), Dim(2), Dim(3), Dim(3)});
  Attrs a = attrs({{"input_shape", in}, {"groups", int64_t{2}}});
  expect_type(build_op(OpKind::Conv2dGradInput, {f32({B, Dim(6), Dim(6), Dim(6)}), w}, a), f32(in));
  expect_error(build_op(OpKind::Conv2dGradInput, {f32({B, Dim(6), Dim(7), Dim(6)}), w}, a),
               "conv2d_grad_input gradient f32[B,6,7,6] does not fit input [B,4,8,8] (a 3x3 window, stride [1, 1], "
               "padding [0, 0], dilation [1, 1] gives 6x6)", 0);
  expect_error(build_op(OpKind::Conv2dGradInput, {f32({B, Dim(5), Dim(6), Dim(6)}), w}, a),
               "conv2d_grad_input gradient f32[B,5,6,6] does not fit input [B,4,8,8] and weight f32[6,2,3,3]", 0);
  expect_error(build_op(OpKind::Conv2dGradInput, {f32({B, Dim(6), Dim(6), Dim(6)}), w},
                        attrs({{"input_shape", in}, {"groups", int64_t{1}}})),
               "conv2d_grad_input weight f32[6,2,3,3] with groups 1 does not fit input [B,4,8,8]", 1);
  expect_error(build_op(OpKind::Conv2dGradInput, {f32({B, Dim(6), Dim(6)}), w}, a),
               "conv2d_grad_input needs a float gradient [N,C,H,W], got f32[B,6,6]", 0);
  Attrs aw = attrs({{"weight_shape", Shape{Dim(6), Dim(2), Dim(3), Dim(3)}}, {"groups", int64_t{2}}});
  expect_type(build_op(OpKind::Conv2dGradWeight, {f32(in), f32({B, Dim(6), Dim(6), Dim(6)})}, aw), w);
  expect_error(build_op(OpKind::Conv2dGradWeight, {f32(in), f32({B, Dim(6), Dim(6), Dim(6)})},
                        attrs({{"weight_shape", Shape{Dim(6), Dim(3), Dim(3)}}})),
               "conv2d_grad_weight weight_shape must have 4 dimensions, got [6,3,3]", -1, "weight_shape");
  expect_error(build_op(OpKind::Conv2dGradWeight, {f32(in), f32({B, Dim(6), Dim(6), Dim(6)})},
                        attrs({{"weight_shape", Shape{Dim(6), Dim(2), Dim(3), Dim(3)}}, {"stride", Ints{0}}})),
               "conv2d_grad_weight stride must be positive, got [0]", -1, "stride");
}

TEST(OpsGrad, MaxPoolGradGoesToTheFirstMaximumAndNeverToPadding) {
  OneOp o = build_op(OpKind::MaxPool2dGrad, {f32({Dim(1), Dim(1), Dim(2), Dim(4)}), f32({Dim(1), Dim(1), Dim(1), Dim(2)})},
                     attrs({{"kernel", Ints{2}}}));
  expect_type(o, f32({Dim(1), Dim(1), Dim(2), Dim(4)}));
  RefTensor got = run_op(o, {vals(DType::F32, {1, 1, 2, 4}, {1, 5, 5, 2, 3, 0, 5, 1}),
                             vals(DType::F32, {1, 1, 1, 2}, {10, 20})})[0];
  EXPECT_EQ(got.data, (std::vector<double>{0, 10, 20, 0, 0, 0, 0, 0}));
  // Every window holds one real (negative) element and three padding places.
  OneOp p = build_op(OpKind::MaxPool2dGrad, {f32({Dim(1), Dim(1), Dim(2), Dim(2)}), f32({Dim(1), Dim(1), Dim(2), Dim(2)})},
                     attrs({{"kernel", Ints{2}}, {"padding", Ints{1}}}));
  ASSERT_FALSE(p.error) << p.error->message;
  got = run_op(p, {vals(DType::F32, {1, 1, 2, 2}, {-1, -2, -3, -4}), vals(DType::F32, {1, 1, 2, 2}, {1, 2, 3, 4})})[0];
  EXPECT_EQ(got.data, (std::vector<double>{1, 2, 3, 4}));
  expect_error(build_op(OpKind::MaxPool2dGrad, {f32({B, C, Dim(4), Dim(4)}), f32({B, C, Dim(3), Dim(2)})},
                        attrs({{"kernel", Ints{2}}})),
               "max_pool2d_grad gradient f32[B,C,3,2] does not fit input [B,C,4,4] (a 2x2 window, stride [2, 2], "
               "padding [0, 0], dilation [1, 1] gives 2x2)", 1);
  expect_error(build_op(OpKind::MaxPool2dGrad, {f32({B, C, Dim(4), Dim(4)}), f32({B, H, Dim(2), Dim(2)})},
                        attrs({{"kernel", Ints{2}}})),
               "max_pool2d_grad gradient f32[B,H,2,2] does not fit input f32[B,C,4,4]", 1);
}

TEST(OpsGrad, AvgPoolGradSpreadsOverTheWholeWindow) {
  OneOp o = build_op(OpKind::AvgPool2dGrad, {f32({Dim(1), Dim(1), Dim(2), Dim(2)})},
                     attrs({{"input_shape", Shape{Dim(1), Dim(1), Dim(2), Dim(2)}}, {"kernel", Ints{2}}, {"padding", Ints{1}}}));
  expect_type(o, f32({Dim(1), Dim(1), Dim(2), Dim(2)}));
  RefTensor got = run_op(o, {vals(DType::F32, {1, 1, 2, 2}, {4, 8, 12, 16})})[0];
  EXPECT_EQ(got.data, (std::vector<double>{1, 2, 3, 4}));  // divisor 4: padding counts
  expect_error(build_op(OpKind::AvgPool2dGrad, {f32({B, C, Dim(2), Dim(2)})},
                        attrs({{"input_shape", Shape{B, C, Dim(4)}}, {"kernel", Ints{2}}})),
               "avg_pool2d_grad input_shape must have 4 dimensions, got [B,C,4]", -1, "input_shape");
  // The adjoint identity with avg_pool2d and max_pool2d on random shapes (distinct values).
  for (int rep = 0; rep < 10; ++rep) {
    Ints kernel{rnd(1, 3), rnd(1, 3)}, stride{rnd(1, 3), rnd(1, 3)}, pad{rnd(0, kernel[0] / 2), rnd(0, kernel[1] / 2)};
    std::vector<int64_t> s{rnd(1, 2), rnd(1, 2), kernel[0] + rnd(0, 4), kernel[1] + rnd(0, 4)};
    Attrs a = attrs({{"kernel", kernel}, {"stride", stride}, {"padding", pad}});
    RefTensor x = random_tensor(DType::F32, s);
    for (bool max : {false, true}) {
      OneOp fwd = build_op(max ? OpKind::MaxPool2d : OpKind::AvgPool2d, {type_of(x)}, a);
      RefTensor y = run_op(fwd, {x})[0], g = random_tensor(DType::F32, y.shape);
      Attrs ag = a;
      if (!max) ag.set("input_shape", to_dims(s));
      OneOp back = max ? build_op(OpKind::MaxPool2dGrad, {type_of(x), type_of(g)}, ag)
                       : build_op(OpKind::AvgPool2dGrad, {type_of(g)}, ag);
      ASSERT_FALSE(back.error) << back.error->message;
      RefTensor gx = max ? run_op(back, {x, g})[0] : run_op(back, {g})[0];
      // max_pool2d is linear in x near a point without ties (random values have none).
      EXPECT_NEAR(dot(x, gx), dot(y, g), 1e-12) << (max ? "max" : "avg");
    }
  }
}

}  // namespace
}  // namespace modelc::test
