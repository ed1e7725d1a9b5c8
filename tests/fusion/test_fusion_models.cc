// Fusion on whole models (compiler/passes/fusion.h): every example model's train step, fused
// and unfused, against the double-precision reference interpreter, and the in-place and
// horizontal AdamW updates against per-parameter updates copied back.
#include <gtest/gtest.h>

#include <cmath>
#include <fmt/format.h>

#include "compiler/compile.h"
#include "compiler/ir/interpreter.h"
#include "compiler/passes/train_step.h"
#include "compiler/pipeline.h"
#include "runtime/session/session.h"
#include "tests/fusion/fusion_harness.h"
#include "tests/passes/train_step_harness.h"

namespace modelc::test {
namespace {

struct ModelCase {
  const char* file;
  std::vector<std::pair<std::string, std::string>> defines;
  int64_t classes;  // i32 inputs are drawn from [0, classes)
};

// One SGD step (learning rate 0.5) of the model's whole train step, fused and unfused,
// against the interpreter in double from the same initial parameters and batch: the loss
// within 1e-4 relative, and every parameter's change (-0.5 x its gradient) within 1e-3 of
// the largest change of that parameter plus 1e-7.
void check_model(const ModelCase& mc) {
  CompileOptions o;
  o.defines = mc.defines;
  Compilation c(o);
  ASSERT_TRUE(c.load(kModels + mc.file)) << c.diags().render();
  Elaborated e = c.elaborate();
  ASSERT_TRUE(e.graph) << c.diags().render();
  TrainStepOptions tso;  // plain SGD: parameter changes are the gradients
  Graph step = build_train_step(*e.graph, tso);
  const double lr = 0.5;
  std::map<std::string, RefTensor> feeds;
  std::map<std::string, rt::HostTensor> batch;
  for (NodeId id : e.graph->inputs) {
    const Node& n = e.graph->node(id);
    std::vector<int64_t> shape = concrete_shape(n.outputs[0].shape, {{"B", 2}});
    RefTensor t = n.outputs[0].dtype == DType::I32 ? random_tensor(DType::I32, shape, 0, static_cast<double>(mc.classes) - 0.01)
                                                   : random_tensor(DType::F32, shape);
    if (t.dtype == DType::I32) {
      for (int64_t i = 0; i < t.numel(); ++i) t[i] = std::floor(t[i]);
    }
    feeds[n.name] = t;
    batch[n.name] = to_host(t);
  }
  size_t kernels[2] = {0, 0};
  for (bool fusion : {true, false}) {
    auto prog = lower(*e.graph, &step, fusion);
    prog->train.schedule = rt::Schedule{};
    prog->train.schedule.lr = lr;
    rt::SessionOptions so;
    so.threads = 2;
    so.seed = 11;
    rt::Session s(prog, so);
    std::map<std::string, RefTensor> ref_feeds = feeds;
    std::map<std::string, RefTensor> before;
    for (const std::string& name : s.param_names()) ref_feeds[name] = before[name] = to_ref(s.param(name));
    ref_feeds["$lr"] = RefTensor(DType::F32, {}, lr);
    ref_feeds["$t"] = RefTensor(DType::F32, {}, 1.0);
    InterpOptions io;
    io.seed = 11;
    io.step = 0;
    InterpResult ref = interpret(step, ref_feeds, io);
    const float loss = s.train_step(batch);
    const double want = ref.outputs.at("loss")[0];
    EXPECT_NEAR(loss, want, 1e-4 * std::fabs(want)) << mc.file << " fusion " << fusion;
    for (const std::string& name : s.param_names()) {
      RefTensor got = to_ref(s.param(name));
      const RefTensor& upd = ref.updates.at(name);
      const RefTensor& old = before.at(name);
      double largest = 0, worst = 0;
      int64_t at = 0;
      for (int64_t i = 0; i < got.numel(); ++i) largest = std::max(largest, std::fabs(upd[i] - old[i]));
      for (int64_t i = 0; i < got.numel(); ++i) {
        double err = std::fabs((got[i] - old[i]) - (upd[i] - old[i]));
        if (err > worst) { worst = err; at = i; }
      }
      EXPECT_LE(worst, 1e-3 * largest + 1e-7)
          << mc.file << " fusion " << fusion << " param " << name << " at " << at << ": change " << got[at] - old[at]
          << ", reference " << upd[at] - old[at] << " (largest change " << largest << ")";
    }
    kernels[fusion] = kernel_instrs(*prog, "train_step");
  }
  EXPECT_LT(kernels[1], kernels[0]) << mc.file << ": fused kernels vs unfused";
}

// Three AdamW steps (weight decay, clipping) of char_gpt, fused, with the updates of every
// parameter and both moments in place and copied back, in one horizontal kernel and one
// kernel each: the same arithmetic, so the losses, parameters and optimizer states are
// bit-identical. (Against the unfused step only a tolerance would do, and Adam's normalised
// update turns the rounding noise of a gradient that is zero in exact arithmetic, such as
// an attention key bias's, into changes of the learning rate's size.)
TEST(FusionNumerics, InPlaceAndHorizontalAdamWStepsEqualPerParameterCopiedBack) {
  Compilation c(small_char_gpt());
  ASSERT_TRUE(c.load(kModels + "char_gpt.model")) << c.diags().render();
  Elaborated e = c.elaborate();
  ASSERT_TRUE(e.graph) << c.diags().render();
  TrainStepOptions tso;
  tso.optimizer = "adamw";
  tso.optimizer_args = attrs({{"weight_decay", 0.1}});
  tso.clip_grad_norm = 0.5;
  Graph step = build_train_step(*e.graph, tso);
  std::vector<std::map<std::string, rt::HostTensor>> batches(3);
  for (auto& batch : batches)
    for (NodeId id : e.graph->inputs) {
      const Node& n = e.graph->node(id);
      RefTensor t = random_tensor(DType::I32, concrete_shape(n.outputs[0].shape, {{"B", 2}}), 0, 95.99);
      for (int64_t i = 0; i < t.numel(); ++i) t[i] = std::floor(t[i]);
      batch[n.name] = to_host(t);
    }
  std::map<std::string, RefTensor> result[3];
  std::vector<float> losses[3];
  for (int variant : {0, 1, 2}) {
    LowerOptions lo;
    lo.in_place = variant != 2;
    lo.horizontal = variant == 0;
    auto prog = lower_program(*e.graph, &step, nullptr, lo);
    const rt::Function* fn = prog->function("train_step");
    size_t same = 0;
    for (const auto& [from, to] : fn->updates) same += from == to;
    EXPECT_EQ(same, lo.in_place ? fn->updates.size() : 0u) << "variant " << variant;
    // The instructions that write parameters: one horizontal kernel, or one each.
    std::set<uint32_t> params;
    for (const auto& [from, to] : fn->updates)
      if (prog->buffers[to].role == rt::BufferRole::Param) params.insert(from);
    size_t writers = 0;
    for (const rt::Instr& in : fn->instrs)
      writers += std::any_of(in.outputs.begin(), in.outputs.end(), [&](uint32_t b) { return params.count(b) > 0; });
    EXPECT_EQ(writers, lo.horizontal ? 1u : e.graph->params.size()) << "variant " << variant;
    rt::SessionOptions so;
    so.threads = 2;
    so.seed = 5;
    rt::Session s(prog, so);
    for (const auto& batch : batches) losses[variant].push_back(s.train_step(batch));
    for (const std::string& name : s.param_names()) result[variant][name] = to_ref(s.param(name));
    for (const std::string& name : s.state_names()) result[variant][name] = to_ref(s.state(name));
  }
  EXPECT_GT(result[0].size(), 3 * 10u);  // every parameter and its two moments
  for (int variant : {1, 2}) {
    EXPECT_EQ(losses[variant], losses[0]) << "variant " << variant;
    ASSERT_EQ(result[variant].size(), result[0].size());
    for (const auto& [name, want] : result[0]) {
      const RefTensor& got = result[variant].at(name);
      int64_t differ = 0;
      for (int64_t i = 0; i < want.numel(); ++i) differ += got[i] != want[i];
      EXPECT_EQ(differ, 0) << name << " variant " << variant;
    }
  }
}

TEST(FusionNumerics, FashionMlpTrainStep) { check_model({"fashion_mlp.model", {}, 10}); }
TEST(FusionNumerics, FashionCnnTrainStep) { check_model({"fashion_cnn.model", {}, 10}); }
// Every composite op, with a symbolic batch (var over it divides by a count known only when
// the step runs).
TEST(FusionNumerics, CompositesTrainStep) { check_model({"../tests/fusion/composites.model", {}, 1}); }
// Every def of the standard library (import "nn").
TEST(FusionNumerics, StandardLibraryTrainStep) { check_model({"../tests/fusion/stdlib.model", {}, 5}); }
TEST(FusionNumerics, CharGptTrainStep) { check_model({"char_gpt.model", {{"T", "8"}, {"C", "24"}, {"L", "2"}}, 96}); }

}  // namespace
}  // namespace modelc::test
