// The autodiff pass itself: every op either has a gradient rule or its record says why not;
// gradients of a value used twice add up; values the loss does
// not reach get zeros; the errors (a loss that is not a float scalar, an op without a
// rule on the path) name what is wrong.
#include "tests/grad/grad_check.h"

namespace modelc::test {
namespace {

// Every record has a rule or says why it has none (the registry also refuses a record with
// neither or both when it is built): a missing rule is a decision, never an omission. A
// composite op has no rule: it never reaches autodiff, its parts do; it may still say why
// its result has no gradient (argmax's positions).
TEST(Autodiff, EveryOpHasAGradientRuleOrSaysWhyNot) {
  for (const OpInfo& op : OpRegistry::get().all()) {
    if (op.math == MathKind::Composite) {
      EXPECT_FALSE(op.grad) << op.name;
    } else {
      EXPECT_NE(static_cast<bool>(op.grad), !op.no_grad.empty()) << op.name;
    }
  }
}

struct Built {
  Graph g;
  Value x, y;
};

// x: f32[n], y = x * x + x (x used three times); loss = sum(y).
Built square_plus(int64_t n) {
  Built b;
  Node in;
  in.op = OpKind::Input;
  in.name = "x";
  in.outputs = {f32({Dim(n)})};
  b.x = Value{b.g.add(std::move(in)), 0};
  b.g.inputs.push_back(b.x.node);
  Value sq{*add_op(b.g, OpKind::Mul, {b.x, b.x}, {}), 0};
  b.y = Value{*add_op(b.g, OpKind::Add, {sq, b.x}, {}), 0};
  return b;
}

TEST(Autodiff, ContributionsOfAValueUsedSeveralTimesAddUp) {
  int64_t n = rnd(1, 6);
  Built b = square_plus(n);
  Value loss{*add_op(b.g, OpKind::Sum, {b.y}, {}), 0};
  Value gx = append_gradients(b.g, loss, {b.x})[0];
  b.g.outputs = {{"gx", gx, {}}};
  EXPECT_TRUE(verify_graph(b.g).empty());
  RefTensor x = rand_f({n});
  RefTensor got = interpret(b.g, {{"x", x}}).outputs.at("gx");
  for (int64_t i = 0; i < n; ++i) EXPECT_NEAR(got[i], 2 * x[i] + 1, 1e-15);
}

TEST(Autodiff, UnreachedValuesGetZerosOfTheirType) {
  Built b = square_plus(3);
  Node other;
  other.op = OpKind::Input;
  other.name = "z";
  other.outputs = {TensorType{DType::F32, {Dim(2), Dim(5)}}};
  Value z{b.g.add(std::move(other)), 0};
  b.g.inputs.push_back(z.node);
  Node ids;
  ids.op = OpKind::Input;
  ids.name = "ids";
  ids.outputs = {TensorType{DType::I32, {Dim(4)}}};
  Value id{b.g.add(std::move(ids)), 0};
  b.g.inputs.push_back(id.node);
  Value loss{*add_op(b.g, OpKind::Sum, {b.y}, {}), 0};
  std::vector<Value> gs = append_gradients(b.g, loss, {z, id, loss});
  EXPECT_EQ(b.g.type(gs[0]), b.g.type(z));
  EXPECT_EQ(b.g.type(gs[1]), b.g.type(id));
  b.g.outputs = {{"gz", gs[0], {}}, {"gid", gs[1], {}}, {"gl", gs[2], {}}};
  EXPECT_TRUE(verify_graph(b.g).empty());
  InterpResult r = interpret(b.g, {{"x", rand_f({3})}, {"z", rand_f({2, 5})}, {"ids", rand_ids({4}, 3)}});
  EXPECT_EQ(r.outputs.at("gz").data, std::vector<double>(10, 0.0));
  EXPECT_EQ(r.outputs.at("gid").data, std::vector<double>(4, 0.0));
  EXPECT_EQ(r.outputs.at("gl").data, std::vector<double>{1.0});
}

TEST(Autodiff, TheLossMustBeAFloatScalar) {
  Built b = square_plus(3);
  try {
    append_gradients(b.g, b.y, {b.x});
    ADD_FAILURE() << "no error";
  } catch (const UserError& e) {
    EXPECT_EQ(std::string(e.what()), "autodiff: the loss must be a float scalar, got f32[3] (%2 add)");
  }
  Value s{*add_op(b.g, OpKind::Sum, {b.y}, {}), 0};
  Value as_int{*add_op(b.g, OpKind::Cast, {s}, attrs({{"dtype", DType::I32}})), 0};
  EXPECT_THROW(append_gradients(b.g, as_int, {b.x}), UserError);
}

TEST(Autodiff, AnOpWithoutARuleOnThePathIsAnErrorNamingItAndItsPlace) {
  // A gradient op has no rule (no second derivatives): differentiating through one fails.
  Graph g;
  Node w;
  w.op = OpKind::Input;
  w.name = "w";
  w.outputs = {f32({Dim(4), Dim(3)})};
  Value wv{g.add(std::move(w)), 0};
  g.inputs.push_back(wv.node);
  Node ids;
  ids.op = OpKind::Input;
  ids.name = "ids";
  ids.outputs = {TensorType{DType::I32, {Dim(2)}}};
  Value iv{g.add(std::move(ids)), 0};
  g.inputs.push_back(iv.node);
  auto e = add_op(g, OpKind::Embedding, {iv, wv}, {});
  SourceLoc loc{1, 7, 12};
  auto eg = add_op(g, OpKind::EmbeddingGrad, {iv, Value{*e, 0}}, attrs({{"rows", int64_t{5}}}), loc);
  g.nodes[*eg].scope = "block.1";
  auto loss = add_op(g, OpKind::Sum, {Value{*eg, 0}}, {});
  // With a source location the error is at it (the message names the def instance and the
  // record's reason); without one the message says where the node is.
  try {
    append_gradients(g, Value{*loss, 0}, {wv});
    ADD_FAILURE() << "no error";
  } catch (const SourceError& err) {
    EXPECT_EQ(err.loc, loc);
    EXPECT_EQ(std::string(err.what()), "autodiff: the loss cannot be differentiated through op 'embedding_grad' in "
                                       "block.1: a gradient op (gradients are first-order)");
  }
  g.nodes[*eg].loc = SourceLoc{};
  try {
    append_gradients(g, Value{*loss, 0}, {wv});
    ADD_FAILURE() << "no error";
  } catch (const SourceError& err) {
    EXPECT_FALSE(err.loc.valid());
    EXPECT_EQ(std::string(err.what()), "autodiff: the loss cannot be differentiated through op 'embedding_grad' "
                                       "(%3 in block.1): a gradient op (gradients are first-order)");
  }
  // Off the path (nothing requested flows through it), the same op is no problem.
  Node other;
  other.op = OpKind::Input;
  other.name = "v";
  other.outputs = {f32({})};
  Value v{g.add(std::move(other)), 0};
  g.inputs.push_back(v.node);
  Value total{*add_op(g, OpKind::Add, {Value{*loss, 0}, v}, {}), 0};
  EXPECT_NO_THROW(append_gradients(g, total, {v}));
}

TEST(Autodiff, SymbolicShapesVerifyAndRun) {
  // A graph over a symbolic batch: mean's count becomes a sum of ones, broadcasts reduce.
  Graph g;
  g.dims = {{"B", std::nullopt, {}}};
  Node x;
  x.op = OpKind::Input;
  x.name = "x";
  x.outputs = {f32({B, Dim(3)})};
  Value xv{g.add(std::move(x)), 0};
  g.inputs.push_back(xv.node);
  Node w;
  w.op = OpKind::Param;
  w.name = "w";
  w.outputs = {f32({Dim(3)})};
  Value wv{g.add(std::move(w)), 0};
  g.params.push_back(wv.node);
  Value t{*add_op(g, OpKind::Tanh, {Value{*add_op(g, OpKind::Mul, {xv, wv}, {}), 0}}, {}), 0};
  Value loss{*add_op(g, OpKind::Mean, {t}, {}), 0};
  g.outputs = {{"loss", loss, {}}};
  int64_t n = rnd(1, 5);
  check_graph_grads(g, "loss", {{"x", rand_f({n, 3})}, {"w", rand_f({3})}}, {"x", "w"});
}

TEST(Autodiff, ARuleThatNeedsAKnownExtentSaysSoOnASymbolicOne) {
  // concat's gradient slices at integer offsets: a symbolic extent before the last input
  // cannot be cut.
  Graph g;
  g.dims = {{"B", std::nullopt, {}}};
  std::vector<Value> xs;
  for (const char* name : {"a", "b"}) {
    Node x;
    x.op = OpKind::Input;
    x.name = name;
    x.outputs = {f32({B, Dim(2)})};
    xs.push_back(Value{g.add(std::move(x)), 0});
    g.inputs.push_back(xs.back().node);
  }
  auto cat = add_op(g, OpKind::Concat, xs, attrs({{"axis", int64_t{0}}}), SourceLoc{1, 3, 9});
  auto loss = add_op(g, OpKind::Sum, {Value{*cat, 0}}, {});
  try {
    append_gradients(g, Value{*loss, 0}, xs);
    ADD_FAILURE() << "no error";
  } catch (const UserError& e) {
    EXPECT_EQ(std::string(e.what()), "autodiff: the gradient of concat (%2 at line 3, column 9) needs a known "
                                     "extent along the concat axis, got B");
  }
}

}  // namespace
}  // namespace modelc::test
