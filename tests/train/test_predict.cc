// The predict function (compiler/passes/predict.h, Session::predict): it feeds only what its
// outputs read, computes what the eval function computes (fashion_mlp's logits equal eval's;
// char_gpt's logits give eval's loss), runs in eval mode (dropout off), and refuses what
// cannot be predicted with errors that say what to do.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <random>

#include "compiler/pipeline.h"
#include "runtime/session/session.h"
#include <unistd.h>

namespace fs = std::filesystem;
using namespace modelc;

namespace {

const std::string kModels = std::string(MODELC_SOURCE_DIR) + "/models/";

struct Built {
  std::shared_ptr<rt::Program> program;
  std::string diags;
};

Built build(const std::string& path, std::vector<std::string> outputs,
            std::vector<std::pair<std::string, std::string>> defines = {}) {
  CompileOptions o;
  o.defines = std::move(defines);
  Compilation c(o);
  ProgramOptions po;
  po.train = false;
  po.predict = std::move(outputs);
  Built b;
  b.program = compile_program(c, path, po);
  b.diags = c.diags().render();
  return b;
}

// `text` as a .model file in a temporary directory, built with `outputs`.
Built build_text(const std::string& text, std::vector<std::string> outputs) {
  const fs::path dir = fs::temp_directory_path() / ("modelc_predict_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  std::ofstream(dir / "m.model") << text;
  Built b = build((dir / "m.model").string(), std::move(outputs));
  fs::remove_all(dir);
  return b;
}

std::vector<std::string> feed_names(const rt::Function& f) {
  std::vector<std::string> v;
  for (const rt::Feed& fd : f.feeds) v.push_back(fd.name);
  return v;
}
std::vector<std::string> output_names(const rt::Function& f) {
  std::vector<std::string> v;
  for (const auto& [name, buf] : f.outputs) v.push_back(name);
  return v;
}

uint64_t seed() {
  static const uint64_t s = std::random_device{}();
  std::fprintf(stderr, "predict tests: seed %llu\n", static_cast<unsigned long long>(s));
  return s;
}

TEST(Predict, AClassifiersLogitsEqualEvalsWithoutTheLabels) {
  Built b = build(kModels + "fashion_mlp.model", {});
  ASSERT_TRUE(b.program) << b.diags;
  const rt::Function* fn = b.program->function("predict");
  ASSERT_TRUE(fn);
  EXPECT_EQ(feed_names(*fn), std::vector<std::string>{"images"});
  EXPECT_EQ(output_names(*fn), std::vector<std::string>{"logits"});  // the loss reads the labels
  EXPECT_FALSE(b.program->function("train_step"));
  std::mt19937_64 rng(seed());
  rt::Session s(b.program, {.threads = 2, .seed = rng()});
  rt::HostTensor x(rt::ElemType::F32, {7, 784}), y(rt::ElemType::I32, {7});
  for (int64_t i = 0; i < x.numel(); ++i) x.f32()[i] = std::uniform_real_distribution<float>(0, 1)(rng);
  for (int64_t i = 0; i < y.numel(); ++i) y.i32()[i] = static_cast<int32_t>(rng() % 10);
  auto p = s.predict({{"images", x}});
  auto e = s.eval({{"images", x}, {"labels", y}});
  ASSERT_EQ(p.at("logits").shape, (std::vector<int64_t>{7, 10}));
  for (int64_t i = 0; i < 70; ++i)
    EXPECT_NEAR(p.at("logits").f32()[i], e.at("logits").f32()[i], 1e-6f * (1 + std::fabs(e.at("logits").f32()[i])));
}

TEST(Predict, ANamedTensorOfTheBodyGivesTheLossEvalComputes) {
  Built b = build(kModels + "char_gpt.model", {"logits"}, {{"T", "8"}, {"C", "24"}, {"L", "2"}});
  ASSERT_TRUE(b.program) << b.diags;
  const rt::Function* fn = b.program->function("predict");
  ASSERT_TRUE(fn);
  EXPECT_EQ(feed_names(*fn), std::vector<std::string>{"tokens"});
  EXPECT_EQ(output_names(*fn), std::vector<std::string>{"logits"});
  std::mt19937_64 rng(seed() + 1);
  rt::Session s(b.program, {.threads = 2, .seed = rng()});
  const int64_t B = 3, T = 8, V = 96;
  rt::HostTensor tok(rt::ElemType::I32, {B, T}), tgt(rt::ElemType::I32, {B, T});
  for (int64_t i = 0; i < B * T; ++i) {
    tok.i32()[i] = static_cast<int32_t>(rng() % V);
    tgt.i32()[i] = static_cast<int32_t>(rng() % V);
  }
  const rt::HostTensor lg = s.predict({{"tokens", tok}}).at("logits");
  ASSERT_EQ(lg.shape, (std::vector<int64_t>{B, T, V}));
  double ce = 0;  // mean cross-entropy in double from the predicted logits
  for (int64_t r = 0; r < B * T; ++r) {
    const float* l = lg.f32() + r * V;
    double mx = l[0], sum = 0;
    for (int64_t k = 1; k < V; ++k) mx = std::max(mx, static_cast<double>(l[k]));
    for (int64_t k = 0; k < V; ++k) sum += std::exp(l[k] - mx);
    ce += mx + std::log(sum) - l[tgt.i32()[r]];
  }
  ce /= static_cast<double>(B * T);
  const float loss = s.eval({{"tokens", tok}, {"targets", tgt}}).at("loss").f32()[0];
  EXPECT_NEAR(loss, ce, 1e-5 * ce);
}

const char* kDropout = R"(
model m(B) {
  input x: f32[B, 4]
  input y: i32[B]
  param w: f32[4, 3] = normal(std = 1.0)
  h = dropout(x @ w, p = 0.5)
  loss = cross_entropy(h, y)
  output loss, h
}
train m {
  data = csv("none.csv")
  batch = 2
  optimizer = sgd(lr = 0.1)
  steps = 1
}
)";

TEST(Predict, RunsInEvalModeDropoutOff) {
  Built b = build_text(kDropout, {});
  ASSERT_TRUE(b.program) << b.diags;
  std::mt19937_64 rng(seed() + 2);
  rt::Session s(b.program, {.threads = 1, .seed = rng()});
  rt::HostTensor x(rt::ElemType::F32, {5, 4});
  for (int64_t i = 0; i < x.numel(); ++i) x.f32()[i] = std::uniform_real_distribution<float>(-1, 1)(rng);
  const rt::HostTensor w = s.param("w"), h = s.predict({{"x", x}}).at("h");
  for (int64_t i = 0; i < 5; ++i)
    for (int64_t j = 0; j < 3; ++j) {
      double ref = 0;
      for (int64_t k = 0; k < 4; ++k) ref += static_cast<double>(x.f32()[i * 4 + k]) * w.f32()[k * 3 + j];
      EXPECT_NEAR(h.f32()[i * 3 + j], ref, 1e-5) << "row " << i << " column " << j;
    }
}

TEST(Predict, WhatCannotBePredictedIsAnErrorSayingWhatToDo) {
  const std::vector<std::pair<std::string, std::string>> small = {{"T", "8"}, {"C", "24"}, {"L", "1"}};
  Built none = build(kModels + "char_gpt.model", {}, small);
  EXPECT_FALSE(none.program);
  EXPECT_NE(none.diags.find("model 'char_gpt' has nothing to predict: every output (loss) depends on the target input "
                            "'targets'; name the value to predict with --output NAME"),
            std::string::npos) << none.diags;
  Built typo = build(kModels + "char_gpt.model", {"logit"}, small);
  EXPECT_FALSE(typo.program);
  EXPECT_NE(typo.diags.find("--output logit: model 'char_gpt' has no tensor named 'logit' (its tensors: "),
            std::string::npos) << typo.diags;
  EXPECT_NE(typo.diags.find("(did you mean 'logits'?)"), std::string::npos) << typo.diags;
  Built loss = build(kModels + "char_gpt.model", {"loss"}, small);
  EXPECT_FALSE(loss.program);
  EXPECT_NE(loss.diags.find("--output loss: 'loss' of model 'char_gpt' depends on its target input 'targets'"),
            std::string::npos) << loss.diags;
}

TEST(Predict, WithoutATrainSectionEveryInputIsGiven) {
  Built b = build_text(R"(
model m(B) {
  input a: f32[B, 2]
  input c: f32[B, 2]
  out = a * c
  output out
}
)", {});
  ASSERT_TRUE(b.program) << b.diags;
  EXPECT_EQ(feed_names(*b.program->function("predict")), (std::vector<std::string>{"a", "c"}));
}

}  // namespace
