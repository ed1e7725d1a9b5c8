// Tests of rematerialization (compiler/passes/recompute.h): on a small MLP with dropout and on
// two transformer-like blocks (layer_norm, matmul, causal softmax attention, gelu, dropout), the
// reference interpreter (training, a random seed and step) on the recomputed train step gives
// bit for bit the loss, grad_norm and updated params and states of the original, for random
// drop sets, the @checkpoint policy and the sqrt(n) policy (the clones run the same ops on the
// same values in double precision, so the tolerance is 0); clones sit after the forward and just
// before their first backward reader; a recomputed dropout draws the original's mask; sources
// and backward nodes cannot be dropped; and the FLOP estimate follows its rules.
#include <fmt/format.h>

#include <set>

#include "compiler/ir/printer.h"
#include "compiler/ir/verifier.h"
#include "compiler/passes/recompute.h"
#include "tests/passes/train_step_harness.h"

namespace modelc::test {
namespace {

// Adds nodes under a scope, marked @checkpoint or not, as sema would.
struct Builder {
  Graph& g;
  std::string scope;
  bool checkpoint = false;

  Value op(OpKind k, std::vector<Value> in, Attrs a = {}) {
    Value v = test::op(g, k, std::move(in), std::move(a));
    g.nodes[v.node].scope = scope;
    g.nodes[v.node].checkpoint = checkpoint;
    return v;
  }
  Value param(const std::string& name, TensorType t) {
    std::string full = scope.empty() ? name : scope + "." + name;
    NodeId id = add_source(g, OpKind::Param, full, std::move(t));
    g.nodes[id].scope = scope;
    return Value{id, 0};
  }
  Value constant(double v) {
    Node n;
    n.op = OpKind::Constant;
    n.attrs.set("value", v);
    n.outputs = {TensorType{DType::F32, {}}};
    n.scope = scope;
    n.checkpoint = checkpoint;
    return Value{g.add(std::move(n)), 0};
  }
  // Dropout with p = 0.5 (a wrong mask changes half the elements) and a site key.
  Value dropout(Value x, int64_t key) { return op(OpKind::Dropout, {x}, attrs({{"p", 0.5}, {"key", key}})); }
  Value linear(Value x, const std::string& name, int64_t in, int64_t out, bool bias) {
    Value y = op(OpKind::Matmul, {x, param(name + ".w", f32({in, out}))});
    return bias ? op(OpKind::Add, {y, param(name + ".b", f32({out}))}) : y;
  }
};

// A test model: the forward graph, its parameter types (for random values) and input shapes.
struct Model {
  Graph g;
  std::vector<int64_t> x_tail, y_tail;  // the extents of the inputs x and y after B
  NodeId boundary = kNoNode;  // transformer: the output of block.0
  NodeId inside = kNoNode;    // transformer: block.1's softmax (an inside node of a region)
  NodeId op_level = kNoNode;  // mlp: the dropout called as `@checkpoint dropout(...)`
};

// The id in the train step of forward node `id` of the model's micro-batch 0 copy: the step
// puts its inputs ($lr and $t among them) first, then copies the model's other nodes in
// order (all of them: every node of these models feeds the loss).
NodeId step_id(const Model& m, const Graph& step, NodeId id) {
  NodeId s = id - static_cast<NodeId>(m.g.inputs.size()) + static_cast<NodeId>(step.inputs.size());
  EXPECT_EQ(step.node(s).op, m.g.node(id).op);
  EXPECT_EQ(step.node(s).scope, m.g.node(id).scope);
  return s;
}

Value mse(Builder& b, Value pred, Value y) {
  Value r = b.op(OpKind::Sub, {pred, y});
  return b.op(OpKind::Mean, {b.op(OpKind::Mul, {r, r})});
}

// x: f32[B, I] -> relu(linear) -> dropout -> gelu(linear) [layer.1, @checkpoint] ->
// @checkpoint dropout -> linear -> mean squared error against y: f32[B, O].
Model mlp() {
  Model m;
  int64_t I = rnd(2, 4), H = rnd(3, 5), O = rnd(1, 3);
  m.x_tail = {I};
  m.y_tail = {O};
  m.g.name = "mlp";
  m.g.dims = {{"B", std::nullopt, {}}};
  Value x{add_source(m.g, OpKind::Input, "x", f32({B, I})), 0};
  Value y{add_source(m.g, OpKind::Input, "y", f32({B, O})), 0};
  Builder l0{m.g, "layer.0"}, l1{m.g, "layer.1", true}, top{m.g, ""};
  Value h = l0.dropout(l0.op(OpKind::Relu, {l0.linear(x, "fc", I, H, true)}), 11);
  h = l1.op(OpKind::Gelu, {l1.linear(h, "fc", H, H, true)});
  Builder at{m.g, "", true};
  h = at.dropout(h, 12);
  m.op_level = h.node;
  m.g.outputs.push_back({"loss", mse(top, top.linear(h, "out", H, O, false), y), {}});
  return m;
}

// A pre-norm transformer block on f32[B, T, C]: causal single-head attention with dropout on
// the probabilities, then a gelu MLP with dropout, both residual.
Value block(Builder& b, Value x, int64_t T, int64_t C, int64_t key, NodeId* softmax) {
  (void)T;
  Value h = b.op(OpKind::LayerNorm, {x, b.param("ln1.w", f32({C})), b.param("ln1.b", f32({C}))});
  Value q = b.linear(h, "q", C, C, false), k = b.linear(h, "k", C, C, false), v = b.linear(h, "v", C, C, false);
  Value s = b.op(OpKind::Matmul, {q, b.op(OpKind::Transpose, {k})});
  s = b.op(OpKind::CausalMask, {b.op(OpKind::Mul, {s, b.constant(1 / std::sqrt(static_cast<double>(C)))})});
  Value p = b.op(OpKind::Softmax, {s});
  if (softmax) *softmax = p.node;
  Value a = b.dropout(p, key);
  x = b.op(OpKind::Add, {x, b.linear(b.op(OpKind::Matmul, {a, v}), "o", C, C, false)});
  h = b.op(OpKind::LayerNorm, {x, b.param("ln2.w", f32({C})), b.param("ln2.b", f32({C}))});
  Value f = b.linear(b.op(OpKind::Gelu, {b.linear(h, "fc1", C, 2 * C, true)}), "fc2", 2 * C, C, true);
  return b.op(OpKind::Add, {x, b.dropout(f, key + 1)});
}

// x: f32[B, T, I] -> linear -> block.0, block.1 (@checkpoint) -> layer_norm -> linear -> mse.
Model transformer() {
  Model m;
  int64_t T = rnd(2, 3), C = rnd(2, 4), I = rnd(2, 3);
  m.x_tail = {T, I};
  m.y_tail = {T, I};
  m.g.name = "gpt";
  m.g.dims = {{"B", std::nullopt, {}}};
  Value x{add_source(m.g, OpKind::Input, "x", f32({B, T, I})), 0};
  Value y{add_source(m.g, OpKind::Input, "y", f32({B, T, I})), 0};
  Builder top{m.g, ""}, b0{m.g, "block.0", true}, b1{m.g, "block.1", true};
  Value h = top.linear(x, "embed", I, C, true);
  h = block(b0, h, T, C, 101, nullptr);
  m.boundary = h.node;
  h = block(b1, h, T, C, 201, &m.inside);
  h = top.op(OpKind::LayerNorm, {h, Value{}, Value{}});  // no affine weights
  m.g.outputs.push_back({"loss", mse(top, top.linear(h, "head", C, I, false), y), {}});
  return m;
}

Graph train_step(const Model& m, int64_t accumulate) {
  Hyper h{.optimizer = "adamw", .weight_decay = 0.0625, .clip = 0.5, .accumulate = accumulate};
  Graph step = build_train_step(m.g, h.options());
  return step;
}

// Random feeds for a step: a batch, params and (non-negative) optimizer state, $lr and $t.
Tensors random_feeds(const Model& m, const Graph& step, int64_t accumulate) {
  Tensors f;
  int64_t n = rnd(1, 2) * accumulate;
  auto shape = [&](const std::vector<int64_t>& tail) {
    std::vector<int64_t> s{n};
    s.insert(s.end(), tail.begin(), tail.end());
    return s;
  };
  f["x"] = random_tensor(DType::F32, shape(m.x_tail));
  f["y"] = random_tensor(DType::F32, shape(m.y_tail));
  for (NodeId id : step.params) f[step.node(id).name] = random_tensor(DType::F32, concrete_shape(step.node(id).outputs[0].shape, {}));
  for (NodeId id : step.states)
    f[step.node(id).name] = random_tensor(DType::F32, concrete_shape(step.node(id).outputs[0].shape, {}), 0, 1);
  f["$lr"] = scalar(0.125);
  f["$t"] = scalar(static_cast<double>(rnd(1, 5)));
  return f;
}

InterpOptions random_options() {
  InterpOptions o;
  o.training = true;
  o.seed = static_cast<uint64_t>(rnd(0, 1 << 30));
  o.step = static_cast<uint64_t>(rnd(0, 1000));
  return o;
}

// Bit for bit: every output and every update.
void expect_same(const InterpResult& got, const InterpResult& want) {
  ASSERT_EQ(got.outputs.size(), want.outputs.size());
  for (const auto& [name, w] : want.outputs) EXPECT_EQ(got.outputs.at(name).data, w.data) << "output " << name;
  ASSERT_EQ(got.updates.size(), want.updates.size());
  for (const auto& [name, w] : want.updates) EXPECT_EQ(got.updates.at(name).data, w.data) << "update " << name;
}

// Where the clones are and what they read.
void check_placement(const Graph& step, const std::vector<NodeId>& drop, const Recomputed& r) {
  StepParts parts = split_step(step);
  const Graph& g = r.graph;
  std::set<NodeId> dropped(drop.begin(), drop.end());
  EXPECT_EQ(verify_graph(g), std::vector<std::string>{});
  EXPECT_EQ(g.nodes.size(), step.nodes.size() + r.original.size());
  std::vector<bool> fwd(g.nodes.size(), false);
  NodeId last_forward = 0;
  for (NodeId id : parts.forward_nodes) {
    fwd[r.new_id[id]] = true;
    last_forward = std::max(last_forward, r.new_id[id]);
  }
  std::set<NodeId> originals;
  for (const auto& [c, d] : r.original) {
    SCOPED_TRACE(fmt::format("clone %{} of %{}", c, d));
    EXPECT_TRUE(dropped.count(d));
    EXPECT_TRUE(originals.insert(d).second) << "two clones of one node";
    EXPECT_GT(c, last_forward) << "a clone inside the forward";
    const Node &cn = g.node(c), &on = step.node(d);
    EXPECT_EQ(cn.op, on.op);
    EXPECT_EQ(cn.attrs, on.attrs);
    EXPECT_EQ(cn.outputs, on.outputs);
    EXPECT_EQ(cn.scope, on.scope);
    EXPECT_EQ(cn.name, on.name);
    ASSERT_EQ(cn.inputs.size(), on.inputs.size());
    for (size_t k = 0; k < cn.inputs.size(); ++k) {
      Value ci = cn.inputs[k], oi = on.inputs[k];
      if (!oi.valid()) { EXPECT_FALSE(ci.valid()); continue; }
      EXPECT_EQ(ci.index, oi.index);
      if (dropped.count(oi.node)) {
        EXPECT_EQ(r.original.at(ci.node), oi.node) << "input " << k;
      } else {
        EXPECT_EQ(ci.node, r.new_id[oi.node]) << "input " << k;
      }
    }
    // Its readers: none in the forward; the first comes after it with only clones between.
    NodeId first = kNoNode;
    for (NodeId u = 0; u < g.nodes.size(); ++u)
      for (const Value& v : g.node(u).inputs)
        if (v.node == c) {
          EXPECT_FALSE(fwd[u]) << "forward node %" << u << " reads a clone";
          first = std::min(first, u);
        }
    ASSERT_NE(first, kNoNode) << "a clone nobody reads";
    for (NodeId between = c + 1; between < first; ++between) EXPECT_TRUE(r.is_clone(between)) << "%" << between;
  }
  // No non-forward node reads a dropped original; every dropped node it read has a clone.
  for (NodeId id : parts.rest)
    for (size_t k = 0; k < step.node(id).inputs.size(); ++k) {
      Value o = step.node(id).inputs[k];
      if (!o.valid() || !dropped.count(o.node)) continue;
      NodeId now = g.node(r.new_id[id]).inputs[k].node;
      EXPECT_TRUE(r.is_clone(now) && r.original.at(now) == o.node) << "%" << id << " input " << k;
    }
}

// The recomputed step runs like the original, bit for bit.
void check_equivalent(const Model& m, const Graph& step, int64_t accumulate, const std::vector<NodeId>& drop) {
  Recomputed r = recompute(step, drop);
  check_placement(step, drop, r);
  Tensors feeds = random_feeds(m, step, accumulate);
  InterpOptions o = random_options();
  expect_same(interpret(r.graph, feeds, o), interpret(step, feeds, o));
}

// Every forward node but the sources, each with probability 1/2.
std::vector<NodeId> random_drop(const Graph& step) {
  StepParts parts = split_step(step);
  std::set<NodeId> src(step.inputs.begin(), step.inputs.end());
  src.insert(step.params.begin(), step.params.end());
  std::vector<NodeId> drop;
  for (NodeId id : parts.forward_nodes)
    if (!src.count(id) && rnd(0, 1)) drop.push_back(id);
  return drop;
}

void check_random_drops(const Model& m, int64_t accumulate) {
  Graph step = train_step(m, accumulate);
  for (int trial = 0; trial < 6; ++trial) {
    SCOPED_TRACE(fmt::format("trial {}, accumulate {}", trial, accumulate));
    check_equivalent(m, step, accumulate, random_drop(step));
  }
  SCOPED_TRACE("every candidate");
  check_equivalent(m, step, accumulate, split_step(step).saved);
}

TEST(Recompute, MlpRandomDropSets) {
  check_random_drops(mlp(), 1);
  check_random_drops(mlp(), 2);
}
TEST(Recompute, TransformerRandomDropSets) {
  check_random_drops(transformer(), 1);
  check_random_drops(transformer(), 2);
}

TEST(Recompute, SplitStep) {
  Model m = mlp();
  Graph step = train_step(m, 1);
  StepParts p = split_step(step);
  EXPECT_EQ(p.forward_nodes.size() + p.rest.size(), step.nodes.size());
  for (NodeId id : step.params) EXPECT_TRUE(p.forward[id]);
  for (NodeId id : step.states) EXPECT_FALSE(p.forward[id]);
  EXPECT_TRUE(p.forward[p.loss.node]);
  // The train step appends the backward and update after its forward.
  for (NodeId id : p.rest)
    if (step.node(id).op != OpKind::Input) {
      EXPECT_GT(id, p.loss.node);
    }
  for (NodeId id : p.saved) {
    EXPECT_TRUE(p.forward[id]);
    EXPECT_NE(step.node(id).op, OpKind::Param);
  }
  EXPECT_FALSE(p.saved.empty());
  Graph no_loss = step;
  no_loss.outputs.clear();
  EXPECT_THROW(split_step(no_loss), InternalError);
}

TEST(Recompute, EmptyDropIsTheSameGraph) {
  Graph step = train_step(transformer(), 2);
  Recomputed r = recompute(step, {});
  EXPECT_EQ(r.graph.nodes.size(), step.nodes.size());
  EXPECT_TRUE(r.original.empty());
  EXPECT_EQ(print_graph(r.graph), print_graph(step));
}

// A dropped node nothing in the backward needs gets no clone (the loss: mean's gradient
// does not read its output).
TEST(Recompute, UnneededDropsGetNoClone) {
  Graph step = train_step(mlp(), 1);
  StepParts p = split_step(step);
  Recomputed r = recompute(step, {p.loss.node});
  EXPECT_TRUE(r.original.empty());
  EXPECT_EQ(print_graph(r.graph), print_graph(step));
}

// Sources are fed, not computed; a backward node is not the forward's to drop. The drop
// set comes from the compiler's own placement, so a bad one is an InternalError.
TEST(Recompute, BadDropsAreInternalErrors) {
  Graph step = train_step(mlp(), 1);
  StepParts p = split_step(step);
  auto expect_internal = [&](NodeId id, const std::string& part) {
    try {
      recompute(step, {id});
      ADD_FAILURE() << "no error dropping %" << id << "; expected: " << part;
    } catch (const InternalError& e) {
      EXPECT_NE(std::string(e.what()).find(part), std::string::npos) << e.what();
    }
  };
  expect_internal(step.params.at(0), "is an input, param or state of 'mlp' and cannot be recomputed");
  expect_internal(step.inputs.at(0), "is an input, param or state of 'mlp' and cannot be recomputed");
  expect_internal(step.states.at(0), "is an input, param or state");
  expect_internal(p.rest.back(), "is not a forward node of 'mlp'");
  expect_internal(static_cast<NodeId>(step.nodes.size()), "is not in 'mlp'");
}

// The clones of dropped dropouts draw the original masks: with p = 0.5, a clone without the
// site key draws another mask, and the gradients (so grad_norm and the updates) change; the
// loss does not (the forward keeps its own dropouts).
TEST(Recompute, DropoutCloneReproducesTheMask) {
  for (bool gpt : {false, true}) {
    SCOPED_TRACE(gpt ? "transformer" : "mlp");
    Model m = gpt ? transformer() : mlp();
    Graph step = train_step(m, 1);
    std::vector<NodeId> drop;
    for (NodeId id : split_step(step).saved)
      if (step.node(id).op == OpKind::Dropout) drop.push_back(id);
    ASSERT_FALSE(drop.empty());
    Recomputed r = recompute(step, drop);
    check_placement(step, drop, r);
    size_t dropouts = 0;
    for (const auto& [c, d] : r.original) dropouts += r.graph.node(c).op == OpKind::Dropout;
    EXPECT_EQ(dropouts, drop.size());
    Tensors feeds = random_feeds(m, step, 1);
    Graph keyless = r.graph;
    for (const auto& [c, d] : r.original) keyless.nodes[c].attrs.erase("key");
    // The models are tiny (a few elements per mask), so one step's two masks can agree by
    // chance; over eight steps they cannot all agree unless the key is ignored.
    InterpOptions o = random_options();
    int differ = 0;
    for (int s = 0; s < 8; ++s, ++o.step) {
      InterpResult want = interpret(step, feeds, o);
      expect_same(interpret(r.graph, feeds, o), want);
      InterpResult bad = interpret(keyless, feeds, o);
      EXPECT_EQ(bad.outputs.at("loss").data, want.outputs.at("loss").data);
      differ += bad.outputs.at("grad_norm").data != want.outputs.at("grad_norm").data;
    }
    EXPECT_GT(differ, 0) << "the mask does not matter in 8 steps";
  }
}

TEST(Recompute, AnnotatedDropTransformer) {
  Model m = transformer();
  for (int64_t acc : {1, 2}) {
    Graph step = train_step(m, acc);
    std::vector<NodeId> drop = annotated_drop(step);
    std::set<NodeId> d(drop.begin(), drop.end());
    StepParts p = split_step(step);
    for (NodeId id : drop) {
      EXPECT_TRUE(step.node(id).checkpoint) << "%" << id;
      EXPECT_TRUE(p.forward[id]);
    }
    EXPECT_FALSE(d.count(step_id(m, step, m.boundary))) << "block.0's output is block.1's input: kept";
    EXPECT_TRUE(d.count(step_id(m, step, m.inside))) << "block.1's softmax is recomputed";
    // Nothing outside the blocks is recomputed; so every clone reads only clones, sources,
    // unmarked nodes and the blocks' boundaries.
    Recomputed r = recompute(step, drop);
    for (const auto& [c, orig] : r.original)
      EXPECT_TRUE(step.node(orig).scope.starts_with("block.")) << step.node(orig).scope;
    SCOPED_TRACE(fmt::format("accumulate {}", acc));
    check_equivalent(m, step, acc, drop);
  }
}

TEST(Recompute, AnnotatedDropMlp) {
  Model m = mlp();
  Graph step = train_step(m, 1);
  std::vector<NodeId> drop = annotated_drop(step);
  std::set<NodeId> d(drop.begin(), drop.end());
  NodeId op_level = step_id(m, step, m.op_level);
  EXPECT_TRUE(d.count(op_level)) << "an op called as @checkpoint is recomputed";
  for (NodeId id : drop) EXPECT_EQ(step.node(id).checkpoint, true);
  // layer.1's last node (gelu) is read by the op-level dropout, outside its region: kept.
  NodeId gelu = step.node(op_level).inputs[0].node;
  EXPECT_FALSE(d.count(gelu));
  // Its input, layer.1's bias add, is inside: recomputed.
  EXPECT_TRUE(d.count(step.node(gelu).inputs[0].node));
  check_equivalent(m, step, 1, drop);
  // Without marks nothing is dropped.
  Graph plain = step;
  for (Node& n : plain.nodes) n.checkpoint = false;
  EXPECT_TRUE(annotated_drop(plain).empty());
}

// A chain of 16 tanh, loss = mean(tanh * y): the candidates are the 16 tanh outputs (each read
// by its own gradient, the last by mul's too), all the same size, so k = 4 segments of equal
// bytes end after the 4th, 8th and 12th tanh, which are kept, as is the last segment (tanh
// 13-16, mul, the loss); the other forward nodes (the first mul, 9 tanh) are dropped.
TEST(Recompute, SqrtNChain) {
  Model m;
  int64_t I = rnd(2, 4);
  m.x_tail = m.y_tail = {I};
  m.g.name = "chain";
  m.g.dims = {{"B", std::nullopt, {}}};
  Value x{add_source(m.g, OpKind::Input, "x", f32({B, I})), 0};
  Value y{add_source(m.g, OpKind::Input, "y", f32({B, I})), 0};
  Builder b{m.g, ""};
  Value h = b.op(OpKind::Mul, {x, b.param("w", f32({I}))});
  std::vector<NodeId> tanh;
  for (int i = 0; i < 16; ++i) {
    h = b.op(OpKind::Tanh, {h});
    tanh.push_back(h.node);
  }
  Value loss = b.op(OpKind::Mean, {b.op(OpKind::Mul, {h, y})});
  m.g.outputs.push_back({"loss", loss, {}});
  Graph step = train_step(m, 1);
  StepParts p = split_step(step);
  ASSERT_EQ(p.saved.size(), 16u);
  std::vector<NodeId> drop = sqrt_n_drop(step, bytes_under({{"B", 8}}));
  std::set<NodeId> d(drop.begin(), drop.end());
  for (int i = 0; i < 16; ++i)
    EXPECT_EQ(d.count(step_id(m, step, tanh[i])) == 0, i == 3 || i == 7 || i >= 11) << "tanh " << i;
  EXPECT_EQ(drop.size(), 1u + 9u);
  EXPECT_FALSE(d.count(p.loss.node));
  for (NodeId id : drop) EXPECT_TRUE(p.forward[id]);
  check_equivalent(m, step, 1, drop);
}

TEST(Recompute, SqrtNModels) {
  for (bool gpt : {false, true})
    for (int64_t acc : {1, 2}) {
      SCOPED_TRACE(fmt::format("{} accumulate {}", gpt ? "transformer" : "mlp", acc));
      Model m = gpt ? transformer() : mlp();
      Graph step = train_step(m, acc);
      std::vector<NodeId> drop = sqrt_n_drop(step, bytes_under({{"B", 64}}));
      EXPECT_FALSE(drop.empty());
      std::set<NodeId> src(step.inputs.begin(), step.inputs.end());
      src.insert(step.params.begin(), step.params.end());
      for (NodeId id : drop) EXPECT_FALSE(src.count(id));
      check_equivalent(m, step, acc, drop);
    }
}

TEST(Recompute, BytesUnder) {
  ByteSize bytes = bytes_under({{"B", 64}});
  EXPECT_EQ(bytes(f32({B, 3})), 64 * 3 * 4);
  EXPECT_EQ(bytes(tt(DType::BF16, {2, B})), 2 * 64 * 2);
  EXPECT_EQ(bytes(f32({})), 4);
  EXPECT_THROW(bytes(f32({T})), InternalError);
}

TEST(Recompute, Flops) {
  auto flops = [](OpKind k, const std::vector<std::optional<TensorType>>& in, Attrs a = {}) {
    OneOp o = build_op(k, in, std::move(a));
    EXPECT_FALSE(o.error) << o.error->message;
    return op_flops(o.g, o.node);
  };
  EXPECT_EQ(flops(OpKind::Matmul, {f32({B, 3}), f32({3, 5})}), Dim(30) * B);
  EXPECT_EQ(flops(OpKind::Matmul, {f32({2, B, 3}), f32({3, 5})}), Dim(60) * B);
  EXPECT_EQ(flops(OpKind::Matmul, {f32({3}), f32({3})}), Dim(6));
  EXPECT_EQ(flops(OpKind::Add, {f32({B, 4}), f32({4})}), Dim(4) * B);
  EXPECT_EQ(flops(OpKind::Transpose, {f32({B, 4})}), Dim(4) * B);
  EXPECT_EQ(flops(OpKind::Softmax, {f32({B, 7})}), Dim(7) * B);
  EXPECT_EQ(flops(OpKind::Sum, {f32({B, 7})}, attrs({{"axes", Ints{1}}})), Dim(7) * B);
  // [N, 4, 5, 5] * [6, 2, 3, 3], groups 2 -> [N, 6, 3, 3]: 2 * 54N * 2 * 9.
  EXPECT_EQ(flops(OpKind::Conv2d, {f32({B, 4, 5, 5}), f32({6, 2, 3, 3}), std::nullopt}, attrs({{"groups", int64_t{2}}})),
            Dim(2 * 54 * 2 * 9) * B);
  OneOp in = build_op(OpKind::Relu, {f32({B})});
  EXPECT_EQ(op_flops(in.g, in.g.inputs[0]), Dim(0));
}

// The bytes an op reads and writes: its inputs and outputs at their dtypes' sizes.
TEST(Recompute, Bytes) {
  auto bytes = [](OpKind k, const std::vector<std::optional<TensorType>>& in, Attrs a = {}) {
    OneOp o = build_op(k, in, std::move(a));
    EXPECT_FALSE(o.error) << o.error->message;
    return op_bytes(o.g, o.node);
  };
  EXPECT_EQ(bytes(OpKind::Matmul, {f32({B, 3}), f32({3, 5})}), Dim(4 * 3) * B + Dim(4 * 15) + Dim(4 * 5) * B);
  EXPECT_EQ(bytes(OpKind::Matmul, {tt(DType::BF16, {B, 3}), tt(DType::BF16, {3, 5})}),
            Dim(2 * 3) * B + Dim(2 * 15) + Dim(2 * 5) * B);
  EXPECT_EQ(bytes(OpKind::Cast, {f32({B})}, attrs({{"dtype", DType::F16}})), Dim(4 + 2) * B);
  EXPECT_EQ(bytes(OpKind::Conv2d, {f32({B, 4, 5, 5}), f32({6, 4, 3, 3}), std::nullopt}),
            Dim(4 * 100) * B + Dim(4 * 216) + Dim(4 * 54) * B);  // an absent bias reads nothing
}

}  // namespace
}  // namespace modelc::test
