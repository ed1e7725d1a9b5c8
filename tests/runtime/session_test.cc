// Session: deterministic parameter initialisation (seed, name, thread count), the
// statistics of normal and uniform inits, parameter and state access and their errors,
// feeding ($lr from the schedule, $t, $seed, $step), micro-batch splitting, and a small
// SGD program trained by hand-written host kernels.
#include "runtime/session/session.h"

#include <fmt/format.h>

#include <cmath>
#include <limits>
#include <numbers>

#include "tests/runtime/program_builder.h"
#include "tests/runtime/rt_harness.h"

namespace modelc::rt::test {

namespace {

Init normal(double mean, double std) { return {Init::Kind::Normal, mean, std}; }
Init uniform(double lo, double hi) { return {Init::Kind::Uniform, lo, hi}; }

// A program with parameters and states but trivial functions: train_step feeds $lr and $t
// and returns them as `loss` and `grad_norm`; eval copies its input x (split into
// `micro` parts) to outputs part0, part1, ...
std::shared_ptr<const Program> make_program(uint32_t micro = 1, bool extra_param = false) {
  ProgramBuilder b;
  b.p.model = "toy";
  b.p.train.seed = 1234;
  if (extra_param) b.buffer("aaa", BufferRole::Param, {b.dim(50)}, ElemType::F32, normal(0, 1));
  b.buffer("w", BufferRole::Param, {b.dim(300), b.dim(200)}, ElemType::F32, normal(0.5, 2.0));
  b.buffer("u", BufferRole::Param, {b.dim(100000)}, ElemType::F32, uniform(-3, 5));
  b.buffer("ones", BufferRole::Param, {b.dim(7)}, ElemType::F32, {Init::Kind::Ones, 0, 0});
  b.buffer("zeros", BufferRole::Param, {b.dim(2), b.dim(3)}, ElemType::F32, {});
  b.buffer("w.m", BufferRole::State, {b.dim(300), b.dim(200)});
  uint32_t lr = b.buffer("$lr", BufferRole::Input, {});
  uint32_t t = b.buffer("$t", BufferRole::Input, {});
  uint32_t loss = b.buffer("loss", BufferRole::Output, {});
  uint32_t gn = b.buffer("grad_norm", BufferRole::Output, {});
  {
    Function& f = b.function("train_step");
    f.feeds = {{"$lr", 0, lr}, {"$t", 0, t}};
    f.instrs = {ProgramBuilder::library("copy", {lr}, {loss}), ProgramBuilder::library("copy", {t}, {gn})};
    f.outputs = {{"loss", loss}, {"grad_norm", gn}};
  }
  std::vector<uint32_t> xs, parts;
  for (uint32_t m = 0; m < micro; ++m) {
    xs.push_back(b.buffer("x", BufferRole::Input, {b.dim("B"), b.dim(3)}));
    parts.push_back(b.buffer("part" + std::to_string(m), BufferRole::Output, {b.dim("B"), b.dim(3)}));
  }
  Function& e = b.function("eval");
  e.micro_batches = micro;
  for (uint32_t m = 0; m < micro; ++m) {
    e.feeds.push_back({"x", m, xs[m]});
    e.instrs.push_back(ProgramBuilder::library("copy", {xs[m]}, {parts[m]}));
    e.outputs.push_back({"part" + std::to_string(m), parts[m]});
  }
  return std::make_shared<const Program>(std::move(b.p));
}

double mean_of(const HostTensor& t) {
  double s = 0;
  for (int64_t i = 0; i < t.numel(); ++i) s += t.f32()[i];
  return s / static_cast<double>(t.numel());
}

double var_of(const HostTensor& t) {
  double m = mean_of(t), s = 0;
  for (int64_t i = 0; i < t.numel(); ++i) s += (t.f32()[i] - m) * (t.f32()[i] - m);
  return s / static_cast<double>(t.numel());
}

}  // namespace

TEST(Session, InitIsDeterministicAcrossThreadsAndParams) {
  auto seed = static_cast<uint64_t>(rnd(0, 1 << 30));
  Session a(make_program(), {.threads = 1, .seed = seed});
  Session c(make_program(), {.threads = 3, .seed = seed});
  Session other_params(make_program(1, true), {.threads = 2, .seed = seed});
  for (const std::string& n : a.param_names()) {
    EXPECT_EQ(a.param(n).bytes, c.param(n).bytes) << n << " depends on the thread count";
    EXPECT_EQ(a.param(n).bytes, other_params.param(n).bytes) << n << " depends on the other parameters";
  }
  Session d(make_program(), {.threads = 2, .seed = seed + 1});
  EXPECT_NE(a.param("w").bytes, d.param("w").bytes);
  EXPECT_NE(a.param("u").bytes, d.param("u").bytes);
  // Two params of the same shape and init under one seed still differ (keyed by name).
  EXPECT_EQ(a.seed(), seed);
  Session dflt(make_program());
  EXPECT_EQ(dflt.seed(), 1234u);  // the Program's train.seed
}

TEST(Session, InitStatistics) {
  Session s(make_program(), {.threads = 2, .seed = static_cast<uint64_t>(rnd(0, 1 << 30))});
  HostTensor w = s.param("w");  // normal(0.5, 2), 60000 draws
  double n = static_cast<double>(w.numel());
  EXPECT_NEAR(mean_of(w), 0.5, 5 * 2.0 / std::sqrt(n));
  EXPECT_NEAR(std::sqrt(var_of(w)), 2.0, 0.03);
  int64_t within1 = 0;
  for (int64_t i = 0; i < w.numel(); ++i) within1 += std::abs(w.f32()[i] - 0.5) < 2.0;
  EXPECT_NEAR(static_cast<double>(within1) / n, 0.6827, 0.01);
  HostTensor u = s.param("u");  // uniform(-3, 5), 100000 draws
  for (int64_t i = 0; i < u.numel(); ++i) {
    ASSERT_GE(u.f32()[i], -3.0f);
    ASSERT_LT(u.f32()[i], 5.0f);
  }
  double un = static_cast<double>(u.numel()), sd = 8 / std::sqrt(12.0);
  EXPECT_NEAR(mean_of(u), 1.0, 5 * sd / std::sqrt(un));
  EXPECT_NEAR(var_of(u), 64.0 / 12.0, 0.1);
  HostTensor ones = s.param("ones"), zeros = s.param("zeros");
  for (int i = 0; i < 7; ++i) EXPECT_EQ(ones.f32()[i], 1.0f);
  for (int i = 0; i < 6; ++i) EXPECT_EQ(zeros.f32()[i], 0.0f);
  HostTensor m = s.state("w.m");
  for (int64_t i = 0; i < m.numel(); ++i) ASSERT_EQ(m.f32()[i], 0.0f);
}

// constant(value) in the language (lower_init): every element is the value.
TEST(Session, ConstantInitializerFillsTheValue) {
  ProgramBuilder b;
  b.p.model = "toy";
  b.buffer("c", BufferRole::Param, {b.dim(5), b.dim(3)}, ElemType::F32, {Init::Kind::Constant, -0.375, 0});
  b.function("train_step");
  b.function("eval");
  Session s(std::make_shared<const Program>(std::move(b.p)), {.threads = 1});
  HostTensor c = s.param("c");
  for (int64_t i = 0; i < c.numel(); ++i) ASSERT_EQ(c.f32()[i], -0.375f);
}

TEST(Session, ParamAndStateAccess) {
  Session s(make_program(), {.threads = 1});
  EXPECT_EQ(s.param_names(), (std::vector<std::string>{"w", "u", "ones", "zeros"}));
  EXPECT_EQ(s.state_names(), (std::vector<std::string>{"w.m"}));
  HostTensor z = random_f32({2, 3});
  s.set_param("zeros", z);
  EXPECT_EQ(s.param("zeros").bytes, z.bytes);
  HostTensor m = random_f32({300, 200});
  s.set_state("w.m", m);
  EXPECT_EQ(s.state("w.m").bytes, m.bytes);
  expect_error([&] { s.param("nope"); }, {"model 'toy' has no parameter 'nope'"});
  expect_error([&] { s.state("w"); }, {"no optimizer state 'w'"});
  expect_error([&] { s.set_param("zeros", random_f32({3, 2})); }, {"set_param 'zeros'", "got f32[3,2], expected f32[2,3]"});
  expect_error([&] { s.set_param("zeros", HostTensor(ElemType::I32, {2, 3})); }, {"got i32[2,3]"});
  HostTensor short_bytes = random_f32({2, 3});
  short_bytes.bytes.resize(4);
  expect_error([&] { s.set_param("zeros", short_bytes); }, {"holds 4 bytes"});
  expect_error([&] { s.set_state("w.m", random_f32({1})); }, {"set_state 'w.m'"});
  expect_error([&] { s.set_step(-1); }, {"the step to continue from must be 0 or more, got -1"});
  s.set_step(10);
  EXPECT_EQ(s.step(), 10);
}

TEST(Session, FeedsTheScheduleAndStep) {
  auto check = [](Schedule sch, int64_t total, const std::vector<std::pair<int64_t, double>>& expected) {
    ProgramBuilder b;
    auto base = make_program();
    Program p = *base;
    p.train.schedule = sch;
    Session s(std::make_shared<const Program>(p), {.threads = 1, .total_steps = total});
    EXPECT_TRUE(std::isnan(s.last_grad_norm()));
    for (auto [step, lr] : expected) {
      s.set_step(step);
      float got = s.train_step({});
      EXPECT_NEAR(got, lr, 1e-6 * std::max(1.0, lr)) << sch.kind << " at step " << step;
      EXPECT_EQ(s.last_grad_norm(), static_cast<float>(step + 1)) << "$t";
      EXPECT_EQ(s.step(), step + 1);
      EXPECT_NEAR(sch.lr_at(step, total), lr, 1e-12);
    }
  };
  Schedule constant;
  constant.lr = 0.01;
  check(constant, 100, {{0, 0.01}, {57, 0.01}});
  Schedule step;
  step.kind = "step", step.lr = 0.1, step.every = 10, step.gamma = 0.5;
  check(step, 100, {{0, 0.1}, {9, 0.1}, {10, 0.05}, {25, 0.025}, {99, 0.1 * std::pow(0.5, 9)}});
  Schedule cos;
  cos.kind = "cosine", cos.lr = 1.0, cos.warmup = 10, cos.min_lr = 0.1;
  auto cosine = [](double progress) { return 0.1 + 0.5 * 0.9 * (1 + std::cos(std::numbers::pi * progress)); };
  check(cos, 110, {{0, 0.1}, {4, 0.5}, {9, 1.0}, {10, 1.0}, {35, cosine(0.25)}, {60, cosine(0.5)}, {109, cosine(0.99)},
                   {200, 0.1}});
  // The schedules of plan format 3 (their curves against PyTorch's: tests/train/test_torch_optim.cc),
  // here at their ends: end_factor at the last step, a run no longer than the warm-up, past the end.
  Schedule lin;
  lin.kind = "linear", lin.lr = 1.0, lin.warmup = 4, lin.end_factor = 0.25;
  check(lin, 14, {{0, 0.25}, {3, 1.0}, {4, 1.0}, {8, 1.0 - 0.75 * 4 / 9}, {13, 0.25}, {20, 0.25}});
  check(lin, 5, {{3, 1.0}, {4, 0.25}});
  Schedule ex;
  ex.kind = "exponential", ex.lr = 2.0, ex.warmup = 2, ex.gamma = 0.5;
  check(ex, 10, {{0, 1.0}, {1, 2.0}, {2, 2.0}, {5, 0.25}});
  Schedule poly;
  poly.kind = "polynomial", poly.lr = 1.0, poly.power = 2.0;
  check(poly, 10, {{0, 1.0}, {5, 0.25}, {9, 0.01}, {10, 0.0}, {12, 0.0}});
  Schedule one;
  one.kind = "onecycle", one.lr = 1.0, one.pct_start = 0.5, one.div_factor = 4, one.final_div_factor = 2.5;
  // 11 steps: up from 0.25 over steps 0..4.5, down to 0.1 at step 10.
  check(one, 11, {{0, 0.25}, {10, 0.1}, {20, 0.1}});
  EXPECT_NEAR(one.lr_at(4, 11), 0.25 + 0.75 * 0.5 * (1 - std::cos(std::numbers::pi * 4 / 4.5)), 1e-12);
  EXPECT_NEAR(one.lr_at(5, 11), 0.1 + 0.9 * 0.5 * (1 + std::cos(std::numbers::pi * 0.5 / 5.5)), 1e-12);
  one.pct_start = 0;  // no rise: the first step is already on the way down
  EXPECT_NEAR(one.lr_at(0, 10), 0.1 + 0.9 * 0.5 * (1 + std::cos(std::numbers::pi * 0.1)), 1e-12);
  EXPECT_TRUE(lin.depends_on_length() && poly.depends_on_length() && one.depends_on_length());
  EXPECT_FALSE(ex.depends_on_length() || step.depends_on_length() || constant.depends_on_length());
}

// The plateau schedule: its warm-up, then lr times the factor the watch has reached
// (Session::set_lr_factor), which the next step is fed; a factor that is not a finite
// positive number is refused.
TEST(Session, FeedsThePlateauFactor) {
  Program p = *make_program();
  p.train.schedule.kind = "plateau", p.train.schedule.lr = 0.2, p.train.schedule.warmup = 2;
  Session s(std::make_shared<const Program>(p), {.threads = 1, .total_steps = 10});
  EXPECT_NEAR(s.train_step({}), 0.1, 1e-7);
  EXPECT_NEAR(s.train_step({}), 0.2, 1e-7);
  s.set_lr_factor(0.25);
  EXPECT_EQ(s.lr_factor(), 0.25);
  EXPECT_NEAR(s.current_lr(), 0.05, 1e-15);
  EXPECT_NEAR(s.train_step({}), 0.05, 1e-8);
  for (double bad : {0.0, -1.0, std::numeric_limits<double>::infinity(), std::numeric_limits<double>::quiet_NaN()})
    expect_error([&] { s.set_lr_factor(bad); }, {"the learning rate's factor must be a finite number greater than 0"});
  EXPECT_EQ(s.lr_factor(), 0.25);
}

namespace {
// out0 = sizes[0], out1 = sizes[1] (extent 1).
void k_two_sizes(void* const* b, const int64_t* s, int64_t, int64_t) {
  *static_cast<float*>(b[0]) = static_cast<float>(s[0]);
  *static_cast<float*>(b[1]) = static_cast<float>(s[1]);
}
}  // namespace

TEST(Session, BindsSeedAndStepSymbols) {
  ProgramBuilder b;
  uint32_t loss = b.buffer("loss", BufferRole::Output, {});
  uint32_t gn = b.buffer("grad_norm", BufferRole::Output, {});
  uint32_t k = b.kernel("k_two_sizes", k_two_sizes);
  Function& f = b.function("train_step");
  f.instrs = {ProgramBuilder::kernel_call(k, {}, {loss, gn}, {b.dim("$step"), b.dim("$seed")}, b.dim(1))};
  f.outputs = {{"loss", loss}, {"grad_norm", gn}};
  Session s(std::make_shared<const Program>(b.p), {.threads = 2, .seed = 77});
  for (int64_t step = 0; step < 3; ++step) {
    EXPECT_EQ(s.train_step({}), static_cast<float>(step));
    EXPECT_EQ(s.last_grad_norm(), 77.0f);
  }
  s.set_step(41);
  EXPECT_EQ(s.train_step({}), 41.0f);
}

TEST(Session, SplitsMicroBatches) {
  Session s(make_program(2), {.threads = 2});
  int64_t B = 2 * rnd(1, 10);
  HostTensor x = random_f32({B, 3});
  auto out = s.eval({{"x", x}});
  ASSERT_EQ(out.at("part0").shape, (std::vector<int64_t>{B / 2, 3}));
  size_t half = x.bytes.size() / 2;
  EXPECT_TRUE(std::equal(x.bytes.begin(), x.bytes.begin() + static_cast<int64_t>(half), out.at("part0").bytes.begin()));
  EXPECT_TRUE(std::equal(x.bytes.begin() + static_cast<int64_t>(half), x.bytes.end(), out.at("part1").bytes.begin()));
  EXPECT_EQ(s.step(), 0) << "eval does not advance the step";
  expect_error([&] { s.eval({{"x", random_f32({B + 1, 3})}}); },
               {"function 'eval'", "input 'x' has shape [" + std::to_string(B + 1) + ",3]", "does not split into 2"});
  expect_error([&] { s.eval({{"x", random_f32({B, 4})}}); }, {"input 'x' (micro-batch 0) has shape"});
  HostTensor torn = random_f32({B, 3});
  torn.bytes.resize(4);
  expect_error([&] { s.eval({{"x", torn}}); }, {"input 'x' holds 4 bytes"});
}

TEST(Session, FeedErrors) {
  Session s(make_program(), {.threads = 1});
  expect_error([&] { s.eval({}); }, {"function 'eval'", "missing input 'x'"});
  expect_error([&] { s.eval({{"x", random_f32({2, 3})}, {"y", random_f32({2})}}); }, {"the model has no input 'y'"});
  expect_error([&] { s.train_step({{"$lr", random_f32({})}}); }, {"no input '$lr'"});
  ProgramBuilder b;
  b.p.model = "m";
  b.buffer("w", BufferRole::Param, {b.dim("B")});
  expect_error([&] { Session bad(std::make_shared<const Program>(b.p)); },
               {"model 'm'", "parameter 'w' has shape [B], which is not constant"});
  expect_error([&] { Session none(nullptr); }, {"no program"});
  ProgramBuilder e;
  e.p.model = "empty";
  Session empty(std::make_shared<const Program>(e.p), {.threads = 1});
  expect_error([&] { empty.train_step({}); }, {"model 'empty' has no function 'train_step'"});
}

// An index input (BufferDesc::index_limit) is checked on every call, in each micro-batch,
// with the value's position in the caller's tensor; values in range pass untouched.
TEST(Session, IndexInputsOutOfRangeAreRefused) {
  ProgramBuilder b;
  b.p.model = "ix";
  std::vector<uint32_t> ids;
  for (uint32_t m = 0; m < 2; ++m) {
    ids.push_back(b.buffer("ids", BufferRole::Input, {b.dim("B"), b.dim(3)}, ElemType::I32));
    b.p.buffers.back().index_limit = 7;
    b.p.buffers.back().index_note = "the rows of the table of embedding at m.model:3:4";
  }
  uint32_t out = b.buffer("out", BufferRole::Output, {b.dim("B"), b.dim(3)}, ElemType::I32);
  Function& e = b.function("eval");
  e.micro_batches = 2;
  e.feeds = {{"ids", 0, ids[0]}, {"ids", 1, ids[1]}};
  e.instrs = {ProgramBuilder::library("copy", {ids[1]}, {out})};
  e.outputs = {{"out", out}};
  Session s(std::make_shared<const Program>(std::move(b.p)), {.threads = 1});
  const int64_t B = 2 * rnd(1, 4);
  HostTensor x(ElemType::I32, {B, 3});
  for (int64_t i = 0; i < x.numel(); ++i) x.i32()[i] = static_cast<int32_t>(rnd(0, 6));
  EXPECT_EQ(s.eval({{"ids", x}}).at("out").bytes,
            std::vector<uint8_t>(x.bytes.begin() + static_cast<int64_t>(x.bytes.size() / 2), x.bytes.end()));
  for (int32_t bad : {7, -1, 1 << 30}) {
    const int64_t at = rnd(0, x.numel() - 1);
    HostTensor y = x;
    y.i32()[at] = bad;
    expect_error([&] { s.eval({{"ids", y}}); },
                 {fmt::format("function 'eval': input 'ids' holds {} at [{},{}], outside [0, 7): the rows of the table "
                              "of embedding at m.model:3:4", bad, at / 3, at % 3)});
  }
}

// An index input's ignored value (BufferDesc::index_ignore: cross_entropy's ignore_index)
// passes the check; every other value outside the range is refused, and the message says
// which value is ignored.
TEST(Session, IgnoredIndexPasses) {
  ProgramBuilder b;
  b.p.model = "ig";
  const uint32_t ids = b.buffer("y", BufferRole::Input, {b.dim("B")}, ElemType::I32);
  b.p.buffers.back().index_limit = 5;
  b.p.buffers.back().index_ignore = -100;
  b.p.buffers.back().index_note = "the classes of cross_entropy at m.model:9:10";
  const uint32_t out = b.buffer("out", BufferRole::Output, {b.dim("B")}, ElemType::I32);
  Function& e = b.function("eval");
  e.feeds = {{"y", 0, ids}};
  e.instrs = {ProgramBuilder::library("copy", {ids}, {out})};
  e.outputs = {{"out", out}};
  Session s(std::make_shared<const Program>(std::move(b.p)), {.threads = 1});
  const int64_t B = rnd(2, 9);
  HostTensor x(ElemType::I32, {B});
  for (int64_t i = 0; i < B; ++i) x.i32()[i] = rnd(0, 1) ? -100 : static_cast<int32_t>(rnd(0, 4));
  EXPECT_EQ(s.eval({{"y", x}}).at("out").bytes, x.bytes);
  for (int32_t bad : {5, -1, -99}) {
    HostTensor y = x;
    const int64_t at = rnd(0, B - 1);
    y.i32()[at] = bad;
    expect_error([&] { s.eval({{"y", y}}); },
                 {fmt::format("input 'y' holds {} at [{}], outside [0, 5), and not the ignored index -100: the classes "
                              "of cross_entropy at m.model:9:10", bad, at)});
  }
}

// y = x @ w with w f32[4,1]; one SGD step on the mean squared error, by host kernels.
namespace {
// loss = mean((pred - y)^2); sizes: [B]
void k_mse(void* const* b, const int64_t* s, int64_t, int64_t) {
  auto *pred = static_cast<const float*>(b[0]), *y = static_cast<const float*>(b[1]);
  double acc = 0;
  for (int64_t i = 0; i < s[0]; ++i) acc += (pred[i] - y[i]) * (pred[i] - y[i]);
  *static_cast<float*>(b[2]) = static_cast<float>(acc / static_cast<double>(s[0]));
}
// w_new[k] = w[k] - lr * 2/B * sum_i x[i,k] (pred[i] - y[i]); sizes: [B]
void k_sgd(void* const* b, const int64_t* s, int64_t begin, int64_t end) {
  auto *x = static_cast<const float*>(b[0]), *pred = static_cast<const float*>(b[1]), *y = static_cast<const float*>(b[2]);
  auto *w = static_cast<const float*>(b[3]), *lr = static_cast<const float*>(b[4]);
  auto* wn = static_cast<float*>(b[5]);
  for (int64_t k = begin; k < end; ++k) {
    double g = 0;
    for (int64_t i = 0; i < s[0]; ++i) g += x[i * 4 + k] * (pred[i] - y[i]);
    wn[k] = static_cast<float>(w[k] - *lr * 2.0 * g / static_cast<double>(s[0]));
  }
}
}  // namespace

TEST(Session, TrainsALinearModel) {
  ProgramBuilder b;
  b.p.model = "linreg";
  b.p.train.schedule.lr = 0.1;
  uint32_t x = b.buffer("x", BufferRole::Input, {b.dim("B"), b.dim(4)});
  uint32_t y = b.buffer("y", BufferRole::Input, {b.dim("B"), b.dim(1)});
  uint32_t lr = b.buffer("$lr", BufferRole::Input, {});
  uint32_t w = b.buffer("w", BufferRole::Param, {b.dim(4), b.dim(1)}, ElemType::F32, normal(0, 0.1));
  uint32_t pred = b.buffer("pred", BufferRole::Temp, {b.dim("B"), b.dim(1)});
  uint32_t wn = b.buffer("w_new", BufferRole::Temp, {b.dim(4), b.dim(1)});
  uint32_t loss = b.buffer("loss", BufferRole::Output, {});
  uint32_t kl = b.kernel("k_mse", k_mse), ks = b.kernel("k_sgd", k_sgd);
  Function& f = b.function("train_step");
  f.feeds = {{"x", 0, x}, {"y", 0, y}, {"$lr", 0, lr}};
  f.instrs = {ProgramBuilder::library("matmul", {x, w}, {pred}),
              ProgramBuilder::kernel_call(kl, {pred, y}, {loss}, {b.dim("B")}, b.dim(1)),
              ProgramBuilder::kernel_call(ks, {x, pred, y, w, lr}, {wn}, {b.dim("B")}, b.dim(4))};
  f.outputs = {{"loss", loss}};
  f.updates = {{wn, w}};
  Session s(std::make_shared<const Program>(b.p), {.threads = 2, .seed = 7});
  const float truth[4] = {1.0f, -2.0f, 0.5f, 3.0f};
  float first = 0, last = 0;
  for (int step = 0; step < 200; ++step) {
    HostTensor xb = random_f32({32, 4}), yb(ElemType::F32, {32, 1});
    for (int i = 0; i < 32; ++i) {
      double acc = 0;
      for (int k = 0; k < 4; ++k) acc += xb.f32()[i * 4 + k] * truth[k];
      yb.f32()[i] = static_cast<float>(acc);
    }
    last = s.train_step({{"x", xb}, {"y", yb}});
    if (step == 0) first = last;
  }
  EXPECT_LT(last, first * 1e-3) << "first loss " << first;
  for (int k = 0; k < 4; ++k) EXPECT_NEAR(s.param("w").f32()[k], truth[k], 0.05);
  EXPECT_EQ(s.step(), 200);
}

}  // namespace modelc::rt::test
