// RMSprop, Adagrad and Lion in the train step: the optimizer state each keeps (named as
// torch.optim's state, so checkpoints and --emit=memory show them), the step count Adagrad
// shares with Adam under fp16 loss scaling, and torch.optim's argument checks. Their
// numbers against PyTorch's are tests/train/test_torch_optim.cc.
#include <gtest/gtest.h>

#include <algorithm>

#include "tests/passes/train_step_harness.h"

namespace modelc::test {
namespace {

TrainStepOptions options(const std::string& kind, std::initializer_list<std::pair<const char*, AttrValue>> args) {
  TrainStepOptions o;
  o.optimizer = kind;
  o.optimizer_args.set("lr", 0.01);
  for (const auto& [k, v] : args) o.optimizer_args.set(k, v);
  return o;
}

std::vector<std::string> state_names(const Graph& step) {
  std::vector<std::string> names;
  for (NodeId id : step.states) names.push_back(step.node(id).name);
  std::sort(names.begin(), names.end());
  return names;
}

TEST(Optimizers, RmsPropStates) {
  const Graph g = tiny_model(2, 2).g;
  EXPECT_EQ(state_names(build_train_step(g, options("rmsprop", {}))),
            (std::vector<std::string>{"b.square_avg", "unused.square_avg", "w.square_avg"}));
  const Graph all = build_train_step(g, options("rmsprop", {{"momentum", 0.9}, {"centered", true}}));
  EXPECT_EQ(state_names(all), (std::vector<std::string>{"b.grad_avg", "b.momentum_buffer", "b.square_avg",
                                                         "unused.grad_avg", "unused.momentum_buffer",
                                                         "unused.square_avg", "w.grad_avg", "w.momentum_buffer",
                                                         "w.square_avg"}));
  EXPECT_EQ(all.updates.size(), 3u + 9u);  // every param and every state
}

TEST(Optimizers, AdagradAndLionStates) {
  const Graph g = tiny_model(2, 2).g;
  const Graph ada = build_train_step(g, options("adagrad", {{"initial_accumulator_value", 0.5}}));
  EXPECT_EQ(state_names(ada), (std::vector<std::string>{"b.sum", "unused.sum", "w.sum"}));
  const Graph lion = build_train_step(g, options("lion", {{"weight_decay", 0.1}}));
  EXPECT_EQ(state_names(lion), (std::vector<std::string>{"b.exp_avg", "unused.exp_avg", "w.exp_avg"}));
  EXPECT_TRUE(std::any_of(lion.nodes.begin(), lion.nodes.end(), [](const Node& n) { return n.op == OpKind::Sign; }));
}

// Adagrad's lr decay counts the applied steps, as Adam's bias correction does: under fp16
// a skipped step is not counted (torch's optimizer.step() is not called on it).
TEST(Optimizers, Fp16CountsAdagradsSteps) {
  const Graph g = tiny_model(2, 2).g;
  for (const char* kind : {"adagrad", "rmsprop", "lion"}) {
    TrainStepOptions o = options(kind, {});
    o.precision = "fp16";
    const std::vector<std::string> names = state_names(build_train_step(g, o));
    const bool counted = std::find(names.begin(), names.end(), "loss_scaler.skipped_steps") != names.end();
    EXPECT_EQ(counted, std::string(kind) == "adagrad") << kind;
  }
}

// Adagrad's state starts at zero (as all state does) and holds the sum less
// initial_accumulator_value: one step from zero state is torch's first step.
TEST(Optimizers, AdagradFirstStepWithAnInitialAccumulator) {
  TinyModel m = tiny_model(3, 2);
  Tensors batch = random_batch(m, 4), params = random_params(m), grads;
  hand_gradients(m, params, batch, grads);
  const double lr = 0.25, iav = 0.5, eps = 1e-10;
  Graph step = build_train_step(m.g, options("adagrad", {{"initial_accumulator_value", iav}, {"eps", eps}}));
  InterpResult r = run_step(step, batch, params, {}, lr, 1);
  for (const auto& [name, p] : params) {
    const RefTensor& g = grads.at(name);
    for (int64_t i = 0; i < p.numel(); ++i) {
      const double want = p[i] - lr * g[i] / (std::sqrt(iav + g[i] * g[i]) + eps);
      EXPECT_NEAR(r.updates.at(name)[i], want, 1e-6 * (1 + std::fabs(want))) << name << "[" << i << "]";
      EXPECT_NEAR(r.updates.at(name + ".sum")[i], g[i] * g[i], 1e-6 * (1 + g[i] * g[i])) << name << "[" << i << "]";
    }
  }
}

TEST(Optimizers, TorchsArgumentChecks) {
  const Graph g = tiny_model(2, 2).g;
  auto fails = [&](TrainStepOptions o, const std::string& msg) { expect_user_error([&] { build_train_step(g, o); }, msg); };
  fails(options("rmsprop", {{"alpha", 1.0}}), "rmsprop alpha must be in [0, 1), got 1");
  fails(options("rmsprop", {{"momentum", -0.5}}), "rmsprop momentum must be >= 0, got -0.5");
  fails(options("rmsprop", {{"beta1", 0.9}}), "rmsprop has no argument 'beta1'");
  fails(options("rmsprop", {{"centered", 1.0}}), "rmsprop argument 'centered' must be true or false, got 1.0");
  fails(options("adagrad", {{"lr_decay", -0.1}}), "adagrad lr_decay must be >= 0, got -0.1");
  fails(options("adagrad", {{"initial_accumulator_value", -1.0}}), "adagrad initial_accumulator_value must be >= 0, got -1");
  fails(options("adagrad", {{"eps", -1e-10}}), "adagrad eps must be >= 0, got -1e-10");
  fails(options("lion", {{"beta2", 1.0}}), "lion beta2 must be in [0, 1), got 1");
  fails(options("lion", {{"eps", 1e-8}}), "lion has no argument 'eps'");
}

}  // namespace
}  // namespace modelc::test
