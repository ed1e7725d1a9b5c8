// The optimizers and learning-rate schedules of the train section against PyTorch's
// torch.optim and torch.optim.lr_scheduler, without Python: tools/torch_optim.py wrote
// PyTorch's per-step learning rates and losses (CPU, float32) of 50 steps of a tiny linear
// regression into tests/train/torch_optim.txt, one case per optimizer and schedule, each
// given as train-section lines. Here each case's lines go into a .model file of the same
// regression, which is compiled as modelrun compiles it (front end, schema defaults, train
// step, fusion, code), given PyTorch's initial parameters and run through a Session on the
// same batches. Tolerances: the learning rate of every step within 1e-12 relative (both
// are closed forms in double; PyTorch's chainable LinearLR accumulates ~1e-15), the loss
// of every step within 1e-5 relative (float32 kernels that sum in another order than
// PyTorch's; measured at most 1.3e-6, rmsprop with momentum).
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <sstream>

#include "compiler/pipeline.h"
#include "tests/train/torch_golden.h"
#include "runtime/session/session.h"

using namespace modelc;

namespace {

constexpr int64_t kB = 8, kI = 4, kO = 3;
constexpr double kLrTolerance = 1e-12;
constexpr double kLossTolerance = 1e-5;

struct Case {
  std::string name;
  std::vector<std::string> train;  // "optimizer = rmsprop(momentum = 0.5)", ...
  std::vector<double> lr, loss;
};

struct Golden {
  std::vector<float> w, b;
  std::vector<std::pair<std::vector<float>, std::vector<float>>> batches;  // x, y
  std::vector<Case> cases;
};

std::vector<double> numbers(std::istringstream& in) {
  std::vector<double> v;
  for (std::string t; in >> t && t != "y";) v.push_back(std::stod(t));
  return v;
}

std::vector<float> floats(const std::vector<double>& v) { return {v.begin(), v.end()}; }

const Golden& golden() {
  static const Golden golden_file = [] {
    Golden g;
    std::ifstream f(std::string(MODELC_SOURCE_DIR) + "/tests/train/torch_optim.txt");
    for (std::string line; std::getline(f, line);) {
      std::istringstream in(line);
      std::string word;
      in >> word;
      if (word == "param") {
        in >> word;
        (word == "w" ? g.w : g.b) = floats(numbers(in));
      } else if (word == "batch") {
        in >> word >> word;  // the index, "x"
        std::vector<float> x = floats(numbers(in));
        g.batches.emplace_back(x, floats(numbers(in)));
      } else if (word == "case") {
        g.cases.emplace_back();
        in >> g.cases.back().name;
      } else if (word == "train") {
        g.cases.back().train.push_back(line.substr(6));
      } else if (word == "lr") {
        g.cases.back().lr = numbers(in);
      } else if (word == "loss") {
        g.cases.back().loss = numbers(in);
      }
    }
    return g;
  }();
  return golden_file;
}

rt::HostTensor tensor(const std::vector<float>& v, std::vector<int64_t> shape) {
  rt::HostTensor t(rt::ElemType::F32, std::move(shape));
  EXPECT_EQ(static_cast<size_t>(t.numel()), v.size());
  for (size_t i = 0; i < v.size(); ++i) t.f32()[i] = v[i];
  return t;
}

std::shared_ptr<rt::Program> compile_case(const Case& c) {
  std::ostringstream out;
  out << "model tiny(B) {\n  input x: f32[B, 4]\n  input y: f32[B, 3]\n  param w: f32[4, 3] = zeros()\n"
         "  param b: f32[3] = zeros()\n  loss = mse_loss(x @ w + b, y)\n  output loss\n}\n\ntrain tiny {\n";
  for (const std::string& l : c.train) out << "  " << l << "\n";
  out << "  batch = 8\n  steps = 50\n}\n";
  return test::compile_model_text(c.name, out.str());
}

using test::rel;

// Trains every case whose name starts with `prefix`; returns how many there were.
int check_cases(const std::string& prefix) {
  const Golden& g = golden();
  int n = 0;
  for (const Case& c : g.cases) {
    if (!c.name.starts_with(prefix)) continue;
    ++n;
    SCOPED_TRACE(c.name);
    auto p = compile_case(c);
    if (!p) continue;
    rt::SessionOptions so;
    so.threads = 1;
    rt::Session s(p, so);
    s.set_param("w", tensor(g.w, {kI, kO}));
    s.set_param("b", tensor(g.b, {kO}));
    double worst_lr = 0, worst_loss = 0;
    for (size_t k = 0; k < c.loss.size(); ++k) {
      const auto& [x, y] = g.batches[k % g.batches.size()];
      const double lr = s.current_lr();
      const float loss = s.train_step({{"x", tensor(x, {kB, kI})}, {"y", tensor(y, {kB, kO})}});
      const double d_lr = c.lr[k] == 0 ? std::fabs(lr) : rel(lr, c.lr[k]);  // the last step of linear()
      worst_lr = std::max(worst_lr, d_lr);
      worst_loss = std::max(worst_loss, rel(loss, c.loss[k]));
      EXPECT_LE(d_lr, kLrTolerance) << "step " << k << ": lr " << lr << ", torch " << c.lr[k];
      EXPECT_LE(rel(loss, c.loss[k]), kLossTolerance) << "step " << k << ": loss " << loss << ", torch " << c.loss[k];
    }
    std::printf("  %-20s max relative difference to torch: lr %.2e, loss %.2e over %zu steps\n", c.name.c_str(),
                worst_lr, worst_loss, c.loss.size());
  }
  EXPECT_GT(n, 0) << "no case '" << prefix << "...' in tests/train/torch_optim.txt";
  return n;
}

TEST(TorchOptim, GoldenFileIsComplete) {
  const Golden& g = golden();
  ASSERT_EQ(g.w.size(), static_cast<size_t>(kI * kO));
  ASSERT_EQ(g.b.size(), static_cast<size_t>(kO));
  ASSERT_FALSE(g.batches.empty());
  for (const auto& [x, y] : g.batches) {
    EXPECT_EQ(x.size(), static_cast<size_t>(kB * kI));
    EXPECT_EQ(y.size(), static_cast<size_t>(kB * kO));
  }
  for (const Case& c : g.cases) {
    EXPECT_EQ(c.lr.size(), 50u) << c.name;
    EXPECT_EQ(c.loss.size(), 50u) << c.name;
  }
}

TEST(TorchOptim, RmsProp) { EXPECT_EQ(check_cases("rmsprop_"), 3); }
TEST(TorchOptim, Adagrad) { EXPECT_EQ(check_cases("adagrad_"), 2); }
TEST(TorchOptim, Lion) { EXPECT_EQ(check_cases("lion_"), 2); }
// torch.optim.Adafactor, and its factored state: w [4, 3] keeps a row_var [4, 1] and a
// col_var [1, 3] (7 numbers, not 12), the vector b a full variance [3], as torch's.
TEST(TorchOptim, Adafactor) {
  EXPECT_EQ(check_cases("adafactor_"), 2);
  for (const Case& c : golden().cases) {
    if (!c.name.starts_with("adafactor_")) continue;
    auto p = compile_case(c);
    ASSERT_TRUE(p);
    rt::Session s(p, rt::SessionOptions{});
    EXPECT_EQ(s.state_names(), (std::vector<std::string>{"w.row_var", "w.col_var", "b.variance"})) << c.name;
    EXPECT_EQ(s.state("w.row_var").shape, (std::vector<int64_t>{kI, 1}));
    EXPECT_EQ(s.state("w.col_var").shape, (std::vector<int64_t>{1, kO}));
    EXPECT_EQ(s.state("b.variance").shape, (std::vector<int64_t>{kO}));
  }
}
TEST(TorchOptim, LinearSchedule) { EXPECT_EQ(check_cases("linear"), 2); }
TEST(TorchOptim, ExponentialSchedule) { EXPECT_EQ(check_cases("exponential"), 2); }
TEST(TorchOptim, PolynomialSchedule) { EXPECT_EQ(check_cases("polynomial"), 2); }
TEST(TorchOptim, OneCycleSchedule) { EXPECT_EQ(check_cases("onecycle"), 2); }
TEST(TorchOptim, CosineSchedule) { EXPECT_EQ(check_cases("cosine"), 1); }
// param_groups (a weight decay and a learning-rate multiple per group, under a schedule too)
// and freeze (no gradient, no state, never updated), as torch.optim's param groups and
// requires_grad = False.
TEST(TorchOptim, ParamGroups) { EXPECT_EQ(check_cases("groups_"), 2); }
TEST(TorchOptim, FrozenParameters) { EXPECT_EQ(check_cases("freeze_"), 1); }

}  // namespace
