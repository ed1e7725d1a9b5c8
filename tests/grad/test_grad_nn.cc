// Finite-difference checks of the neural-network, convolution and pooling gradient rules
// on fresh random shapes and attributes (strides, padding, dilation, groups). Pool inputs
// are shuffled ramps, so no window holds a tie.
#include "tests/grad/grad_check.h"

namespace modelc::test {
namespace {

TEST(GradNN, SoftmaxLogSoftmaxLayerNorm) {
  for (int rep = 0; rep < 4; ++rep) {
    auto s = random_shape(rnd(1, 3), 1, 4);
    int64_t r = static_cast<int64_t>(s.size());
    check_op_grad(OpKind::Softmax, {rand_f(s, -2, 2)}, attrs({{"axis", rnd(-r, r - 1)}}));
    check_op_grad(OpKind::LogSoftmax, {rand_f(s, -2, 2)}, attrs({{"axis", rnd(-r, r - 1)}}));
    s.back() = rnd(2, 5);  // a single-element row has a zero variance and a singular gradient
    std::vector<int64_t> ch{s.back()};
    auto maybe = [&](bool on) { return on ? std::optional<RefTensor>(rand_f(ch)) : std::nullopt; };
    check_op_grad(OpKind::LayerNorm, {rand_f(s), maybe(rnd(0, 1)), maybe(rnd(0, 1))}, attrs({{"eps", 1e-3}}));
  }
}

TEST(GradNN, EmbeddingCrossEntropyDropoutCausalMask) {
  for (int rep = 0; rep < 4; ++rep) {
    auto s = random_shape(rnd(0, 2), 1, 4);
    int64_t V = rnd(1, 5), C = rnd(1, 4);
    check_op_grad(OpKind::Embedding, {rand_ids(s, V), rand_f({V, C})});  // repeated ids add up
    check_op_grad(OpKind::CrossEntropy, {rand_f([&] { auto l = s; l.push_back(V); return l; }(), -2, 2), rand_ids(s, V)});
    InterpOptions train{true, static_cast<uint64_t>(rnd(0, 1000)), static_cast<uint64_t>(rnd(0, 1000))};
    check_op_grad(OpKind::Dropout, {rand_f(random_shape(rnd(1, 3), 1, 5))},
                  attrs({{"p", 0.5}, {"key", rnd(0, 1 << 20)}}), train);
  }
}

TEST(GradNN, CausalMaskThroughSoftmax) {
  // causal_mask leaves -inf, so the loss is sum(softmax(causal_mask(x)) * r); with Tk >= Tq
  // every row keeps a key. The masked places must get exactly zero.
  for (int rep = 0; rep < 4; ++rep) {
    auto m = random_shape(rnd(2, 4), 1, 4);
    m.back() = m[m.size() - 2] + rnd(0, 2);
    RefTensor x = rand_f(m, -2, 2), r = rand_f(m);
    OneOp o = build_op(OpKind::CausalMask, {type_of(x)});
    Graph& g = o.g;
    Node rn;
    rn.op = OpKind::Input;
    rn.name = "r";
    rn.outputs = {type_of(r)};
    NodeId rid = g.add(std::move(rn));
    g.inputs.push_back(rid);
    auto sm = add_op(g, OpKind::Softmax, {Value{o.node, 0}}, {});
    auto prod = add_op(g, OpKind::Mul, {Value{*sm, 0}, Value{rid, 0}}, {});
    auto loss = add_op(g, OpKind::Sum, {Value{*prod, 0}}, {});
    g.outputs = {{"loss", Value{*loss, 0}, {}}};
    check_graph_grads(g, "loss", {{"in0", x}, {"r", r}}, {"in0"});
    Graph gg = g;
    Value gx = append_gradients(gg, Value{*loss, 0}, {Value{g.inputs[0], 0}})[0];
    gg.outputs.push_back({"gx", gx, {}});
    RefTensor got = interpret(gg, {{"in0", x}, {"r", r}}).outputs.at("gx");
    int64_t tq = m[m.size() - 2], tk = m.back();
    for (int64_t i = 0; i < got.numel(); ++i) {
      int64_t q = (i / tk) % tq, k = i % tk;
      if (k > q + (tk - tq)) {
        EXPECT_EQ(got[i], 0.0) << i;
      }
    }
  }
}

TEST(GradConv, Conv2dStridePaddingDilationGroups) {
  for (int rep = 0; rep < 6; ++rep) {
    int64_t groups = rnd(1, 2), N = rnd(1, 2), C = groups * rnd(1, 2), O = groups * rnd(1, 2);
    int64_t kh = rnd(1, 3), kw = rnd(1, 3);
    Ints stride{rnd(1, 2), rnd(1, 2)}, pad{rnd(0, 1), rnd(0, 1)}, dil{rnd(1, 2), rnd(1, 2)};
    int64_t H = dil[0] * (kh - 1) + rnd(1, 4), W = dil[1] * (kw - 1) + rnd(1, 4);
    bool bias = rnd(0, 1);
    check_op_grad(OpKind::Conv2d,
                  {rand_f({N, C, H, W}), rand_f({O, C / groups, kh, kw}),
                   bias ? std::optional<RefTensor>(rand_f({O})) : std::nullopt},
                  attrs({{"stride", stride}, {"padding", pad}, {"dilation", dil}, {"groups", groups}}));
  }
}

RefTensor ramp(std::vector<int64_t> shape) {
  RefTensor x(DType::F32, std::move(shape));
  for (int64_t i = 0; i < x.numel(); ++i) x[i] = 0.01 * static_cast<double>(i) - 0.3;
  std::shuffle(x.data.begin(), x.data.end(), rng());
  return x;
}

TEST(GradConv, MaxAndAvgPool) {
  for (int rep = 0; rep < 6; ++rep) {
    Ints kernel{rnd(1, 3), rnd(1, 3)};
    Ints stride{rnd(1, 3), rnd(1, 3)}, pad{rnd(0, kernel[0] / 2), rnd(0, kernel[1] / 2)};
    std::vector<int64_t> s{rnd(1, 2), rnd(1, 2), kernel[0] + rnd(0, 4), kernel[1] + rnd(0, 4)};
    Attrs a = attrs({{"kernel", kernel}, {"stride", stride}, {"padding", pad}});
    check_op_grad(OpKind::MaxPool2d, {ramp(s)}, a);
    check_op_grad(OpKind::AvgPool2d, {rand_f(s)}, a);
  }
}

}  // namespace
}  // namespace modelc::test
