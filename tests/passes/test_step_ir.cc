// Tests of what the IR learned for train steps: the `state` op, the interpreter's feeds of
// states and micro-batched inputs and its evaluation of updates, the printer's state and
// update lines, and the verifier's checks of states, micro-batch names and updates.
#include <fmt/format.h>

#include "compiler/ir/printer.h"
#include "compiler/ir/verifier.h"
#include "tests/passes/train_step_harness.h"

namespace modelc::test {
namespace {

// w: f32[3] (param), m: f32[3] (state), x: f32[B, 3] (input, twice when `micro`);
// m' = m + sum over rows of x, w' = w - m'.
Graph stateful(bool micro) {
  Graph g;
  g.name = "s";
  g.dims = {{"B", std::nullopt, {}}};
  NodeId x0 = add_source(g, OpKind::Input, "x", f32({B, 3}));
  NodeId x1 = kNoNode;
  if (micro) {
    x1 = add_source(g, OpKind::Input, "x", f32({B, 3}));
    g.nodes[x0].attrs.set("micro", int64_t{0});
    g.nodes[x1].attrs.set("micro", int64_t{1});
  }
  NodeId w = add_source(g, OpKind::Param, "w", f32({3}));
  NodeId m = add_source(g, OpKind::State, "w.m", f32({3}));
  Attrs rows;
  rows.set("axes", Ints{0});
  Value s = op(g, OpKind::Sum, {Value{x0, 0}}, rows);
  if (micro) s = op(g, OpKind::Sub, {s, op(g, OpKind::Sum, {Value{x1, 0}}, rows)});
  Value nm = op(g, OpKind::Add, {Value{m, 0}, s});
  Value nw = op(g, OpKind::Sub, {Value{w, 0}, nm});
  g.updates = {{m, nm}, {w, nw}};
  g.outputs.push_back({"s", s, {}});
  return g;
}

TEST(StepIr, StateIsAnInternalSourceOp) {
  const OpInfo& info = op_info(OpKind::State);
  EXPECT_EQ(info.name, "state");
  EXPECT_EQ(info.fusion, FusionKind::Source);
  EXPECT_FALSE(info.callable);
  EXPECT_EQ(OpRegistry::get().find("state"), nullptr);
}

TEST(StepIr, InterpreterFeedsStatesAndEvaluatesUpdates) {
  Graph g = stateful(false);
  EXPECT_EQ(verify_graph(g), std::vector<std::string>{});
  int64_t n = rnd(1, 4);
  RefTensor x = random_tensor(DType::F32, {n, 3}), w = random_tensor(DType::F32, {3}), m = random_tensor(DType::F32, {3});
  InterpResult r = interpret(g, {{"x", x}, {"w", w}, {"w.m", m}});
  ASSERT_EQ(r.updates.size(), 2u);
  for (int64_t j = 0; j < 3; ++j) {
    double s = 0;
    for (int64_t i = 0; i < n; ++i) s += x[i * 3 + j];
    EXPECT_NEAR(r.updates.at("w.m")[j], m[j] + s, 1e-12);
    EXPECT_NEAR(r.updates.at("w")[j], w[j] - (m[j] + s), 1e-12);
  }
  EXPECT_EQ(r.dims.at("B"), n);
  expect_user_error([&] { interpret(g, {{"x", x}, {"w", w}}); }, "no value fed for state 'w.m'");
  expect_user_error([&] { interpret(g, {{"x", x}, {"w", w}, {"w.m", RefTensor(DType::F32, {4})}}); },
                    "state 'w.m': expected f32[3], got f32[4]");
}

TEST(StepIr, InterpreterSplitsMicroBatchedInputs) {
  Graph g = stateful(true);
  EXPECT_EQ(verify_graph(g), std::vector<std::string>{});
  int64_t n = rnd(1, 3);
  RefTensor x = random_tensor(DType::F32, {2 * n, 3}), w = random_tensor(DType::F32, {3}), m(DType::F32, {3});
  InterpResult r = interpret(g, {{"x", x}, {"w", w}, {"w.m", m}});
  EXPECT_EQ(r.dims.at("B"), n);  // B is the micro-batch
  for (int64_t j = 0; j < 3; ++j) {
    double first = 0, second = 0;
    for (int64_t i = 0; i < n; ++i) {
      first += x[i * 3 + j];
      second += x[(n + i) * 3 + j];
    }
    EXPECT_NEAR(r.outputs.at("s")[j], first - second, 1e-12);
  }
  expect_user_error([&] { interpret(g, {{"x", RefTensor(DType::F32, {3, 3})}, {"w", w}, {"w.m", m}}); },
                    "input 'x': f32[3,3] does not split along dim 0 into 2 micro-batches");
  expect_user_error([&] { interpret(g, {{"x", RefTensor(DType::F32, {})}, {"w", w}, {"w.m", m}}); },
                    "input 'x': f32[] does not split along dim 0 into 2 micro-batches");
}

TEST(StepIr, PrinterShowsStatesAndUpdates) {
  Graph g = stateful(true);
  EXPECT_EQ(print_graph(g),
            "model s(B)\n"
            "  %0 = input \"x\" : f32[B,3] {micro = 0}\n"
            "  %1 = input \"x\" : f32[B,3] {micro = 1}\n"
            "  %2 = param \"w\" : f32[3]\n"
            "  %3 = state \"w.m\" : f32[3]\n"
            "  %4 = sum(%0) {axes = [0], keepdims = false} : f32[3]\n"
            "  %5 = sum(%1) {axes = [0], keepdims = false} : f32[3]\n"
            "  %6 = sub(%4, %5) : f32[3]\n"
            "  %7 = add(%3, %6) : f32[3]\n"
            "  %8 = sub(%2, %7) : f32[3]\n"
            "  output s = %6\n"
            "  update w.m <- %7\n"
            "  update w <- %8\n");
}

TEST(StepIr, VerifierChecksUpdates) {
  Graph g = stateful(false);  // %0 x, %1 w, %2 w.m, %3 sum, %4 add, %5 sub
  NodeId w = g.params[0], m = g.states[0];
  Value s{3, 0};  // sum: f32[3]
  g.updates.push_back({w, s});                       // w updated twice
  g.updates.push_back({3, Value{4, 0}});             // target is a sum, not a param or state
  g.updates.push_back({99, s});                      // no such node
  g.updates.push_back({m, Value{}});                 // w.m twice and without a value
  g.updates.push_back({g.inputs[0], Value{42, 0}});  // an input, a value that does not exist
  Value scalar_sum = op(g, OpKind::Sum, {s});        // %6: f32[]
  g.updates.push_back({m, scalar_sum});              // wrong type (and w.m a third time)
  EXPECT_EQ(verify_graph(g), (std::vector<std::string>{
                                 "update of %1 (param) \"w\": updated twice",
                                 "update of %3 (sum) \"\": not a param or state node",
                                 "update of %99, which does not exist",
                                 "update of %2 (state) \"w.m\": updated twice",
                                 "update of %2 (state) \"w.m\": has no value",
                                 "update of %0 (input) \"x\": not a param or state node",
                                 "update of %0 (input) \"x\": refers to %42, which does not exist",
                                 "update of %2 (state) \"w.m\": updated twice",
                                 "update of %2 (state) \"w.m\": value %6 has type f32[], the target f32[3]",
                             }));
}

TEST(StepIr, VerifierChecksStatesAndMicroNames) {
  Graph g = stateful(true);
  g.states.clear();                                   // w.m not listed
  g.states.push_back(g.params[0]);                    // a param in the states list
  g.nodes[1].attrs.set("micro", int64_t{0});          // two inputs x for micro-batch 0
  add_source(g, OpKind::Param, "x", f32({3}));        // a param named like an input
  NodeId s2 = add_source(g, OpKind::State, "w.m", f32({3}));  // a duplicate state name
  NodeId bad = add_source(g, OpKind::Input, "y", f32({3}));
  g.nodes[bad].attrs.set("micro", std::string("one"));  // micro not an int
  EXPECT_EQ(verify_graph(g), (std::vector<std::string>{
                                 "graph states list %2 (param), which is not a state node",
                                 "duplicate name \"x\": %0 (input) and %1 (input)",
                                 "%3 (state) \"w.m\" is not in the graph's states list",
                                 "duplicate name \"x\": %0 (input) and %9 (param)",
                                 fmt::format("duplicate name \"w.m\": %3 (state) and %{} (state)", s2),
                                 "%11 (input) \"y\": attribute micro must be a non-negative int, got \"one\"",
                             }));
}

}  // namespace
}  // namespace modelc::test
