// Library epilogues in the fusion plan (compiler/passes/fusion.h, library_epilogue.h) and
// the lowered Program (runtime/base/program.h, ints["epilogue"]): which bias adds and
// activations a matmul or conv2d absorbs, in the example models' eval and train-step
// graphs and in small graphs built here; that -fno-fusion keeps them apart; that a .plan
// carries them; and that fused eval Programs with every epilogue agree with the reference
// interpreter (relative 1e-4, as the other fusion numerics tests).
#include <gtest/gtest.h>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <set>

#include "compiler/codegen/codelets.h"
#include "compiler/pipeline.h"
#include "compiler/compile.h"
#include "compiler/ir/interpreter.h"
#include "compiler/ir/op_registry.h"
#include "compiler/passes/fusion.h"
#include "compiler/passes/library_epilogue.h"
#include "compiler/passes/train_step.h"
#include "runtime/session/plan_codec.h"
#include "runtime/session/session.h"
#include "tests/fusion/fusion_harness.h"
#include "tests/passes/train_step_harness.h"

namespace modelc::test {
namespace {

using Act = rt::EpilogueActivation;

struct Model {
  std::unique_ptr<Compilation> compilation;  // its sources describe locations
  std::unique_ptr<Graph> forward, step;
};

Model load(const std::string& file, std::vector<std::pair<std::string, std::string>> defines = {}) {
  CompileOptions o;
  o.defines = std::move(defines);
  Model m;
  m.compilation = std::make_unique<Compilation>(o);
  Compilation& c = *m.compilation;
  EXPECT_TRUE(c.load(kModels + file)) << c.diags().render();
  Elaborated e = c.elaborate();
  EXPECT_TRUE(e.graph) << c.diags().render();
  if (!e.graph) return m;
  m.step = std::make_unique<Graph>(build_train_step(*e.graph, train_step_options(*e.train)));
  m.forward = std::move(e.graph);
  return m;
}

// What each matmul / conv2d library group absorbed, in plan order: "matmul+bias+relu",
// "conv2d+relu", "matmul" (nothing).
std::vector<std::string> library_epilogues(const Graph& g, const FusionPlan& p) {
  std::vector<std::string> r;
  for (const FusionGroup& grp : p.groups) {
    if (grp.kind != FusionGroup::Kind::Library) continue;
    const OpKind op = g.node(grp.anchor).op;
    if (op != OpKind::Matmul && op != OpKind::Conv2d) continue;
    std::string s(op_name(op));
    if (grp.epilogue_bias.valid()) s += "+bias";
    if (grp.epilogue_activation != kNoNode) s += std::string("+") + rt::epilogue_activation_name(epilogue_activation(g, grp.epilogue_activation));
    r.push_back(s);
  }
  return r;
}

// The invariants of every library group: its op is the anchor and first member; each
// member but the root has exactly one reader, the next member, and is no graph output;
// the root is then the group's only output.
void expect_valid_epilogues(const Graph& g, const FusionPlan& p) {
  std::vector<std::vector<NodeId>> readers(g.nodes.size());
  for (NodeId id = 0; id < g.nodes.size(); ++id)
    for (const Value& v : g.nodes[id].inputs)
      if (v.valid()) readers[v.node].push_back(id);
  std::set<NodeId> outputs;
  for (const Graph::Output& o : g.outputs) outputs.insert(o.value.node);
  for (const Graph::Update& u : g.updates) outputs.insert(u.value.node);
  for (const FusionGroup& grp : p.groups) {
    if (grp.kind != FusionGroup::Kind::Library) continue;
    ASSERT_FALSE(grp.nodes.empty());
    EXPECT_EQ(grp.nodes.front(), grp.anchor);
    EXPECT_EQ(grp.nodes.back(), grp.root);
    if (grp.nodes.size() > 1) {
      EXPECT_EQ(grp.outputs, (std::vector<Value>{Value{grp.root, 0}})) << "%" << grp.root;
    }
    for (size_t k = 0; k + 1 < grp.nodes.size(); ++k) {
      EXPECT_EQ(readers[grp.nodes[k]], std::vector<NodeId>{grp.nodes[k + 1]}) << "%" << grp.nodes[k];
      EXPECT_FALSE(outputs.count(grp.nodes[k])) << "%" << grp.nodes[k];
    }
    EXPECT_EQ(grp.nodes.size(), 1u + grp.epilogue_bias.valid() + (grp.epilogue_activation != kNoNode));
  }
}

std::vector<const rt::Instr*> library_instrs(const rt::Program& p, const std::string& fn, const std::string& op) {
  std::vector<const rt::Instr*> r;
  for (const rt::Instr& in : p.function(fn)->instrs)
    if (in.kind == rt::Instr::Kind::Library && in.op == op) r.push_back(&in);
  return r;
}

std::vector<int64_t> epilogue_of(const rt::Instr& in) {
  auto it = in.ints.find("epilogue");
  return it == in.ints.end() ? std::vector<int64_t>{} : it->second;
}

std::shared_ptr<rt::Program> lower(const Graph& forward, const Graph* step, bool fusion, Compilation* c = nullptr) {
  LowerOptions lo;
  lo.fusion = fusion;
  if (c) lo.describe = [c](SourceLoc l) { return c->sources().describe(l); };
  return lower_program(forward, step, nullptr, lo);
}

// ---------------------------------------------------------------- the example models

TEST(FusionEpilogue, FashionMlpEvalTakesBiasAndRelu) {
  Model m = load("fashion_mlp.model");
  ASSERT_TRUE(m.forward);
  FusionPlan p = plan(*m.forward);
  expect_valid_epilogues(*m.forward, p);
  EXPECT_EQ(library_epilogues(*m.forward, p), (std::vector<std::string>{"matmul+bias+relu", "matmul+bias"}));
  auto prog = lower(*m.forward, nullptr, true, m.compilation.get());
  auto mm = library_instrs(*prog, "eval", "matmul");
  ASSERT_EQ(mm.size(), 2u);
  EXPECT_EQ(epilogue_of(*mm[0]), (std::vector<int64_t>{1, static_cast<int64_t>(Act::Relu)}));
  EXPECT_EQ(epilogue_of(*mm[1]), (std::vector<int64_t>{1, static_cast<int64_t>(Act::None)}));
  for (const rt::Instr* in : mm) {
    EXPECT_EQ(in->inputs.size(), 3u);  // a, b, then the bias
    EXPECT_NE(in->where.find("fashion_mlp.model:6:"), std::string::npos) << in->where;  // the matmul's, for messages
  }
  // The bias buffer is the param b of each linear.
  EXPECT_EQ(prog->buffers.at(mm[0]->inputs[2]).role, rt::BufferRole::Param);
}

TEST(FusionEpilogue, FashionCnnEvalTakesReluAfterConvAndBiasAfterMatmul) {
  Model m = load("fashion_cnn.model");
  ASSERT_TRUE(m.forward);
  FusionPlan p = plan(*m.forward);
  expect_valid_epilogues(*m.forward, p);
  // conv2d(x, w, b) adds its own bias: only the relu is an epilogue. The hidden linear's
  // relu feeds dropout (off in eval, still a node), so it folds in too.
  EXPECT_EQ(library_epilogues(*m.forward, p),
            (std::vector<std::string>{"conv2d+relu", "conv2d+relu", "matmul+bias+relu", "matmul+bias"}));
  auto prog = lower(*m.forward, nullptr, true);
  for (const rt::Instr* in : library_instrs(*prog, "eval", "conv2d")) {
    EXPECT_EQ(epilogue_of(*in), (std::vector<int64_t>{0, static_cast<int64_t>(Act::Relu)}));
    EXPECT_EQ(in->inputs.size(), 3u);  // x, w and its own bias; no epilogue bias
  }
}

// In a train step the backward pass reads the pre-activation (relu's gradient), so the
// activation stays a kernel and only the bias folds in.
TEST(FusionEpilogue, TrainStepKeepsThePreActivationForTheBackwardPass) {
  for (const char* file : {"fashion_mlp.model", "fashion_cnn.model"}) {
    Model m = load(file);
    ASSERT_TRUE(m.step) << file;
    FusionPlan p = plan(*m.step);
    expect_valid_epilogues(*m.step, p);
    size_t biased = 0;
    for (const FusionGroup& grp : p.groups) {
      if (grp.kind != FusionGroup::Kind::Library) continue;
      EXPECT_EQ(grp.epilogue_activation, kNoNode) << file << ": %" << grp.anchor << " absorbed an activation";
      biased += grp.epilogue_bias.valid();
    }
    EXPECT_EQ(biased, 2u) << file << ": the two linear layers' forward matmuls";
    for (NodeId id = 0; id < m.step->nodes.size(); ++id)
      if (m.step->nodes[id].op == OpKind::Relu) {
        for (const FusionGroup& grp : p.groups) {
          if (grp.kind == FusionGroup::Kind::Library) {
            EXPECT_EQ(std::count(grp.nodes.begin(), grp.nodes.end(), id), 0) << file << ": relu %" << id;
          }
        }
      }
  }
}

TEST(FusionEpilogue, CharGptPlansAreValid) {
  Model m = load("char_gpt.model", {{"T", "8"}, {"C", "24"}});
  ASSERT_TRUE(m.step && m.forward);
  for (const Graph* g : {m.forward.get(), m.step.get()}) {
    FusionPlan p = plan(*g);
    expect_valid_epilogues(*g, p);
    EXPECT_FALSE(library_epilogues(*g, p).empty());
  }
  // Eval: the MLP's first linear takes gelu after its bias.
  FusionPlan p = plan(*m.forward);
  auto e = library_epilogues(*m.forward, p);
  EXPECT_GE(std::count(e.begin(), e.end(), "matmul+bias+gelu_tanh") + std::count(e.begin(), e.end(), "matmul+bias+gelu"), 1)
      << fmt::format("{}", fmt::join(e, " "));
}

TEST(FusionEpilogue, NoneWithoutFusion) {
  for (const char* file : {"fashion_mlp.model", "fashion_cnn.model"}) {
    Model m = load(file);
    ASSERT_TRUE(m.forward && m.step);
    for (const Graph* g : {m.forward.get(), m.step.get()})
      for (const FusionGroup& grp : plan(*g, false).groups)
        if (grp.kind == FusionGroup::Kind::Library) {
          EXPECT_EQ(grp.nodes.size(), 1u) << file;
        }
    auto prog = lower(*m.forward, m.step.get(), false);
    for (const rt::Function& f : prog->functions)
      for (const rt::Instr& in : f.instrs) EXPECT_FALSE(in.ints.count("epilogue")) << file << " " << f.name << " " << in.op;
    // The option alone turns them off too.
    FusionOptions o;
    o.library_epilogues = false;
    o.can_emit = [](const Graph& gr, NodeId id) { return CodeletCompiler::handles(gr, id); };
    for (const FusionGroup& grp : plan_fusion(*m.forward, o).groups)
      if (grp.kind == FusionGroup::Kind::Library) {
        EXPECT_EQ(grp.nodes.size(), 1u) << file;
      }
  }
}

// The .plan codec carries the attribute and the absent input before the bias.
TEST(FusionEpilogue, PlanFilesCarryEpilogues) {
  Model m = load("fashion_cnn.model");
  ASSERT_TRUE(m.forward);
  auto prog = lower(*m.forward, nullptr, true);
  rt::Program back;
  rt::PlanTarget target;
  rt::plan_detail::decode_program(rt::plan_detail::encode_program(*prog, target), back, target);
  const rt::Function* a = prog->function("eval");
  const rt::Function* b = back.function("eval");
  ASSERT_TRUE(a && b);
  ASSERT_EQ(a->instrs.size(), b->instrs.size());
  size_t with = 0;
  for (size_t i = 0; i < a->instrs.size(); ++i) {
    EXPECT_EQ(a->instrs[i].inputs, b->instrs[i].inputs);
    EXPECT_EQ(a->instrs[i].ints, b->instrs[i].ints);
    with += b->instrs[i].ints.count("epilogue");
  }
  EXPECT_EQ(with, 4u);
}

// ---------------------------------------------------------------- small graphs

struct Small {
  Graph g;
  Value x, w, b, h;
};

// h = x @ w with x: f32[B, 8], w: f32[8, 6], b: f32[6] (inputs, so the numerics test can feed them).
Small matmul_graph() {
  Small s;
  s.g.name = "small";
  s.g.dims = {{"B", std::nullopt, {}}};
  s.x = Value{add_source(s.g, OpKind::Input, "x", f32({B, 8})), 0};
  s.w = Value{add_source(s.g, OpKind::Input, "w", f32({8, 6})), 0};
  s.b = Value{add_source(s.g, OpKind::Input, "b", f32({6})), 0};
  s.h = op(s.g, OpKind::Matmul, {s.x, s.w});
  return s;
}

// h = conv2d(x, w) with x: f32[B, 3, 6, 6], w: f32[4, 3, 3, 3], padding 1 (so h: [B, 4, 6, 6]);
// b: f32[4] (reshape it to [4, 1, 1] for a channel bias).
Small conv_graph(bool own_bias = false) {
  Small s;
  s.g.name = "small_conv";
  s.g.dims = {{"B", std::nullopt, {}}};
  s.x = Value{add_source(s.g, OpKind::Input, "x", f32({B, 3, 6, 6})), 0};
  s.w = Value{add_source(s.g, OpKind::Input, "w", f32({4, 3, 3, 3})), 0};
  s.b = Value{add_source(s.g, OpKind::Input, "b", f32({4})), 0};
  s.h = op(s.g, OpKind::Conv2d, {s.x, s.w, own_bias ? s.b : Value{}}, attrs({{"padding", Ints{1}}}));
  return s;
}

std::string only_epilogue(const Graph& g) {
  auto e = library_epilogues(g, plan(g));
  return e.size() == 1 ? e[0] : fmt::format("{} library groups", e.size());
}

TEST(FusionEpilogue, OnlyWhenNothingElseReadsTheIntermediate) {
  {  // The product is also an output: nothing folds in.
    Small s = matmul_graph();
    Value y = op(s.g, OpKind::Relu, {op(s.g, OpKind::Add, {s.h, s.b})});
    s.g.outputs = {{"y", y, {}}, {"h", s.h, {}}};
    EXPECT_EQ(only_epilogue(s.g), "matmul");
  }
  {  // The product has a second reader: nothing folds in.
    Small s = matmul_graph();
    Value y = op(s.g, OpKind::Relu, {op(s.g, OpKind::Add, {s.h, s.b})});
    s.g.outputs = {{"y", y, {}}, {"z", op(s.g, OpKind::Exp, {s.h}), {}}};
    EXPECT_EQ(only_epilogue(s.g), "matmul");
  }
  {  // The pre-activation has a second reader (as in a train step): the bias only.
    Small s = matmul_graph();
    Value pre = op(s.g, OpKind::Add, {s.b, s.h});  // bias on the left
    s.g.outputs = {{"y", op(s.g, OpKind::Relu, {pre}), {}}, {"z", op(s.g, OpKind::Mul, {pre, pre}), {}}};
    EXPECT_EQ(only_epilogue(s.g), "matmul+bias");
    FusionPlan p = plan(s.g);
    expect_valid_epilogues(s.g, p);
  }
  {  // No bias: the activation alone; silu and exp are not epilogue activations.
    Small s = matmul_graph();
    s.g.outputs = {{"y", op(s.g, OpKind::Sigmoid, {s.h}), {}}};
    EXPECT_EQ(only_epilogue(s.g), "matmul+sigmoid");
    Small t = matmul_graph();
    t.g.outputs = {{"y", op(t.g, OpKind::Silu, {op(t.g, OpKind::Add, {t.h, t.b})}), {}}};
    EXPECT_EQ(only_epilogue(t.g), "matmul+bias");
  }
  {  // Adding a matrix or a per-row vector is not a bias along the last dim.
    Small s = matmul_graph();
    Value rows{add_source(s.g, OpKind::Input, "rows", f32({B, 1})), 0};
    s.g.outputs = {{"y", op(s.g, OpKind::Relu, {op(s.g, OpKind::Add, {s.h, rows})}), {}}};
    EXPECT_EQ(only_epilogue(s.g), "matmul");
  }
  {  // A scalar is no bias along the last dim; the activation cannot follow then either.
    Small s = matmul_graph();
    Node c;
    c.op = OpKind::Constant;
    c.attrs = attrs({{"value", 0.5}});
    c.outputs = {f32({})};
    Value k{s.g.add(std::move(c)), 0};
    s.g.outputs = {{"y", op(s.g, OpKind::Tanh, {op(s.g, OpKind::Add, {s.h, k})}), {}}};
    EXPECT_EQ(only_epilogue(s.g), "matmul");
  }
}

TEST(FusionEpilogue, ConvBiasRunsAlongChannels) {
  {  // reshape(b, [4, 1, 1]): a channel bias.
    Small s = conv_graph();
    Value cb = op(s.g, OpKind::Reshape, {s.b}, attrs({{"shape", Shape{Dim(4), Dim(1), Dim(1)}}}));
    s.g.outputs = {{"y", op(s.g, OpKind::Gelu, {op(s.g, OpKind::Add, {s.h, cb})}, attrs({{"approximate", std::string("tanh")}})), {}}};
    EXPECT_EQ(only_epilogue(s.g), "conv2d+bias+gelu_tanh");
    auto prog = lower(s.g, nullptr, true);
    auto in = library_instrs(*prog, "eval", "conv2d");
    ASSERT_EQ(in.size(), 1u);
    ASSERT_EQ(in[0]->inputs.size(), 4u);
    EXPECT_EQ(in[0]->inputs[2], rt::kNoBuffer);  // its own bias slot, absent
    EXPECT_EQ(epilogue_of(*in[0]), (std::vector<int64_t>{1, static_cast<int64_t>(Act::GeluTanh)}));
  }
  {  // b: f32[4] added to [B, 4, 6, 4] runs along the width, not the channels.
    Small s = conv_graph();
    Value w4{add_source(s.g, OpKind::Input, "x4", f32({B, 3, 6, 4})), 0};
    Value h4 = op(s.g, OpKind::Conv2d, {w4, s.w, Value{}}, attrs({{"padding", Ints{1}}}));
    s.g.outputs = {{"y", op(s.g, OpKind::Relu, {op(s.g, OpKind::Add, {h4, s.b})}), {}},
                   {"h", op(s.g, OpKind::Relu, {s.h}), {}}};
    auto e = library_epilogues(s.g, plan(s.g));
    std::sort(e.begin(), e.end());
    EXPECT_EQ(e, (std::vector<std::string>{"conv2d", "conv2d+relu"})) << fmt::format("{}", fmt::join(e, " "));
  }
  {  // A conv2d with its own bias takes no second one, but still an activation.
    Small s = conv_graph(true);
    Value cb = op(s.g, OpKind::Reshape, {s.b}, attrs({{"shape", Shape{Dim(4), Dim(1), Dim(1)}}}));
    s.g.outputs = {{"y", op(s.g, OpKind::Relu, {op(s.g, OpKind::Add, {s.h, cb})}), {}}};
    EXPECT_EQ(only_epilogue(s.g), "conv2d");
    Small t = conv_graph(true);
    t.g.outputs = {{"y", op(t.g, OpKind::Tanh, {t.h}), {}}};
    EXPECT_EQ(only_epilogue(t.g), "conv2d+tanh");
  }
}

// Every activation after matmul + bias and conv2d + channel bias: the fused eval Program
// (the epilogue in the library call) against the reference interpreter, and the plan of
// each says so.
TEST(FusionEpilogue, EvalWithEveryEpilogueAgreesWithTheReference) {
  struct ActOp {
    OpKind op;
    const char* approximate;
    const char* name;
  };
  const ActOp acts[] = {{OpKind::Relu, nullptr, "relu"},         {OpKind::Gelu, "none", "gelu"},
                        {OpKind::Gelu, "tanh", "gelu_tanh"},     {OpKind::Tanh, nullptr, "tanh"},
                        {OpKind::Sigmoid, nullptr, "sigmoid"}};
  for (bool conv : {false, true})
    for (const ActOp& a : acts) {
      Small s = conv ? conv_graph() : matmul_graph();
      Value bias = conv ? op(s.g, OpKind::Reshape, {s.b}, attrs({{"shape", Shape{Dim(4), Dim(1), Dim(1)}}})) : s.b;
      Attrs at = a.approximate ? attrs({{"approximate", std::string(a.approximate)}}) : Attrs{};
      Value y = op(s.g, a.op, {op(s.g, OpKind::Add, {s.h, bias})}, at);
      s.g.outputs = {{"y", y, {}}};
      const std::string what = fmt::format("{} + bias + {}", conv ? "conv2d" : "matmul", a.name);
      EXPECT_EQ(only_epilogue(s.g), fmt::format("{}+bias+{}", conv ? "conv2d" : "matmul", a.name)) << what;
      const int64_t batch = rnd(1, 5);
      std::map<std::string, RefTensor> feeds;
      // Scaled so that pre-activations spread over [-4, 4], where the activations bend.
      feeds["x"] = random_tensor(DType::F32, conv ? std::vector<int64_t>{batch, 3, 6, 6} : std::vector<int64_t>{batch, 8}, -2, 2);
      feeds["w"] = random_tensor(DType::F32, conv ? std::vector<int64_t>{4, 3, 3, 3} : std::vector<int64_t>{8, 6}, -0.5, 0.5);
      feeds["b"] = random_tensor(DType::F32, {conv ? 4 : 6}, -1, 1);
      InterpOptions io;
      io.training = false;
      InterpResult ref = interpret(s.g, feeds, io);
      std::map<std::string, rt::HostTensor> in;
      for (const auto& [name, t] : feeds) {
        rt::HostTensor h(rt::ElemType::F32, t.shape);
        for (int64_t i = 0; i < t.numel(); ++i) h.f32()[i] = static_cast<float>(t[i]);
        in[name] = std::move(h);
      }
      auto prog = lower(s.g, nullptr, true);
      for (const rt::Instr& ins : prog->function("eval")->instrs)
        EXPECT_EQ(ins.kind, rt::Instr::Kind::Library) << what << ": no kernel (conv2d's bias is a reshape)";
      rt::SessionOptions so;
      so.threads = 2;
      rt::Session sess(prog, so);
      rt::HostTensor got = sess.eval(in).at("y");
      RefTensor g(DType::F32, got.shape);
      for (int64_t i = 0; i < got.numel(); ++i) g[i] = got.f32()[i];
      expect_near(g, ref.outputs.at("y"), 1e-4, what);
    }
}

}  // namespace
}  // namespace modelc::test
