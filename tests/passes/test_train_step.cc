// Tests of the train step (compiler/passes/train_step.h): run through the reference
// interpreter on tiny models with random inputs and params, its new params and optimizer
// state after a few steps must equal torch.optim's algorithms computed by hand in double
// (train_step_harness.h) from hand-written gradients; accumulation over micro-batches must
// equal one step on the whole batch; and every error path has its message.
#include <set>

#include "compiler/ir/printer.h"
#include "compiler/ir/verifier.h"
#include "tests/passes/train_step_harness.h"

namespace modelc::test {
namespace {

// Every param and state after 1-3 steps of the train step vs the reference, and the
// step's loss and grad_norm outputs. Relative tolerance: the graph and the reference
// compute the same formulas in double, in a different order.
constexpr double kStepTol = 1e-10;

void check_steps(const Hyper& h, bool cross_entropy = false, int steps = 3) {
  SCOPED_TRACE(h.optimizer + (cross_entropy ? " cross_entropy" : " squared error"));
  TinyModel m = tiny_model(rnd(1, 4), rnd(2, 4), cross_entropy);
  Graph step = build_train_step(m.g, h.options());
  Tensors params = random_params(m), want_params = params, states, want_states;
  for (int64_t t = 1; t <= steps; ++t) {
    SCOPED_TRACE("step " + std::to_string(t));
    Tensors batch = random_batch(m, rnd(1, 3) * h.accumulate);
    Tensors grads;
    double want_loss = hand_gradients(m, want_params, batch, grads);
    double want_norm = reference_step(h, want_params, want_states, grads, t);

    InterpResult r = run_step(step, batch, params, states, h.lr, t);
    expect_near(r.outputs.at("loss"), scalar(want_loss), kStepTol, "loss");
    expect_near(r.outputs.at("grad_norm"), scalar(want_norm), kStepTol, "grad_norm");
    ASSERT_EQ(r.updates.size(), want_params.size() + want_states.size());
    for (const auto& [name, want] : want_params) expect_near(r.updates.at(name), want, kStepTol, name);
    for (const auto& [name, want] : want_states) expect_near(r.updates.at(name), want, kStepTol, name);
    for (const auto& [name, v] : want_params) params[name] = r.updates.at(name);
    for (const auto& [name, v] : want_states) states[name] = r.updates.at(name);
  }
}

TEST(TrainStep, Sgd) { check_steps({.optimizer = "sgd"}); }
TEST(TrainStep, SgdWeightDecay) { check_steps({.optimizer = "sgd", .weight_decay = 0.0625}); }
TEST(TrainStep, SgdMomentum) { check_steps({.optimizer = "sgd", .momentum = 0.75}); }
TEST(TrainStep, SgdMomentumWeightDecay) { check_steps({.optimizer = "sgd", .momentum = 0.5, .weight_decay = 0.25}); }
TEST(TrainStep, SgdNesterov) { check_steps({.optimizer = "sgd", .momentum = 0.75, .nesterov = true}); }
TEST(TrainStep, SgdNesterovWeightDecay) {
  check_steps({.optimizer = "sgd", .momentum = 0.5, .weight_decay = 0.125, .nesterov = true});
}
TEST(TrainStep, Adam) { check_steps({.optimizer = "adam"}); }
TEST(TrainStep, AdamWeightDecay) { check_steps({.optimizer = "adam", .weight_decay = 0.0625}); }
TEST(TrainStep, AdamW) { check_steps({.optimizer = "adamw", .weight_decay = 0.0625}); }
TEST(TrainStep, AdamWWithoutWeightDecay) { check_steps({.optimizer = "adamw", .weight_decay = 0}); }
TEST(TrainStep, AdamWOtherBetas) {
  check_steps({.optimizer = "adamw", .lr = 0.03125, .weight_decay = 0.5, .beta1 = 0.5, .beta2 = 0.75, .eps = 0.25});
}

TEST(TrainStep, CrossEntropySgdNesterov) {
  check_steps({.optimizer = "sgd", .momentum = 0.5, .weight_decay = 0.125, .nesterov = true}, true);
}
TEST(TrainStep, CrossEntropyAdamW) { check_steps({.optimizer = "adamw", .weight_decay = 0.125}, true); }

// Clipping that triggers (the gradients of this model are far above the norm 2^-10) and
// clipping that does not (a bound far above them): both as clip_grad_norm_.
TEST(TrainStep, ClippingTriggers) {
  check_steps({.optimizer = "sgd", .clip = 0x1p-10});
  check_steps({.optimizer = "adam", .weight_decay = 0.0625, .clip = 0x1p-10}, true);
}
TEST(TrainStep, ClippingAboveTheNormChangesNothing) {
  check_steps({.optimizer = "sgd", .momentum = 0.5, .clip = 1e6});
  check_steps({.optimizer = "adamw", .weight_decay = 0.0625, .clip = 1e6});
}

// The clipped step really scales: with a bound of about half the norm, the SGD step is
// max_norm / (norm + 1e-6) times the unclipped one.
TEST(TrainStep, ClippingHalvesTheStep) {
  TinyModel m = tiny_model(3, 2);
  Tensors params = random_params(m), batch = random_batch(m, 4), grads;
  hand_gradients(m, params, batch, grads);
  Tensors p0 = params, s0;
  double norm = reference_step({}, p0, s0, grads, 1);
  Hyper h;
  h.clip = round_to_dtype(norm / 2, DType::F32);  // the step's constants are f32
  InterpResult plain = run_step(build_train_step(m.g, Hyper{}.options()), batch, params, {}, h.lr, 1);
  InterpResult clipped = run_step(build_train_step(m.g, h.options()), batch, params, {}, h.lr, 1);
  double coef = h.clip / (norm + 1e-6);
  for (const char* name : {"w", "b"}) {
    const RefTensor &p = params.at(name), &a = plain.updates.at(name), &c = clipped.updates.at(name);
    for (int64_t i = 0; i < p.numel(); ++i) EXPECT_NEAR(c[i] - p[i], coef * (a[i] - p[i]), 1e-12) << name;
  }
  expect_near(clipped.outputs.at("grad_norm"), scalar(norm), 1e-12, "norm before clipping");
}

// Accumulation: accumulate = k on k micro-batches is one step on their concatenation, for
// a mean loss over equal micro-batches (the runtime and the interpreter split the batch).
void check_accumulation(const Hyper& h, bool cross_entropy) {
  TinyModel m = tiny_model(rnd(1, 4), rnd(2, 4), cross_entropy);
  Hyper whole = h;
  whole.accumulate = 1;
  Graph acc = build_train_step(m.g, h.options()), one = build_train_step(m.g, whole.options());
  Tensors params = random_params(m), states_a, states_b;
  Tensors params_a = params, params_b = params;
  for (int64_t t = 1; t <= 2; ++t) {
    Tensors batch = random_batch(m, rnd(1, 3) * h.accumulate);
    InterpResult a = run_step(acc, batch, params_a, states_a, h.lr, t);
    InterpResult b = run_step(one, batch, params_b, states_b, h.lr, t);
    expect_near(a.outputs.at("loss"), b.outputs.at("loss"), 1e-12, "loss");
    expect_near(a.outputs.at("grad_norm"), b.outputs.at("grad_norm"), 1e-12, "grad_norm");
    ASSERT_EQ(a.updates.size(), b.updates.size());
    for (const auto& [name, v] : b.updates) expect_near(a.updates.at(name), v, 1e-12, name);
    for (NodeId id : acc.states) states_a[acc.node(id).name] = a.updates.at(acc.node(id).name);
    for (NodeId id : one.states) states_b[one.node(id).name] = b.updates.at(one.node(id).name);
    for (const auto& [name, v] : params) {
      params_a[name] = a.updates.at(name);
      params_b[name] = b.updates.at(name);
    }
  }
}

TEST(TrainStep, AccumulationEqualsTheWholeBatch) {
  check_accumulation({.optimizer = "sgd", .momentum = 0.5, .accumulate = 2}, false);
  check_accumulation({.optimizer = "adamw", .weight_decay = 0.0625, .clip = 0x1p-8, .accumulate = 2}, true);
  check_accumulation({.optimizer = "adam", .accumulate = 3}, false);
}
TEST(TrainStep, AccumulationAgainstTheReference) {
  check_steps({.optimizer = "adam", .weight_decay = 0.0625, .accumulate = 2}, false, 2);
}

// --- structure ------------------------------------------------------------------------

TEST(TrainStep, GraphStructure) {
  TinyModel m = tiny_model(3, 2);
  Graph step = build_train_step(m.g, Hyper{.optimizer = "adamw", .clip = 1.0, .accumulate = 2}.options());
  EXPECT_EQ(verify_graph(step), std::vector<std::string>{});
  EXPECT_EQ(step.name, "tiny");
  ASSERT_EQ(step.dims.size(), 1u);
  // Inputs: x and y per micro-batch, then $lr and $t.
  std::vector<std::string> inputs;
  for (NodeId id : step.inputs) {
    const Node& n = step.node(id);
    const AttrValue* micro = n.attrs.find("micro");
    inputs.push_back(n.name + (micro ? "@" + attr_str(*micro) : ""));
  }
  EXPECT_EQ(inputs, (std::vector<std::string>{"x@0", "y@0", "x@1", "y@1", "$lr", "$t"}));
  EXPECT_EQ(step.type(Value{step.inputs[4], 0}).str(), "f32[]");
  EXPECT_EQ(step.type(Value{step.inputs[5], 0}).str(), "f32[]");
  std::vector<std::string> params, states, outputs, updated;
  for (NodeId id : step.params) params.push_back(step.node(id).name);
  for (NodeId id : step.states) {
    states.push_back(step.node(id).name);
    EXPECT_EQ(step.node(id).op, OpKind::State);
  }
  for (const auto& o : step.outputs) outputs.push_back(o.name);
  for (const auto& u : step.updates) updated.push_back(step.node(u.target).name);
  EXPECT_EQ(params, (std::vector<std::string>{"w", "b", "unused"}));
  EXPECT_EQ(states, (std::vector<std::string>{"w.exp_avg", "w.exp_avg_sq", "b.exp_avg", "b.exp_avg_sq",
                                              "unused.exp_avg", "unused.exp_avg_sq"}));
  EXPECT_EQ(outputs, (std::vector<std::string>{"loss", "grad_norm"}));  // `pred` stays with eval
  std::sort(updated.begin(), updated.end());
  std::vector<std::string> want = params;
  want.insert(want.end(), states.begin(), states.end());
  std::sort(want.begin(), want.end());
  EXPECT_EQ(updated, want);
  std::string text = print_graph(step);
  EXPECT_NE(text.find("input \"x\" : f32[B,3] {micro = 1}"), std::string::npos) << text;
  EXPECT_NE(text.find("state \"w.exp_avg\" : f32[3,2]"), std::string::npos) << text;
  EXPECT_NE(text.find("  update w.exp_avg_sq <- %"), std::string::npos) << text;
  EXPECT_NE(text.find("  output grad_norm = %"), std::string::npos) << text;
}

TEST(TrainStep, SgdStatesOnlyWithMomentum) {
  TinyModel m = tiny_model(2, 2);
  Graph plain = build_train_step(m.g, Hyper{.optimizer = "sgd", .weight_decay = 0.5}.options());
  EXPECT_TRUE(plain.states.empty());
  EXPECT_EQ(plain.updates.size(), 3u);
  for (NodeId id : plain.inputs) EXPECT_FALSE(plain.node(id).attrs.has("micro"));
  Graph mom = build_train_step(m.g, Hyper{.optimizer = "sgd", .momentum = 0.9}.options());
  ASSERT_EQ(mom.states.size(), 3u);
  EXPECT_EQ(mom.node(mom.states[0]).name, "w.momentum_buffer");
  EXPECT_EQ(mom.updates.size(), 6u);
}

// The forward graph's names, scopes, locations and checkpoint marks survive the copy.
TEST(TrainStep, KeepsNodeMetadata) {
  TinyModel m = tiny_model(2, 2);
  for (Node& n : m.g.nodes) {
    n.scope = "lin.0";
    n.loc = SourceLoc{1, 7, 3};
    n.checkpoint = n.op == OpKind::Matmul;
  }
  Graph step = build_train_step(m.g, Hyper{.accumulate = 2}.options());
  int matmuls = 0;
  for (const Node& n : step.nodes) {
    if (n.op != OpKind::Matmul || !n.checkpoint) continue;
    ++matmuls;
    EXPECT_EQ(n.scope, "lin.0");
    EXPECT_EQ(n.loc.line, 7u);
  }
  EXPECT_EQ(matmuls, 2);  // one per micro-batch (the backward's matmuls are not marked)
  EXPECT_EQ(step.node(step.params[0]).scope, "lin.0");
}

// --- train_step_options ---------------------------------------------------------------

TEST(TrainStepOptions, FromTheTrainSection) {
  TrainConfig cfg;
  TrainCall opt;
  opt.kind = "adamw";
  opt.args.set("lr", 3e-4);
  opt.args.set("weight_decay", 0.1);
  cfg.optimizer = opt;
  cfg.clip_grad_norm = 1.5;
  cfg.accumulate = 4;
  TrainStepOptions o = train_step_options(cfg);
  EXPECT_EQ(o.optimizer, "adamw");
  EXPECT_EQ(o.optimizer_args, opt.args);
  EXPECT_EQ(o.clip_grad_norm, 1.5);
  EXPECT_EQ(o.accumulate, 4);
}

TEST(TrainStepOptions, DefaultsArePlainSgd) {
  TrainStepOptions o = train_step_options(TrainConfig{});
  EXPECT_EQ(o.optimizer, "sgd");
  EXPECT_EQ(o.optimizer_args.f("momentum"), 0.0);
  EXPECT_EQ(o.optimizer_args.f("weight_decay"), 0.0);
  EXPECT_FALSE(o.optimizer_args.b("nesterov"));
  EXPECT_EQ(o.clip_grad_norm, 0.0);
  EXPECT_EQ(o.accumulate, 1);
  TinyModel m = tiny_model(2, 2);
  EXPECT_TRUE(build_train_step(m.g, o).states.empty());
}

// --- errors ---------------------------------------------------------------------------

TEST(TrainStepErrors, Model) {
  TinyModel m = tiny_model(2, 3);
  Graph no_loss = m.g;
  no_loss.outputs.pop_back();
  expect_user_error([&] { build_train_step(no_loss, {}); }, "model 'tiny' has no output named 'loss' to train on");
  Graph vector_loss = m.g;
  vector_loss.outputs[1].value = vector_loss.outputs[0].value;
  expect_user_error([&] { build_train_step(vector_loss, {}); },
                    "model 'tiny': the output 'loss' must be a floating-point scalar to train on, got f32[B,3]");
  Graph int_loss = tiny_model(2, 3, true).g;
  int_loss.outputs[1].value = op(int_loss, OpKind::Sum, {Value{int_loss.inputs[1], 0}});
  expect_user_error([&] { build_train_step(int_loss, {}); }, "got i32[]");
  Graph no_params;
  no_params.name = "p0";
  NodeId x = add_source(no_params, OpKind::Input, "x", f32({3}));
  no_params.outputs.push_back({"loss", op(no_params, OpKind::Sum, {Value{x, 0}}), {}});
  expect_user_error([&] { build_train_step(no_params, {}); }, "model 'p0' has no params to train");
}

TEST(TrainStepErrors, Options) {
  Graph g = tiny_model(2, 3).g;
  auto fails = [&](Hyper h, const std::string& msg, const std::function<void(TrainStepOptions&)>& edit = {}) {
    TrainStepOptions o = h.options();
    if (edit) edit(o);
    expect_user_error([&] { build_train_step(g, o); }, msg);
  };
  fails({.lr = -0.5}, "sgd lr must be >= 0, got -0.5");
  fails({.accumulate = 0}, "accumulate must be at least 1, got 0");
  fails({.accumulate = -2}, "accumulate must be at least 1, got -2");
  fails({.clip = -1}, "clip_grad_norm must be > 0 (or 0 for no clipping), got -1");
  fails({.optimizer = "adadelta"}, "unknown optimizer 'adadelta'; expected sgd, adam, adamw, rmsprop, adagrad, lion or adafactor");
  fails({.optimizer = "sgd", .nesterov = true}, "sgd with nesterov = true needs a momentum > 0");
  fails({.optimizer = "sgd", .momentum = -0.5}, "sgd momentum must be >= 0, got -0.5");
  fails({.optimizer = "adam", .weight_decay = -1}, "adam weight_decay must be >= 0, got -1");
  fails({.optimizer = "adamw", .beta1 = 1}, "adamw beta1 must be in [0, 1), got 1");
  fails({.optimizer = "adam", .beta2 = -0.1}, "adam beta2 must be in [0, 1), got -0.1");
  fails({.optimizer = "adam", .eps = -1e-8}, "adam eps must be >= 0, got -1e-08");
  fails({.optimizer = "adam"}, "adam has no argument 'momentum'",
        [](TrainStepOptions& o) { o.optimizer_args.set("momentum", 0.9); });
  fails({.optimizer = "sgd"}, "sgd argument 'nesterov' must be true or false, got 1",
        [](TrainStepOptions& o) { o.optimizer_args.set("nesterov", int64_t{1}); });
  fails({.optimizer = "sgd"}, "sgd argument 'momentum' must be a number, got \"a\"",
        [](TrainStepOptions& o) { o.optimizer_args.set("momentum", std::string("a")); });
}

// A train step is not a forward graph: building one from it is a bug of the caller.
TEST(TrainStepErrors, AlreadyATrainStep) {
  Graph step = build_train_step(tiny_model(2, 2).g, Hyper{.optimizer = "adam"}.options());
  EXPECT_THROW(build_train_step(step, {}), InternalError);
}

}  // namespace

// Dropout under accumulation: each micro-batch draws its own mask (as separate forward
// passes would), so a batch of two identical halves does not give the loss of one half.
TEST(TrainStep, MicroBatchesDrawTheirOwnDropoutMasks) {
  TinyModel m = tiny_model(rnd(2, 4), rnd(2, 4));
  Graph& g = m.g;
  // pred = dropout(x @ w + b, p = 0.5), loss = mean((pred - y)^2)
  Graph::Output& pred_out = g.outputs[0];
  Value dropped = op(g, OpKind::Dropout, {pred_out.value}, attrs({{"p", 0.5}, {"key", int64_t{77}}}));
  Value y{g.inputs[1], 0};
  Value r = op(g, OpKind::Sub, {dropped, y});
  g.outputs[1].value = op(g, OpKind::Mean, {op(g, OpKind::Mul, {r, r})});
  Hyper two{.accumulate = 2}, one{.accumulate = 1};
  Graph acc = build_train_step(g, two.options()), whole = build_train_step(g, one.options());
  std::set<int64_t> keys;
  for (const Node& n : acc.nodes)
    if (n.op == OpKind::Dropout) keys.insert(n.attrs.i("key"));
  EXPECT_EQ(keys.size(), 2u) << "the two micro-batch copies of the dropout share a key";
  EXPECT_TRUE(keys.count(77)) << "micro-batch 0 keeps the site's key";

  const int64_t rows = rnd(2, 5);
  Tensors half = random_batch(m, rows), both;
  for (const auto& [name, t] : half) {
    RefTensor d(t.dtype, {2 * rows, t.shape[1]});
    for (int64_t i = 0; i < t.numel(); ++i) d[i] = d[i + t.numel()] = t[i];
    both[name] = d;
  }
  Tensors params = random_params(m);
  InterpResult a = run_step(acc, both, params, {}, 0.1, 1), b = run_step(whole, half, params, {}, 0.1, 1);
  EXPECT_NE(a.outputs.at("loss")[0], b.outputs.at("loss")[0]);
}

}  // namespace modelc::test
