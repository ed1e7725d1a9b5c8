// Tests of the IR printer (exact text) and the verifier (every problem of a broken graph
// reported, none for a well-formed one). Graphs are built by hand so that they can be
// broken on purpose; only the shape ops' rules are needed.
#include "compiler/ir/printer.h"
#include "compiler/ir/verifier.h"
#include "tests/ir/op_harness.h"

namespace modelc::test {
namespace {

Node node(OpKind op, std::vector<Value> inputs, std::vector<TensorType> outputs, Attrs attrs = {}) {
  Node n;
  n.op = op;
  n.inputs = std::move(inputs);
  n.outputs = std::move(outputs);
  n.attrs = std::move(attrs);
  return n;
}

NodeId add_source(Graph& g, OpKind op, const std::string& name, TensorType t, bool list = true) {
  Node n = node(op, {}, {std::move(t)});
  n.name = name;
  NodeId id = g.add(std::move(n));
  if (list) (op == OpKind::Input ? g.inputs : g.params).push_back(id);
  return id;
}

std::string join(const std::vector<std::string>& v) {
  std::string s;
  for (const std::string& x : v) s += x + "\n";
  return s;
}

// --- printer --------------------------------------------------------------------------

TEST(Printer, Example) {
  SourceManager sm;
  uint32_t file = sm.add("models/char_gpt.model", std::string(10, '\n'));
  Graph g;
  g.name = "char_gpt";
  g.dims = {{"B", std::nullopt, {}}, {"T", 128, {}}, {"C", 192, {}}};
  NodeId tokens = add_source(g, OpKind::Input, "tokens", TensorType{DType::I32, {B, 128}});
  Node wte = node(OpKind::Param, {}, {f32({96, 192})}, attrs({{"init", std::string("normal")}, {"std", 0.02}}));
  wte.name = "wte";
  g.params.push_back(g.add(std::move(wte)));
  Node emb = node(OpKind::Embedding, {{tokens, 0}, {1, 0}}, {f32({B, 128, 192})});
  emb.scope = "block.0";
  emb.loc = {file, 8, 7};
  g.add(std::move(emb));
  g.add(node(OpKind::Split, {{2, 0}}, std::vector<TensorType>(3, f32({B, 128, 64})),
             attrs({{"sections", int64_t{3}}, {"axis", int64_t{2}}})));
  Node add = node(OpKind::Add, {{3, 0}, {3, 1}}, {f32({B, 128, 64})});
  add.checkpoint = true;
  add.loc = {file, 9, 3};
  g.add(std::move(add));
  Node ln = node(OpKind::LayerNorm, {{2, 0}, {}, {}}, {f32({B, 128, 192})}, attrs({{"eps", 1e-5}}));
  ln.scope = "block.0/ln";
  ln.checkpoint = true;
  g.add(std::move(ln));
  g.add(node(OpKind::Constant, {}, {f32({})}, attrs({{"value", 1.0}})));
  g.outputs.push_back({"loss", {5, 0}, {}});
  g.outputs.push_back({"part", {3, 2}, {}});

  const std::string body =
      "  %0 = input \"tokens\" : i32[B,128]\n"
      "  %1 = param \"wte\" : f32[96,192] {init = \"normal\", std = 0.02}\n"
      "  %2 = embedding(%0, %1) : f32[B,128,192]  @block.0{loc2}\n"
      "  %3:3 = split(%2) {sections = 3, axis = 2} : (f32[B,128,64], f32[B,128,64], f32[B,128,64])\n"
      "  %4 = add(%3#0, %3#1) : f32[B,128,64] [checkpoint]{loc4}\n"
      "  %5 = layer_norm(%2, _, _) {eps = 1e-05} : f32[B,128,192]  @block.0/ln [checkpoint]\n"
      "  %6 = constant() {value = 1.0} : f32[]\n"
      "  output loss = %5\n"
      "  output part = %3#2\n";
  auto fill = [&](std::string s, const std::string& l2, const std::string& l4) {
    s.replace(s.find("{loc2}"), 6, l2);
    s.replace(s.find("{loc4}"), 6, l4);
    return "model char_gpt(B, T = 128, C = 192)\n" + s;
  };
  EXPECT_EQ(print_graph(g), fill(body, "", ""));
  EXPECT_EQ(print_graph(g, &sm),
            fill(body, "  # models/char_gpt.model:8:7", "  # models/char_gpt.model:9:3"));
  EXPECT_EQ(print_graph(g, &sm), print_graph(g, &sm));  // deterministic
}

TEST(Printer, EmptyGraphAndValues) {
  Graph g;
  g.name = "empty";
  EXPECT_EQ(print_graph(g), "model empty()\n");
  add_source(g, OpKind::Input, "x", f32({2}));
  EXPECT_EQ(value_str(g, Value{}), "_");
  EXPECT_EQ(value_str(g, {0, 0}), "%0");
  EXPECT_EQ(value_str(g, {0, 1}), "%0#1");
  EXPECT_EQ(value_str(g, {7, 0}), "%7#0");  // a node that does not exist
}

TEST(Printer, BrokenGraphPrintsWithoutThrowing) {
  Graph g;
  g.name = "broken";
  g.add(node(OpKind::Transpose, {{5, 0}}, {}));
  g.outputs.push_back({"y", {9, 2}, {}});
  EXPECT_EQ(print_graph(g), "model broken()\n  %0:0 = transpose(%5#0) : ()\n  output y = %9#2\n");
}

// --- verifier -------------------------------------------------------------------------

TEST(Verifier, WellFormedGraphHasNoProblems) {
  Graph g;
  g.name = "ok";
  g.dims = {{"B", std::nullopt, {}}, {"T", std::nullopt, {}}};
  NodeId x = add_source(g, OpKind::Input, "x", f32({B, T, 12}));
  NodeId w = add_source(g, OpKind::Param, "w", f32({12, 36}));
  auto op = [&](OpKind k, std::vector<Value> in, Attrs a = {}) {
    InferFailure f;
    auto id = add_op(g, k, std::move(in), std::move(a), {}, &f);
    EXPECT_TRUE(id) << f.message;
    return id ? *id : kNoNode;
  };
  NodeId h = op(OpKind::Matmul, {{x, 0}, {w, 0}});
  NodeId qkv = op(OpKind::Split, {{h, 0}}, attrs({{"sections", int64_t{3}}}));
  NodeId kt = op(OpKind::Transpose, {{qkv, 1}});
  NodeId s = op(OpKind::Matmul, {{qkv, 0}, {kt, 0}});
  NodeId cat = op(OpKind::Concat, {{s, 0}, {s, 0}}, attrs({{"axis", int64_t{-1}}}));
  NodeId r = op(OpKind::Reshape, {{cat, 0}}, attrs({{"shape", Shape{-1, T * 2}}}));
  NodeId sl = op(OpKind::Slice, {{r, 0}}, attrs({{"axis", int64_t{1}}, {"start", int64_t{0}}, {"end", int64_t{1}}}));
  g.outputs.push_back({"y", {sl, 0}, {}});
  g.outputs.push_back({"v", {qkv, 2}, {}});
  EXPECT_EQ(join(verify_graph(g)), "");
  // a node built by hand with an uncanonical attribute still verifies: the rule runs on a copy
  g.add(node(OpKind::Transpose, {{x, 0}}, {f32({B, 12, T})}, attrs({{"dim0", int64_t{-2}}, {"dim1", int64_t{2}}})));
  EXPECT_EQ(join(verify_graph(g)), "");
  EXPECT_EQ(g.nodes.back().attrs.i("dim0"), -2);
}

TEST(Verifier, ReportsEveryProblem) {
  Graph g;
  g.name = "broken";
  g.dims = {{"B", std::nullopt, {}}, {"B", 4, {}}};
  NodeId x = add_source(g, OpKind::Input, "x", f32({B, 3}));                     // %0
  NodeId w = add_source(g, OpKind::Param, "w", f32({3, 4}));                      // %1
  g.add(node(OpKind::Matmul, {{x, 0}, {w, 0}}, {f32({B, 5})}));                   // %2 wrong type
  g.add(node(OpKind::Matmul, {{x, 0}, {90, 0}}, {f32({B, 4})}));                  // %3 no such node
  g.add(node(OpKind::Transpose, {{5, 0}}, {f32({3, B})}));                        // %4 later node
  g.add(node(OpKind::Transpose, {{2, 1}}, {f32({3, B})}));                        // %5 no such output
  g.add(node(OpKind::Matmul, {{x, 0}, {}}, {f32({B, 4})}));                       // %6 missing input
  g.add(node(OpKind::Split, {{x, 0}}, {f32({B, 1}), f32({B, 1})},
             attrs({{"sections", int64_t{2}}, {"axis", int64_t{1}}})));           // %7 rule rejects
  g.add(node(OpKind::Split, {{x, 0}}, {f32({B, 1}), f32({B, 1})},
             attrs({{"sections", int64_t{3}}, {"axis", int64_t{1}}})));           // %8 output count
  g.add(node(OpKind::Split, {{x, 0}}, {f32({B, 1}), f32({B, 2}), f32({B, 1})},
             attrs({{"sections", int64_t{3}}, {"axis", int64_t{1}}})));           // %9 second type
  add_source(g, OpKind::Input, "x", f32({B, 3}));                                 // %10 duplicate name
  add_source(g, OpKind::Param, "b", f32({4}), /*list=*/false);                    // %11 not listed
  add_source(g, OpKind::Input, "y", f32({Dim::symbol("Q"), Dim::symbol("Q") * 2}));  // %12 unknown symbol
  g.add(node(OpKind::Slice, {{x, 0}}, {f32({B, 1})}, attrs({{"axis", int64_t{1}}})));  // %13 attr missing
  g.add(node(OpKind::Matmul, {{x, 0}, {w, 0}, {w, 0}}, {f32({B, 4})}));           // %14 arity
  g.add(node(OpKind::Concat, {}, {f32({B, 3})}, attrs({{"axis", int64_t{0}}})));  // %15 empty list
  g.add(node(OpKind::Reshape, {{x, 0}}, {f32({B, 3})}, attrs({{"shape", Shape{Dim::symbol("R"), 3}}})));  // %16
  Node bad_input = node(OpKind::Input, {{x, 0}}, {f32({B}), f32({B})});           // %17
  bad_input.name = "z";
  g.inputs.push_back(g.add(std::move(bad_input)));
  g.inputs.push_back(w);
  g.params.push_back(99);
  g.params.push_back(w);
  g.outputs.push_back({"loss", {40, 0}, {}});
  g.outputs.push_back({"loss", {2, 0}, {}});
  g.outputs.push_back({"z", {9, 5}, {}});
  g.outputs.push_back({"none", {}, {}});

  const std::vector<std::string> want = {
      "dimension 'B' is declared twice",
      "%2 (matmul): stored type f32[B,5] but the rule gives f32[B,4]",
      "%3 (matmul): input 1 refers to %90, which does not exist",
      "%4 (transpose): input 0 refers to %5, which is not defined before it",
      "%5 (transpose): input 0 refers to %2#1, but %2 has 1 output",
      "%6 (matmul): input 1 (b) is missing",
      "%7 (split): the shape rule rejects it: split cannot divide axis 1 of f32[B,3] (3) into 2 equal sections",
      "%8 (split): stored 2 outputs but the rule gives 3",
      "%9#1 (split): stored type f32[B,2] but the rule gives f32[B,1]",
      "%12 (input): symbol 'Q' is not a dimension of the model",
      "%13 (slice): the shape rule cannot run: internal error: attribute 'start' missing or of the wrong type",
      "%14 (matmul): has 3 inputs, which does not fit its signature (a: tensor, b: tensor)",
      "%15 (concat): the shape rule rejects it: concat needs at least one tensor",
      "%16 (reshape): symbol 'R' is not a dimension of the model",
      "%16 (reshape): the shape rule rejects it: reshape cannot change the number of elements: f32[B,3] has 3*B, "
      "[R,3] has 3*R",
      "%17 (input): has 1 inputs, expected none",
      "%17 (input): has 2 outputs, expected 1",
      "graph inputs list %1 (param), which is not an input node",
      "graph params list %99, which does not exist",
      "graph params list %1 twice",
      "duplicate name \"x\": %0 (input) and %10 (input)",
      "%11 (param) \"b\" is not in the graph's params list",
      "output \"loss\" refers to %40, which does not exist",
      "duplicate output name \"loss\"",
      "output \"z\" refers to %9#5, but %9 has 3 outputs",
      "output \"none\" has no value",
  };
  EXPECT_EQ(join(verify_graph(g)), join(want));
}

TEST(Verifier, UnknownOpKindDoesNotStopTheCheck) {
  Graph g;
  g.name = "m";
  g.add(node(static_cast<OpKind>(9999), {}, {f32({2})}));
  g.add(node(OpKind::Transpose, {{0, 0}}, {f32({2})}));
  std::vector<std::string> p = verify_graph(g);
  ASSERT_EQ(p.size(), 2u) << join(p);
  EXPECT_EQ(p[0], "%0: unknown op kind 9999");
  EXPECT_EQ(p[1], "%1 (transpose): the shape rule rejects it: transpose dim0 -2 is out of range for f32[2]");
}

}  // namespace
}  // namespace modelc::test
