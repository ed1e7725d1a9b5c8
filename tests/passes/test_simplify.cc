// Tests of simplification (compiler/passes/simplify.h): on graphs built with dead nodes,
// duplicated reductions and library calls, duplicated elementwise chains and all-constant
// subexpressions, the reference interpreter gives exactly the original's outputs and updates
// on fresh random inputs (tolerance 0: the kept nodes compute the same values, and a fold of
// f64 constants is what the interpreter computes); what is folded, merged and removed is
// counted, sources survive, the result verifies, and a train step of char_gpt loses nothing
// it computes.
#include <gtest/gtest.h>

#include "compiler/ir/interpreter.h"
#include "compiler/ir/verifier.h"
#include "compiler/passes/simplify.h"
#include "compiler/passes/train_step.h"
#include "tests/ir/op_harness.h"
#include "tests/passes/train_step_harness.h"

namespace modelc::test {
namespace {

Value constant(Graph& g, double v, DType t = DType::F32) {
  Node n;
  n.op = OpKind::Constant;
  n.attrs.set("value", v);
  n.outputs = {TensorType{t, {}}};
  return Value{g.add(std::move(n)), 0};
}

void output(Graph& g, const std::string& name, Value v) { g.outputs.push_back({name, v, {}}); }

std::map<std::string, RefTensor> feeds(const Graph& g, int64_t batch) {
  std::map<std::string, RefTensor> f;
  for (const Node& n : g.nodes) {
    if (n.op != OpKind::Input && n.op != OpKind::Param && n.op != OpKind::State) continue;
    f.emplace(n.name, random_tensor(n.outputs[0].dtype, concrete_shape(n.outputs[0].shape, {{"B", batch}})));
  }
  return f;
}

void expect_same(const Graph& a, const Graph& b) {
  for (int round = 0; round < 3; ++round) {
    const auto f = feeds(a, rnd(1, 5));
    InterpResult ra = interpret(a, f), rb = interpret(b, f);
    ASSERT_EQ(ra.outputs.size(), rb.outputs.size());
    for (const auto& [name, t] : ra.outputs) expect_near(rb.outputs.at(name), t, 0, name);
    for (const auto& [name, t] : ra.updates) expect_near(rb.updates.at(name), t, 0, name);
  }
}

TEST(Simplify, FoldsMergesAndRemovesWithoutChangingAValue) {
  Graph g;
  g.name = "m";
  g.dims.push_back({"B", std::nullopt, {}});
  const Value x{add_source(g, OpKind::Input, "x", f32({B, 6})), 0};
  const Value w{add_source(g, OpKind::Param, "w", f32({6, 4})), 0};
  add_source(g, OpKind::Param, "unused", f32({3}));  // a source nothing reads: kept
  // Two matmuls and two sums of the same values: one each remains.
  const Value m1 = op(g, OpKind::Matmul, {x, w}), m2 = op(g, OpKind::Matmul, {x, w});
  const Value s1 = op(g, OpKind::Sum, {m1}), s2 = op(g, OpKind::Sum, {m2});
  // (2 * 3) + 1 folds to the constant 7; its broadcast_to folds too.
  const Value c = op(g, OpKind::Add, {op(g, OpKind::Mul, {constant(g, 2), constant(g, 3)}), constant(g, 1)});
  const Value cb = op(g, OpKind::BroadcastTo, {c}, attrs({{"shape", Shape{B, 4}}}));
  // Two relus of the same matmul: elementwise duplicates are left to fusion.
  const Value r1 = op(g, OpKind::Relu, {m1}), r2 = op(g, OpKind::Relu, {m2});
  // Dead: a chain nothing reads.
  op(g, OpKind::Sum, {op(g, OpKind::Exp, {x})});
  output(g, "a", op(g, OpKind::Add, {s1, s2}));
  output(g, "b", op(g, OpKind::Mul, {op(g, OpKind::Add, {r1, r2}), cb}));
  ASSERT_TRUE(verify_graph(g).empty()) << verify_graph(g).front();

  SimplifyStats st;
  const Graph out = simplify(g, &st);
  EXPECT_TRUE(verify_graph(out).empty()) << verify_graph(out).front();
  EXPECT_EQ(st.merged, 2u);  // the second matmul, the second sum
  EXPECT_EQ(st.folded, 3u);  // mul, add, broadcast_to
  int matmuls = 0, sums = 0, relus = 0, exps = 0;
  for (const Node& n : out.nodes) {
    matmuls += n.op == OpKind::Matmul;
    sums += n.op == OpKind::Sum;
    relus += n.op == OpKind::Relu;
    exps += n.op == OpKind::Exp;
  }
  EXPECT_EQ(matmuls, 1);
  EXPECT_EQ(sums, 1);
  EXPECT_EQ(relus, 2);
  EXPECT_EQ(exps, 0);
  EXPECT_TRUE(out.find_param("unused").has_value());
  EXPECT_EQ(out.inputs.size(), 1u);
  // Every node is kept, merged or removed (the folded nodes' constant inputs are removed).
  EXPECT_EQ(out.nodes.size() + st.removed + st.merged, g.nodes.size());
  EXPECT_EQ(st.removed, 2u + 5u);  // sum(exp(x)), and the constants 2, 3, 1, 6 and 7
  expect_same(g, out);
}

// keep_inputs = false (the predict function): an input nothing reads is removed with the nodes
// that read it only for dead values, and the graph's input list follows; params stay.
TEST(Simplify, WithoutKeepInputsAnUnreadInputIsRemoved) {
  Graph g;
  g.name = "m";
  g.dims.push_back({"B", std::nullopt, {}});
  const Value x{add_source(g, OpKind::Input, "x", f32({B, 6})), 0};
  const Value y{add_source(g, OpKind::Input, "y", f32({B, 6})), 0};
  const Value z{add_source(g, OpKind::Input, "z", f32({B, 6})), 0};
  add_source(g, OpKind::Param, "unused", f32({3}));
  op(g, OpKind::Sum, {op(g, OpKind::Mul, {x, y})});  // dead: y's only reader
  output(g, "out", op(g, OpKind::Add, {x, z}));
  ASSERT_TRUE(verify_graph(g).empty()) << verify_graph(g).front();
  EXPECT_EQ(simplify(g).inputs.size(), 3u);
  const Graph out = simplify(g, nullptr, /*keep_inputs=*/false);
  EXPECT_TRUE(verify_graph(out).empty()) << verify_graph(out).front();
  std::vector<std::string> names;
  for (NodeId id : out.inputs) names.push_back(out.nodes[id].name);
  EXPECT_EQ(names, (std::vector<std::string>{"x", "z"}));
  EXPECT_TRUE(out.find_param("unused").has_value());
  for (const Node& n : out.nodes) EXPECT_NE(n.name, "y");
}

TEST(Simplify, ATrainStepComputesTheSameAndVerifies) {
  for (bool ce : {false, true}) {
    TinyModel m = tiny_model(5, 3, ce);
    TrainStepOptions o;
    o.optimizer = "adamw";
    o.clip_grad_norm = 1.0;
    const Graph step = build_train_step(m.g, o);
    SimplifyStats st;
    const Graph out = simplify(step, &st);
    EXPECT_TRUE(verify_graph(out).empty());
    EXPECT_EQ(out.updates.size(), step.updates.size());
    EXPECT_EQ(out.params.size(), step.params.size());
    for (int round = 0; round < 2; ++round) {
      const Tensors batch = random_batch(m, rnd(1, 4)), params = random_params(m);
      InterpResult a = run_step(step, batch, params, {}, 0.1, round + 1), b = run_step(out, batch, params, {}, 0.1, round + 1);
      for (const auto& [name, t] : a.outputs) expect_near(b.outputs.at(name), t, 0, name);
      for (const auto& [name, t] : a.updates) expect_near(b.updates.at(name), t, 0, name);
    }
  }
}

}  // namespace
}  // namespace modelc::test
