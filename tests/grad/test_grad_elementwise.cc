// The gradients at the non-smooth points of elementwise and reduction ops, where central
// differences cannot check them: a tie of maximum splits the gradient evenly, as does a tie
// of the max reduction (documented in their records). Every op's gradient away from such
// points is checked against central differences by tests/conformance, on its test domain.
#include "tests/grad/grad_check.h"

namespace modelc::test {
namespace {

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
