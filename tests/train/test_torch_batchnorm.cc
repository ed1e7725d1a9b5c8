// Buffers and train / eval mode against PyTorch: the standard library's batchnorm2d and
// batchnorm1d (lib/nn.model: `buffer`, `update`, `if training`) as torch.nn.BatchNorm2d /
// BatchNorm1d, without Python: tools/torch_batchnorm.py wrote PyTorch's numbers (CPU,
// float32) for a conv -> batch norm -> relu -> batch norm -> linear classifier trained 10
// SGD steps into tests/train/torch_batchnorm.txt. Here the same model is compiled as
// modelrun compiles it, given PyTorch's initial parameters and trained on the same batches
// through a Session; then compared: every step's loss (train mode, batch statistics) within
// 1e-5 relative, the four running statistics within 5e-5 absolute (their values are O(1)),
// and the logits of a held-out batch of another size in eval mode (running statistics)
// within 1e-4 absolute. Cases: plain; accumulate = 2 (the statistics move once per
// micro-batch, as per forward call in PyTorch); the batch norms recomputed in the backward
// pass (@checkpoint: the statistics must still move once per step, so its reference is the
// plain run's). Why 5e-5: both sides are float32, and the CPU kernels OpenBLAS and oneDNN
// pick for this machine's CPU sum in their own order, so the statistics after 20 updates
// move with the CPU: measured 6e-6 to 2.0e-5 over OPENBLAS_CORETYPE / ONEDNN_MAX_CPU_ISA
// settings on one machine (2.0e-5 for Prescott). A wrong momentum or the biased variance in
// place of the unbiased one is off by 1e-2 or more.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <map>
#include <sstream>

#include "compiler/pipeline.h"
#include "tests/train/torch_golden.h"
#include "runtime/session/session.h"

using namespace modelc;

namespace {

constexpr int64_t kB = 8, kC = 3, kH = 4, kW = 4, kClasses = 3, kEvalB = 5;

struct Case {
  std::string name;
  int64_t accumulate = 1;
  std::vector<double> loss, eval_logits;
  std::map<std::string, std::vector<double>> buffers;
};

struct Golden {
  std::map<std::string, std::vector<double>> params;
  std::vector<std::pair<std::vector<double>, std::vector<double>>> batches;  // x, y
  std::vector<double> held_out;
  std::vector<Case> cases;
};

std::vector<double> numbers(std::istringstream& in) {
  std::vector<double> v;
  for (std::string t; in >> t && t != "y";) v.push_back(std::stod(t));
  return v;
}

const Golden& golden() {
  static const Golden golden_file = [] {
    Golden g;
    std::ifstream f(std::string(MODELC_SOURCE_DIR) + "/tests/train/torch_batchnorm.txt");
    for (std::string line; std::getline(f, line);) {
      std::istringstream in(line);
      std::string word, name;
      in >> word;
      if (word == "param") {
        in >> name;
        g.params[name] = numbers(in);
      } else if (word == "batch") {
        in >> word >> word;  // the index, "x"
        std::vector<double> x = numbers(in);
        g.batches.emplace_back(x, numbers(in));
      } else if (word == "held_out") {
        g.held_out = numbers(in);
      } else if (word == "case") {
        g.cases.emplace_back();
        in >> g.cases.back().name >> g.cases.back().accumulate;
      } else if (word == "loss") {
        g.cases.back().loss = numbers(in);
      } else if (word == "buffer") {
        in >> name;
        g.cases.back().buffers[name] = numbers(in);
      } else if (word == "eval_logits") {
        g.cases.back().eval_logits = numbers(in);
      }
    }
    return g;
  }();
  return golden_file;
}

rt::HostTensor tensor(rt::ElemType t, const std::vector<double>& v, std::vector<int64_t> shape) {
  rt::HostTensor out(t, std::move(shape));
  EXPECT_EQ(static_cast<size_t>(out.numel()), v.size());
  for (size_t i = 0; i < v.size(); ++i) {
    if (t == rt::ElemType::F32) out.f32()[i] = static_cast<float>(v[i]);
    else out.i32()[i] = static_cast<int32_t>(v[i]);
  }
  return out;
}

std::shared_ptr<rt::Program> compile_case(const Case& c) {
  const std::string mark = c.name == "checkpoint" ? "@checkpoint " : "";
  std::ostringstream out;
  out << "import \"nn\"\n\nmodel bnt(B) {\n  input x: f32[B, 3, 4, 4]\n  input y: i32[B]\n"
      << "  h = relu(" << mark << "batchnorm2d(conv(x, 4, kernel = 3, padding = 1), momentum = 0.2))\n"
      << "  logits = linear(" << mark << "batchnorm1d(reshape(h, [B, 64]), eps = 1e-3), 3)\n"
      << "  loss = cross_entropy(logits, y)\n  output loss, logits\n}\n\n"
      << "train bnt {\n  optimizer = sgd(lr = 0.1)\n  batch = 8\n  steps = 10\n  accumulate = " << c.accumulate
      << "\n}\n";
  return test::compile_model_text(c.name, out.str());
}

using test::rel;

constexpr double kStatTol = 5e-5;  // the running statistics, absolute (see the top)

double max_abs_diff(const rt::HostTensor& t, const std::vector<double>& want) {
  EXPECT_EQ(static_cast<size_t>(t.numel()), want.size());
  double worst = 0;
  for (size_t i = 0; i < want.size() && i < static_cast<size_t>(t.numel()); ++i)
    worst = std::max(worst, std::fabs(static_cast<double>(t.f32()[i]) - want[i]));
  return worst;
}

void check_case(const std::string& name) {
  const Golden& g = golden();
  const Case* c = nullptr;
  for (const Case& k : g.cases)
    if (k.name == name) c = &k;
  ASSERT_NE(c, nullptr) << "no case '" << name << "' in tests/train/torch_batchnorm.txt";
  auto p = compile_case(*c);
  ASSERT_TRUE(p);
  rt::SessionOptions so;
  so.threads = 1;
  rt::Session s(p, so);
  const std::map<std::string, std::vector<int64_t>> shapes = {
      {"conv.0.w", {4, 3, 3, 3}}, {"conv.0.b", {4}}, {"batchnorm2d.0.g", {4}}, {"batchnorm2d.0.b", {4}},
      {"batchnorm1d.0.g", {64}}, {"batchnorm1d.0.b", {64}}, {"linear.0.w", {64, 3}}, {"linear.0.b", {3}}};
  ASSERT_EQ(s.param_names().size(), shapes.size());
  for (const auto& [pname, shape] : shapes) s.set_param(pname, tensor(rt::ElemType::F32, g.params.at(pname), shape));
  // Before training the running statistics are torch's zeros and ones.
  for (const auto& [bname, want] : c->buffers) {
    const rt::HostTensor t = s.buffer(bname);
    for (int64_t i = 0; i < t.numel(); ++i) ASSERT_EQ(t.f32()[i], bname.ends_with("mean") ? 0.0f : 1.0f) << bname;
  }
  EXPECT_EQ(s.buffer_names().size(), c->buffers.size());
  double worst_loss = 0, worst_buffer = 0;
  for (size_t k = 0; k < g.batches.size(); ++k) {
    const auto& [x, y] = g.batches[k];
    const float loss = s.train_step({{"x", tensor(rt::ElemType::F32, x, {kB, kC, kH, kW})},
                                     {"y", tensor(rt::ElemType::I32, y, {kB})}});
    worst_loss = std::max(worst_loss, rel(loss, c->loss[k]));
    EXPECT_LE(rel(loss, c->loss[k]), 1e-5) << "step " << k << ": loss " << loss << ", torch " << c->loss[k];
  }
  for (const auto& [bname, want] : c->buffers) {
    const double d = max_abs_diff(s.buffer(bname), want);
    worst_buffer = std::max(worst_buffer, d);
    EXPECT_LE(d, kStatTol) << bname;
  }
  const auto out = s.eval({{"x", tensor(rt::ElemType::F32, g.held_out, {kEvalB, kC, kH, kW})},
                           {"y", tensor(rt::ElemType::I32, std::vector<double>(kEvalB, 0.0), {kEvalB})}});
  const double d_eval = max_abs_diff(out.at("logits"), c->eval_logits);
  EXPECT_LE(d_eval, 1e-4) << "eval-mode logits";
  // Eval reads the buffers and never writes them.
  for (const auto& [bname, want] : c->buffers) EXPECT_LE(max_abs_diff(s.buffer(bname), want), kStatTol) << bname;
  std::printf("  %-12s differences to torch: loss %.2e (relative), running statistics %.2e, eval logits %.2e\n",
              name.c_str(), worst_loss, worst_buffer, d_eval);
}

TEST(TorchBatchNorm, GoldenFileIsComplete) {
  const Golden& g = golden();
  ASSERT_EQ(g.batches.size(), 10u);
  for (const auto& [x, y] : g.batches) {
    EXPECT_EQ(x.size(), static_cast<size_t>(kB * kC * kH * kW));
    EXPECT_EQ(y.size(), static_cast<size_t>(kB));
  }
  EXPECT_EQ(g.held_out.size(), static_cast<size_t>(kEvalB * kC * kH * kW));
  ASSERT_EQ(g.cases.size(), 3u);
  for (const Case& c : g.cases) {
    EXPECT_EQ(c.loss.size(), 10u) << c.name;
    EXPECT_EQ(c.buffers.size(), 4u) << c.name;
    EXPECT_EQ(c.eval_logits.size(), static_cast<size_t>(kEvalB * kClasses)) << c.name;
  }
}

TEST(TorchBatchNorm, TrainAndEvalModes) { check_case("plain"); }
TEST(TorchBatchNorm, AccumulatedMicroBatchesMoveTheStatisticsEach) { check_case("accumulate"); }
TEST(TorchBatchNorm, RecomputedBatchNormMovesTheStatisticsOnce) { check_case("checkpoint"); }

}  // namespace
