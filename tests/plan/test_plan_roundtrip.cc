// .plan round trips: every example model compiled in process, written as a plan and read
// back trains bit-identically (losses, parameters, optimizer state, eval outputs); every
// field of a Program survives; plans with PTX keep it; several plans live side by side.
#include <gtest/gtest.h>

#include <unistd.h>

#include <bit>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>

#include "compiler/codegen/object.h"
#include "compiler/pipeline.h"
#include "runtime/session/plan.h"
#include "runtime/session/plan_codec.h"
#include "tests/plan/plan_harness.h"

namespace fs = std::filesystem;
using namespace modelc;

namespace {

struct Compiled {
  std::shared_ptr<rt::Program> program;
  std::string shared_object;
};

Compiled compile(const std::string& path, std::vector<std::pair<std::string, std::string>> defines = {},
                 const std::string& ptx_target = "") {
  CompileOptions o;
  o.defines = std::move(defines);
  Compilation c(o);
  ProgramOptions po;
  Compiled r;
  po.shared_object = &r.shared_object;
  po.ptx_target = ptx_target;
  r.program = compile_program(c, path, po);
  EXPECT_TRUE(r.program) << c.diags().render();
  return r;
}

struct TempDir {
  fs::path path;
  TempDir() {
    std::string t = (fs::temp_directory_path() / "modelc-plan-test-XXXXXX").string();
    path = mkdtemp(t.data());
  }
  ~TempDir() { fs::remove_all(path); }
  std::string file(const std::string& name) const { return (path / name).string(); }
};

uint64_t bits(double d) { return std::bit_cast<uint64_t>(d); }

void expect_same_size(const rt::SizeExpr& a, const rt::SizeExpr& b, const std::string& what) {
  ASSERT_EQ(a.terms.size(), b.terms.size()) << what;
  for (size_t i = 0; i < a.terms.size(); ++i) {
    EXPECT_EQ(a.terms[i].coef, b.terms[i].coef) << what;
    EXPECT_EQ(a.terms[i].symbols, b.terms[i].symbols) << what;
  }
}

void expect_same_sizes(const std::vector<rt::SizeExpr>& a, const std::vector<rt::SizeExpr>& b, const std::string& what) {
  ASSERT_EQ(a.size(), b.size()) << what;
  for (size_t i = 0; i < a.size(); ++i) expect_same_size(a[i], b[i], what);
}

// Every field of two Programs but `code` and the host pointers; floats bit for bit.
void expect_same_program(const rt::Program& a, const rt::Program& b, bool loaded = true) {
  EXPECT_EQ(a.model, b.model);
  EXPECT_EQ(a.symbols, b.symbols);
  ASSERT_EQ(a.buffers.size(), b.buffers.size());
  for (size_t i = 0; i < a.buffers.size(); ++i) {
    const rt::BufferDesc &x = a.buffers[i], &y = b.buffers[i];
    EXPECT_EQ(x.name, y.name);
    EXPECT_EQ(x.type, y.type) << x.name;
    EXPECT_EQ(x.role, y.role) << x.name;
    EXPECT_EQ(x.init.kind, y.init.kind) << x.name;
    EXPECT_EQ(bits(x.init.a), bits(y.init.a)) << x.name;
    EXPECT_EQ(x.index_limit, y.index_limit) << x.name;
    EXPECT_EQ(x.index_note, y.index_note) << x.name;
    EXPECT_EQ(x.index_ignore, y.index_ignore) << x.name;
    EXPECT_EQ(x.where, y.where) << x.name;
    EXPECT_EQ(bits(x.init.b), bits(y.init.b)) << x.name;
    expect_same_sizes(x.shape, y.shape, x.name);
  }
  ASSERT_EQ(a.codelets.size(), b.codelets.size());
  for (size_t i = 0; i < a.codelets.size(); ++i) {
    const rt::CodeletDesc &x = a.codelets[i], &y = b.codelets[i];
    EXPECT_EQ(x.name, y.name);
    EXPECT_EQ(x.source, y.source) << x.name;
    EXPECT_EQ(x.gpu_mapping, y.gpu_mapping) << x.name;
    EXPECT_EQ(x.gpu_block, y.gpu_block) << x.name;
    EXPECT_EQ(x.nodes, y.nodes) << x.name;
    EXPECT_EQ(x.operand_types, y.operand_types) << x.name;
    EXPECT_EQ(x.operand_shapes, y.operand_shapes) << x.name;
    EXPECT_EQ(x.inputs, y.inputs) << x.name;
    EXPECT_EQ(x.sizes, y.sizes) << x.name;
    EXPECT_EQ(x.extent, y.extent) << x.name;
    if (loaded) {
      EXPECT_NE(y.host, nullptr) << x.name;
    }
  }
  ASSERT_EQ(a.functions.size(), b.functions.size());
  for (size_t f = 0; f < a.functions.size(); ++f) {
    const rt::Function &x = a.functions[f], &y = b.functions[f];
    EXPECT_EQ(x.name, y.name);
    EXPECT_EQ(x.micro_batches, y.micro_batches);
    EXPECT_EQ(x.outputs, y.outputs);
    EXPECT_EQ(x.updates, y.updates);
    ASSERT_EQ(x.feeds.size(), y.feeds.size());
    for (size_t i = 0; i < x.feeds.size(); ++i) {
      EXPECT_EQ(x.feeds[i].name, y.feeds[i].name);
      EXPECT_EQ(x.feeds[i].micro, y.feeds[i].micro);
      EXPECT_EQ(x.feeds[i].buffer, y.feeds[i].buffer);
    }
    ASSERT_EQ(x.instrs.size(), y.instrs.size());
    for (size_t i = 0; i < x.instrs.size(); ++i) {
      const rt::Instr &p = x.instrs[i], &q = y.instrs[i];
      const std::string what = x.name + " instr " + std::to_string(i);
      EXPECT_EQ(p.kind, q.kind) << what;
      EXPECT_EQ(p.codelet, q.codelet) << what;
      EXPECT_EQ(p.op, q.op) << what;
      EXPECT_EQ(p.inputs, q.inputs) << what;
      EXPECT_EQ(p.outputs, q.outputs) << what;
      expect_same_sizes(p.sizes, q.sizes, what);
      expect_same_size(p.extent, q.extent, what);
      EXPECT_EQ(p.grain, q.grain) << what;
      EXPECT_EQ(p.ints, q.ints) << what;
      ASSERT_EQ(p.floats.size(), q.floats.size()) << what;
      for (auto it = p.floats.begin(), jt = q.floats.begin(); it != p.floats.end(); ++it, ++jt) {
        EXPECT_EQ(it->first, jt->first) << what;
        EXPECT_EQ(bits(it->second), bits(jt->second)) << what << " " << it->first;
      }
      EXPECT_EQ(p.where, q.where) << what;
    }
  }
  const rt::TrainSettings &s = a.train, &t = b.train;
  ASSERT_EQ(s.data.has_value(), t.data.has_value());
  if (s.data) {
    EXPECT_EQ(s.data->kind, t.data->kind);
    EXPECT_EQ(s.data->strs, t.data->strs);
    EXPECT_EQ(s.data->ints, t.data->ints);
    ASSERT_EQ(s.data->floats.size(), t.data->floats.size());
    for (auto it = s.data->floats.begin(), jt = t.data->floats.begin(); it != s.data->floats.end(); ++it, ++jt) {
      EXPECT_EQ(it->first, jt->first);
      EXPECT_EQ(bits(it->second), bits(jt->second)) << it->first;
    }
  }
  EXPECT_EQ(s.optimizer, t.optimizer);
  EXPECT_EQ(s.schedule.kind, t.schedule.kind);
  EXPECT_EQ(bits(s.schedule.lr), bits(t.schedule.lr));
  EXPECT_EQ(s.schedule.warmup, t.schedule.warmup);
  EXPECT_EQ(s.schedule.every, t.schedule.every);
  EXPECT_EQ(bits(s.schedule.gamma), bits(t.schedule.gamma));
  EXPECT_EQ(bits(s.schedule.min_lr), bits(t.schedule.min_lr));
  EXPECT_EQ(bits(s.schedule.end_factor), bits(t.schedule.end_factor));
  EXPECT_EQ(bits(s.schedule.power), bits(t.schedule.power));
  EXPECT_EQ(bits(s.schedule.pct_start), bits(t.schedule.pct_start));
  EXPECT_EQ(bits(s.schedule.div_factor), bits(t.schedule.div_factor));
  EXPECT_EQ(bits(s.schedule.final_div_factor), bits(t.schedule.final_div_factor));
  EXPECT_EQ(s.batch, t.batch);
  EXPECT_EQ(s.epochs, t.epochs);
  EXPECT_EQ(s.steps, t.steps);
  EXPECT_EQ(s.seed, t.seed);
  EXPECT_EQ(s.accumulate, t.accumulate);
  EXPECT_EQ(s.eval_every, t.eval_every);
  EXPECT_EQ(bits(s.validation), bits(t.validation));
  EXPECT_EQ(bits(s.clip_grad_norm), bits(t.clip_grad_norm));
  EXPECT_EQ(bits(s.schedule.factor), bits(t.schedule.factor));
  EXPECT_EQ(s.schedule.cooldown, t.schedule.cooldown);
  for (auto [x, y] : {std::pair{&s.schedule.watch, &t.schedule.watch}, std::pair{&s.early_stopping, &t.early_stopping}}) {
    EXPECT_EQ(x->metric, y->metric);
    EXPECT_EQ(x->maximize, y->maximize);
    EXPECT_EQ(x->patience, y->patience);
    EXPECT_EQ(bits(x->threshold), bits(y->threshold));
    EXPECT_EQ(x->relative, y->relative);
  }
  EXPECT_EQ(a.ptx, b.ptx);
  EXPECT_EQ(a.ptx_target, b.ptx_target);
  if (loaded) {
    EXPECT_TRUE(b.code);
  }
}

void expect_same_run(const plantest::StepResult& a, const plantest::StepResult& b) {
  ASSERT_EQ(a.losses.size(), b.losses.size());
  for (size_t i = 0; i < a.losses.size(); ++i) {
    EXPECT_TRUE(std::isfinite(a.losses[i])) << "step " << i;
    EXPECT_EQ(std::bit_cast<uint32_t>(a.losses[i]), std::bit_cast<uint32_t>(b.losses[i]))
        << "step " << i << ": in process " << a.losses[i] << ", from the plan " << b.losses[i];
  }
  ASSERT_EQ(a.persistent.size(), b.persistent.size());
  for (size_t i = 0; i < a.persistent.size(); ++i) {
    EXPECT_EQ(a.persistent[i].first, b.persistent[i].first);
    EXPECT_TRUE(a.persistent[i].second == b.persistent[i].second) << a.persistent[i].first << " differs";
  }
  ASSERT_EQ(a.eval.size(), b.eval.size());
  for (const auto& [name, t] : a.eval) EXPECT_TRUE(t.bytes == b.eval.at(name).bytes) << "eval output " << name;
}

struct ModelCase {
  const char* file;
  std::vector<std::pair<std::string, std::string>> defines;
  int64_t batch;
};

class PlanRoundTrip : public testing::TestWithParam<ModelCase> {};

TEST_P(PlanRoundTrip, TrainsBitIdentically) {
  const ModelCase& m = GetParam();
  Compiled c = compile(std::string(MODELC_SOURCE_DIR) + "/models/" + m.file, m.defines);
  ASSERT_TRUE(c.program);
  ASSERT_FALSE(c.shared_object.empty());
  TempDir dir;
  const std::string path = dir.file("m.plan");
  const rt::PlanTarget host = host_target();
  rt::write_plan(*c.program, c.shared_object, path, host);
  EXPECT_TRUE(rt::is_plan_file(path));
  rt::PlanTarget target;
  std::shared_ptr<rt::Program> loaded = rt::read_plan(path, &target);
  expect_same_program(*c.program, *loaded);
  EXPECT_EQ(target.arch, host.arch);
  EXPECT_EQ(target.cpu, host.cpu);
  EXPECT_EQ(target.features, host.features);
  expect_same_run(plantest::run_steps(c.program, 3, m.batch), plantest::run_steps(loaded, 3, m.batch));
  // Nothing but the plan is left in the directory (no temporary files).
  EXPECT_EQ(std::distance(fs::directory_iterator(dir.path), fs::directory_iterator()), 1);
}

INSTANTIATE_TEST_SUITE_P(Models, PlanRoundTrip,
                         testing::Values(ModelCase{"fashion_mlp.model", {}, 8}, ModelCase{"fashion_cnn.model", {}, 4},
                                         ModelCase{"lenet_bn.model", {}, 4},  // buffers
                                         ModelCase{"char_gpt.model", {{"T", "16"}, {"C", "48"}}, 2}),
                         [](const testing::TestParamInfo<ModelCase>& i) {
                           std::string n = i.param.file;
                           return n.substr(0, n.find('.'));
                         });

// Every field, with values the compiler rarely produces: NaN, -0.0, infinities, extreme
// integers, strings with NUL bytes, GPU launch fields, micro-batches, all train settings.
TEST(PlanFields, EveryFieldSurvives) {
  Compiled c = compile(std::string(MODELC_SOURCE_DIR) + "/models/fashion_mlp.model");
  ASSERT_TRUE(c.program);
  rt::Program p = *c.program;
  p.code = nullptr;
  p.model = std::string("odd\0name", 8);
  p.symbols.push_back("Z");
  const uint32_t z = static_cast<uint32_t>(p.symbols.size() - 1);
  p.buffers[0].init = {rt::Init::Kind::Uniform, -0.0, -std::numeric_limits<double>::infinity()};
  p.buffers[1].init = {rt::Init::Kind::Normal, std::numeric_limits<double>::quiet_NaN(), 1e-310};
  p.buffers[1].type = rt::ElemType::BF16;
  p.buffers[1].index_limit = 0;  // a bf16 input indexes nothing
  p.buffers[1].index_note.clear();
  rt::BufferDesc ids;
  ids.name = "ids";
  ids.type = rt::ElemType::I32;
  ids.role = rt::BufferRole::Input;
  ids.index_limit = std::numeric_limits<int64_t>::max();
  ids.index_note = std::string("a note\0with a NUL", 17);
  ids.index_ignore = std::numeric_limits<int32_t>::min();
  ids.where = "somewhere.model:1:2";
  p.buffers.push_back(ids);
  rt::SizeExpr e;
  e.terms.push_back({-7, {z, 0, z}});
  e.terms.push_back({std::numeric_limits<int64_t>::min(), {}});
  p.buffers[2].shape.push_back(e);
  p.codelets[0].source = std::string("source\0with a NUL", 17);
  p.codelets[0].operand_types.push_back(rt::ElemType::Bool);
  p.codelets[0].operand_shapes.push_back({e, rt::SizeExpr{}});
  p.codelets[0].inputs = 1000;
  p.codelets[0].sizes.push_back(e);
  p.codelets[0].extent = e;
  p.codelets[0].gpu_mapping = rt::GpuMapping::Block;
  p.codelets[0].gpu_block = 1024;
  p.codelets[0].nodes = 7;
  rt::Function& f = p.functions[0];
  f.micro_batches = 3;
  f.feeds.push_back({"extra", 2, 0});
  rt::Instr lib;
  lib.kind = rt::Instr::Kind::Library;
  lib.codelet = 12345;
  lib.op = "matmul";
  lib.inputs = {0, rt::kNoBuffer, 1};
  lib.outputs = {2};
  lib.sizes = {e, rt::SizeExpr{}};
  lib.extent = e;
  lib.grain = std::numeric_limits<int64_t>::max();
  lib.ints = {{"a", {1, -2, std::numeric_limits<int64_t>::min()}}, {"empty", {}}};
  lib.floats = {{"nan", std::numeric_limits<double>::quiet_NaN()}, {"neg0", -0.0}, {"ninf", -HUGE_VAL}};
  lib.where = "models/x.model:1:2";
  f.instrs.push_back(lib);
  f.outputs.emplace_back("another", 3);
  f.updates.emplace_back(4, 5);
  rt::DataSpec d;
  d.kind = "csv";
  d.strs = {{"path", "data/x.csv"}, {"empty", ""}};
  d.ints = {{"header", 1}, {"big", std::numeric_limits<int64_t>::max()}};
  d.floats = {{"inf", HUGE_VAL}, {"tiny", 5e-324}};
  p.train.data = d;
  p.train.optimizer = "adam";
  p.train.schedule = {"cosine", 0.25, 17, 3, 0.5, -0.0, 0.375, 2.5, 0.125, 1e300, 5e-324};
  p.train.batch = 3, p.train.epochs = 4, p.train.steps = 5, p.train.seed = 6, p.train.accumulate = 3;
  p.train.eval_every = 8, p.train.validation = 0.125, p.train.clip_grad_norm = 1e300;
  p.train.schedule.factor = 0.375, p.train.schedule.cooldown = 9;
  p.train.schedule.watch = {"mae", true, 4, 1e-300, true};
  p.train.early_stopping = {"", false, std::numeric_limits<int64_t>::max(), -0.0, false};
  p.ptx = std::string("// PTX\0text", 11);
  p.ptx_target = "sm_90";

  // Through the program section's codec itself: these values make no consistent program
  // (check_program, which read_plan and write_plan run, would refuse them), and the codec
  // must carry them all the same. The PTX is a section of its own (PtxSurvives).
  rt::PlanTarget target{"x86_64", "some-cpu", {"not-a-real-feature", "sse2"}};
  auto round_trip = [&](const rt::Program& in, rt::PlanTarget& back) {
    rt::Program out;
    rt::plan_detail::decode_program(rt::plan_detail::encode_program(in, target), out, back);
    out.ptx = in.ptx;
    return out;
  };
  rt::PlanTarget back;
  expect_same_program(p, round_trip(p, back), false);
  EXPECT_EQ(back.arch, target.arch);
  EXPECT_EQ(back.cpu, target.cpu);
  EXPECT_EQ(back.features, target.features);

  // A Program without a train section's data and with no PTX round-trips too.
  p.train = {};
  p.ptx.clear();
  p.ptx_target.clear();
  target = {};
  expect_same_program(p, round_trip(p, back), false);
  EXPECT_TRUE(back.arch.empty() && back.cpu.empty() && back.features.empty());
}

// A model compiled with a PTX target keeps its PTX in the plan.
TEST(PlanFields, PtxSurvives) {
  TempDir dir;
  const std::string model = dir.file("relu.model");
  std::ofstream(model) << "model m(B) {\n  input x: f32[B, 4]\n  param w: f32[4, 3] = normal(std = 0.1)\n"
                          "  loss = mean(relu(x @ w))\n  output loss\n}\n";
  Compiled c = compile(model, {}, "sm_90");
  ASSERT_TRUE(c.program);
  ASSERT_NE(c.program->ptx.find(".target sm_90"), std::string::npos);
  rt::write_plan(*c.program, c.shared_object, dir.file("m.plan"), host_target());
  auto loaded = rt::read_plan(dir.file("m.plan"));
  EXPECT_EQ(loaded->ptx, c.program->ptx);
  EXPECT_EQ(loaded->ptx_target, "sm_90");
}

// Plans stay independent while loaded together, and a plan loaded after another was freed
// gets its own code (the memfd path of a freed plan may be reused).
TEST(PlanFields, SeveralPlansLiveTogether) {
  TempDir dir;
  Compiled mlp = compile(std::string(MODELC_SOURCE_DIR) + "/models/fashion_mlp.model");
  Compiled narrow = compile(std::string(MODELC_SOURCE_DIR) + "/models/fashion_mlp.model", {{"H", "32"}});
  ASSERT_TRUE(mlp.program && narrow.program);
  rt::write_plan(*mlp.program, mlp.shared_object, dir.file("a.plan"));
  rt::write_plan(*narrow.program, narrow.shared_object, dir.file("b.plan"));
  auto want_a = plantest::run_steps(mlp.program, 2, 4);
  auto want_b = plantest::run_steps(narrow.program, 2, 4);
  for (int round = 0; round < 3; ++round) {
    auto a = rt::read_plan(dir.file("a.plan"));
    auto b = rt::read_plan(dir.file("b.plan"));
    expect_same_run(want_a, plantest::run_steps(a, 2, 4));
    expect_same_run(want_b, plantest::run_steps(b, 2, 4));
    a.reset();
    auto b2 = rt::read_plan(dir.file("b.plan"));
    expect_same_run(want_b, plantest::run_steps(b2, 2, 4));
  }
}

// The host target names this machine's architecture and CPU, and every feature the
// loader can check that the target has is one this CPU has.
TEST(PlanFields, HostTargetIsThisMachine) {
  rt::PlanTarget t = host_target();
  EXPECT_EQ(t.arch, "x86_64");
  EXPECT_FALSE(t.cpu.empty());
  EXPECT_FALSE(t.features.empty());
  EXPECT_TRUE(rt::missing_cpu_features(t.features).empty());
}

}  // namespace
