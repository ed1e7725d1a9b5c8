// The autocast pass (compiler/passes/autocast.h) and the mixed-precision train step
// (compiler/passes/train_step.h) in the interpreter:
//  - the policy comes from the registry: every Lower op runs on low-precision inputs with
//    its result cast back, every F32 op on f32 inputs; outputs, params and their types
//    are unchanged; the pass is idempotent; the graph verifies;
//  - in the bf16 / fp16 train step the forward and backward matmuls run in the low type
//    while every gradient, param update and optimizer state stays f32;
//  - a bf16 and an fp16 step agree with the f32 step of the same params and batch (loss
//    within 2e-2 relative, each param's change within 5% of its largest change, which is
//    what rounding inputs to 8 or 11 bits does to a product of 16 terms);
//  - the error paths: unknown precision, autocast to f32, bad loss-scaler settings.
#include <gtest/gtest.h>

#include "compiler/ir/op_registry.h"
#include "compiler/ir/verifier.h"
#include "compiler/passes/autocast.h"
#include "tests/passes/train_step_harness.h"

namespace modelc::test {
namespace {

// Checks the pass's guarantees on g -> a = autocast(g, t).
void expect_policy(const Graph& g, const Graph& a, DType t) {
  EXPECT_TRUE(verify_graph(a).empty()) << verify_graph(a).front();
  ASSERT_EQ(a.outputs.size(), g.outputs.size());
  for (size_t k = 0; k < g.outputs.size(); ++k) EXPECT_EQ(a.type(a.outputs[k].value), g.type(g.outputs[k].value)) << g.outputs[k].name;
  ASSERT_EQ(a.params.size(), g.params.size());
  for (size_t k = 0; k < g.params.size(); ++k) {
    EXPECT_EQ(a.node(a.params[k]).name, g.node(g.params[k]).name);
    EXPECT_EQ(a.node(a.params[k]).outputs, g.node(g.params[k]).outputs);
  }
  size_t lowered = 0;
  for (NodeId id = 0; id < a.nodes.size(); ++id) {
    const Node& n = a.nodes[id];
    const AutocastPolicy p = op_info(n.op).autocast;
    for (const Value& v : n.inputs) {
      if (!v.valid() || !is_float(a.type(v).dtype)) continue;
      if (p == AutocastPolicy::Lower) {
        EXPECT_EQ(a.type(v).dtype, t) << op_name(n.op) << " %" << id;
      }
      if (p == AutocastPolicy::F32) {
        EXPECT_EQ(a.type(v).dtype, DType::F32) << op_name(n.op) << " %" << id;
      }
    }
    if (p == AutocastPolicy::Lower) {
      ++lowered;
      // Its result goes back to f32 through one cast, which is all that reads it.
      for (NodeId u = id + 1; u < a.nodes.size(); ++u)
        for (const Value& v : a.nodes[u].inputs)
          if (v.node == id) {
            EXPECT_EQ(a.nodes[u].op, OpKind::Cast) << "%" << u << " reads %" << id;
          }
    }
  }
  EXPECT_GT(lowered, 0u);
}

TEST(Autocast, FollowsTheRegistryPolicy) {
  for (DType t : {DType::BF16, DType::F16}) {
    for (bool ce : {false, true}) {
      TinyModel m = tiny_model(6, 4, ce);
      Graph a = autocast(m.g, t);
      expect_policy(m.g, a, t);
      // Idempotent: nothing left to cast.
      Graph again = autocast(a, t);
      EXPECT_EQ(again.nodes.size(), a.nodes.size());
    }
  }
}

TEST(Autocast, RegistryMarksLibraryProductsLowAndReductionsF32) {
  // What the policy is for: the ops the registry lowers are the opaque products; the
  // losses and normalisations stay f32. A new op gets Follow unless its entry says so.
  for (OpKind k : {OpKind::Matmul, OpKind::Conv2d, OpKind::Conv2dGradInput, OpKind::Conv2dGradWeight})
    EXPECT_EQ(op_info(k).autocast, AutocastPolicy::Lower) << op_name(k);
  for (OpKind k : {OpKind::Sum, OpKind::Mean, OpKind::Softmax, OpKind::LogSoftmax, OpKind::LayerNorm, OpKind::CrossEntropy})
    EXPECT_EQ(op_info(k).autocast, AutocastPolicy::F32) << op_name(k);
  for (OpKind k : {OpKind::Add, OpKind::Relu, OpKind::Transpose, OpKind::Cast})
    EXPECT_EQ(op_info(k).autocast, AutocastPolicy::Follow) << op_name(k);
}

TEST(Autocast, F32OpsGetLowInputsCastUp) {
  // A model written in bf16: softmax and sum run in f32 and give bf16 back.
  Graph g;
  g.name = "lowp";
  NodeId x = add_source(g, OpKind::Input, "x", tt(DType::BF16, {B, 8}));
  Value sm = op(g, OpKind::Softmax, {{x, 0}});
  Value s = op(g, OpKind::Sum, {op(g, OpKind::Mul, {sm, {x, 0}})});
  g.outputs.push_back({"s", s, {}});
  Graph a = autocast(g, DType::F16);
  EXPECT_EQ(a.type(a.outputs[0].value).dtype, DType::BF16);
  size_t casts = 0;
  for (const Node& n : a.nodes) casts += n.op == OpKind::Cast;
  EXPECT_EQ(casts, 4u);  // softmax: in and back; sum: in and back
  // The reference of the autocast graph: the same values up to bf16 rounding.
  Tensors feeds{{"x", random_tensor(DType::BF16, {3, 8}, -2, 2)}};
  const double want = interpret(g, feeds).outputs.at("s")[0], got = interpret(a, feeds).outputs.at("s")[0];
  EXPECT_NEAR(got, want, 2e-2 * (1 + std::fabs(want)));
}

TEST(Autocast, TrainStepRunsProductsLowAndKeepsGradientsAndStateF32) {
  for (const char* precision : {"bf16", "fp16"}) {
    const DType t = precision_dtype(precision);
    TinyModel m = tiny_model(6, 4, true);
    TrainStepOptions o = Hyper{.optimizer = "adamw"}.options();
    o.precision = precision;
    Graph step = build_train_step(m.g, o);
    EXPECT_TRUE(verify_graph(step).empty());
    size_t low_products = 0;
    for (const Node& n : step.nodes)
      if (n.op == OpKind::Matmul) {
        EXPECT_EQ(n.outputs[0].dtype, t) << precision;
        ++low_products;
      }
    EXPECT_GE(low_products, 2u) << "forward x @ w and the backward's x^T @ dz";
    for (const Graph::Update& u : step.updates) {
      EXPECT_EQ(step.type(u.value).dtype, DType::F32) << step.node(u.target).name;
      EXPECT_EQ(step.node(u.target).outputs[0].dtype, DType::F32) << step.node(u.target).name;
    }
    for (const Node& n : step.nodes)
      if (n.name.starts_with("grad ")) {
        EXPECT_EQ(n.outputs[0].dtype, DType::F32) << n.name;
      }
  }
}

TEST(Autocast, LowPrecisionStepsAgreeWithTheF32Step) {
  TinyModel m = tiny_model(16, 5, true);
  Tensors batch = random_batch(m, 8), params = random_params(m);
  Hyper h{.optimizer = "sgd", .lr = 0.5};
  InterpResult ref = run_step(build_train_step(m.g, h.options()), batch, params, {}, h.lr, 1);
  for (const char* precision : {"bf16", "fp16"}) {
    TrainStepOptions o = h.options();
    o.precision = precision;
    InterpResult got = run_step(build_train_step(m.g, o), batch, params, {}, h.lr, 1);
    const double want = ref.outputs.at("loss")[0];
    EXPECT_NEAR(got.outputs.at("loss")[0], want, 2e-2 * std::fabs(want)) << precision;
    for (const std::string name : {"w", "b"}) {
      const RefTensor &p = params.at(name), &a = got.updates.at(name), &r = ref.updates.at(name);
      double largest = 0;
      for (int64_t i = 0; i < p.numel(); ++i) largest = std::max(largest, std::fabs(r[i] - p[i]));
      for (int64_t i = 0; i < p.numel(); ++i)
        EXPECT_NEAR(a[i] - p[i], r[i] - p[i], 0.05 * largest) << precision << " " << name << " at " << i;
    }
    if (std::string(precision) == "fp16") {
      EXPECT_EQ(got.outputs.at("skipped")[0], 0.0);
      EXPECT_EQ(got.outputs.at("loss_scale")[0], 65536.0);
    } else {
      EXPECT_FALSE(got.outputs.count("loss_scale")) << "bf16 needs no loss scaling";
    }
  }
}

TEST(Autocast, ErrorPaths) {
  expect_user_error([] { precision_dtype("fp8"); }, "unknown precision 'fp8'; expected fp32, bf16 or fp16");
  TinyModel m = tiny_model(2, 2);
  EXPECT_THROW(autocast(m.g, DType::F32), InternalError);
  TrainStepOptions o;
  o.precision = "half";
  expect_user_error([&] { build_train_step(m.g, o); }, "unknown precision 'half'");
  o.precision = "fp16";
  o.loss_scale = 0;
  expect_user_error([&] { build_train_step(m.g, o); }, "the initial loss scale must be a finite number > 0, got 0");
  o.loss_scale = 1024;
  o.growth_interval = 0;
  expect_user_error([&] { build_train_step(m.g, o); }, "the loss scale's growth interval must be at least 1, got 0");
}

}  // namespace
}  // namespace modelc::test
