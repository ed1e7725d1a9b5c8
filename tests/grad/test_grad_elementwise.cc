// Finite-difference checks of the elementwise and reduction gradient rules on fresh random
// shapes and values (broadcasting, every attribute variant), in double precision through
// the reference interpreter (tests/grad/grad_check.h states the tolerance). Non-smooth
// points (relu and abs at 0, maximum ties) are kept away from by construction.
#include "tests/grad/grad_check.h"

namespace modelc::test {
namespace {

// A random shape of rank 0..3 and a second one broadcasting against it (dims dropped or
// set to 1, leading dims added).
std::pair<std::vector<int64_t>, std::vector<int64_t>> broadcast_pair() {
  std::vector<int64_t> a = random_shape(rnd(0, 3), 1, 4), b = a;
  for (int64_t& d : b)
    if (rnd(0, 2) == 0) d = 1;
  if (!b.empty() && rnd(0, 1)) b.erase(b.begin());
  else if (rnd(0, 1)) b.insert(b.begin(), rnd(1, 3));
  if (rnd(0, 1)) std::swap(a, b);
  return {a, b};
}

// Values of magnitude in [lo, hi) with a random sign: away from 0.
RefTensor away_from_zero(std::vector<int64_t> shape, double lo = 0.2, double hi = 1.5) {
  RefTensor x = rand_f(std::move(shape), lo, hi);
  for (double& v : x.data)
    if (rnd(0, 1)) v = -v;
  return x;
}

TEST(GradElementwise, UnaryOps) {
  for (int rep = 0; rep < 3; ++rep) {
    auto s = random_shape(rnd(0, 3), 1, 4);
    check_op_grad(OpKind::Neg, {rand_f(s)});
    check_op_grad(OpKind::Abs, {away_from_zero(s)});
    check_op_grad(OpKind::Exp, {rand_f(s, -2, 2)});
    check_op_grad(OpKind::Log, {rand_f(s, 0.2, 3)});
    check_op_grad(OpKind::Sqrt, {rand_f(s, 0.2, 3)});
    check_op_grad(OpKind::Rsqrt, {rand_f(s, 0.2, 3)});
    check_op_grad(OpKind::Tanh, {rand_f(s, -2, 2)});
    check_op_grad(OpKind::Sigmoid, {rand_f(s, -4, 4)});
    check_op_grad(OpKind::Relu, {away_from_zero(s)});
    check_op_grad(OpKind::Silu, {rand_f(s, -4, 4)});
    check_op_grad(OpKind::Erf, {rand_f(s, -2, 2)});
    check_op_grad(OpKind::Gelu, {rand_f(s, -3, 3)}, attrs({{"approximate", std::string("none")}}));
    check_op_grad(OpKind::Gelu, {rand_f(s, -3, 3)}, attrs({{"approximate", std::string("tanh")}}));
  }
}

TEST(GradElementwise, CastIsTheIdentityBackToTheInputDtype) {
  // cast to f32 rounds to f32, so the difference step is large (cast is linear between
  // roundings): eps 1e-2 leaves a rounding error of ~1e-8 / 1e-2; tolerance 1e-4.
  auto s = random_shape(rnd(1, 3), 1, 4);
  check_op_grad(OpKind::Cast, {rand_f(s)}, attrs({{"dtype", DType::F32}}), {}, 1e-2, 1e-4);
}

TEST(GradElementwise, BinaryOpsWithBroadcasting) {
  for (int rep = 0; rep < 6; ++rep) {
    auto [sa, sb] = broadcast_pair();
    check_op_grad(OpKind::Add, {rand_f(sa), rand_f(sb)});
    check_op_grad(OpKind::Sub, {rand_f(sa), rand_f(sb)});
    check_op_grad(OpKind::Mul, {rand_f(sa), rand_f(sb)});
    check_op_grad(OpKind::Div, {rand_f(sa), away_from_zero(sb, 0.5, 2)});
    check_op_grad(OpKind::Pow, {rand_f(sa, 0.3, 2), rand_f(sb, -2, 2)});
    // maximum / minimum: a and b at least 0.1 apart (no ties).
    RefTensor a = rand_f(sa, -1, 1), b = rand_f(sb, -1, 1);
    for (double& v : b.data) v = std::round(v * 5) / 5;
    for (double& v : a.data) v = std::round(v * 5) / 5 + (rnd(0, 1) ? 0.1 : -0.1);
    check_op_grad(OpKind::Maximum, {a, b});
    check_op_grad(OpKind::Minimum, {a, b});
    RefTensor cond = random_tensor(DType::Bool, rnd(0, 1) ? sa : sb);
    check_op_grad(OpKind::Where, {cond, rand_f(sa), rand_f(sb)});
  }
}

TEST(GradElementwise, MaximumSplitsTiesEvenly) {
  // At a tie the rule gives half to each side (documented in grads/elementwise.cc).
  RefTensor a(DType::F32, {3}), b(DType::F32, {3});
  a.data = {1, 2, 3};
  b.data = {1, 1, 4};
  OneOp o = build_op(OpKind::Maximum, {type_of(a), type_of(b)});
  Graph& g = o.g;
  auto s = add_op(g, OpKind::Sum, {Value{o.node, 0}}, {});
  std::vector<Value> grads = append_gradients(g, Value{*s, 0}, {Value{g.inputs[0], 0}, Value{g.inputs[1], 0}});
  g.outputs = {{"ga", grads[0], {}}, {"gb", grads[1], {}}};
  InterpResult r = interpret(g, {{"in0", a}, {"in1", b}});
  EXPECT_EQ(r.outputs.at("ga").data, (std::vector<double>{0.5, 1, 0}));
  EXPECT_EQ(r.outputs.at("gb").data, (std::vector<double>{0.5, 0, 1}));
}

Attrs reduce_attrs(int rank) {
  Ints axes;
  for (int d = 0; d < rank; ++d)
    if (rnd(0, 1)) axes.push_back(rnd(0, 1) ? d : d - rank);  // negative spellings too
  std::shuffle(axes.begin(), axes.end(), rng());
  return attrs({{"axes", axes}, {"keepdims", rnd(0, 1) == 1}});
}

TEST(GradReduce, SumMeanMaxOverRandomAxes) {
  for (int rep = 0; rep < 8; ++rep) {
    auto s = random_shape(rnd(0, 4), 1, 4);
    int rank = static_cast<int>(s.size());
    check_op_grad(OpKind::Sum, {rand_f(s)}, reduce_attrs(rank));
    check_op_grad(OpKind::Mean, {rand_f(s)}, reduce_attrs(rank));
    // Distinct values (a shuffled ramp) so that every maximum is unique.
    RefTensor x(DType::F32, s);
    for (int64_t i = 0; i < x.numel(); ++i) x[i] = 0.1 * static_cast<double>(i);
    std::shuffle(x.data.begin(), x.data.end(), rng());
    check_op_grad(OpKind::Max, {x}, reduce_attrs(rank));
  }
}

TEST(GradReduce, MaxSplitsTiesEvenly) {
  RefTensor x(DType::F32, {2, 3});
  x.data = {1, 3, 3, 2, 0, 1};
  OneOp o = build_op(OpKind::Max, {type_of(x)}, attrs({{"axes", Ints{1}}}));
  Graph& g = o.g;
  auto s = add_op(g, OpKind::Sum, {Value{o.node, 0}}, {});
  Value gx = append_gradients(g, Value{*s, 0}, {Value{g.inputs[0], 0}})[0];
  g.outputs = {{"gx", gx, {}}};
  EXPECT_EQ(interpret(g, {{"in0", x}}).outputs.at("gx").data, (std::vector<double>{0, 0.5, 0.5, 1, 0, 0}));
}

}  // namespace
}  // namespace modelc::test
