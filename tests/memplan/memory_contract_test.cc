// The memory contract (issue 6), end to end on the example models: the peak the compiler
// predicts before anything runs (compiler/lowered/memory_report.h) against the peak the
// runtime measures (Session::memory_usage), with and without a budget; recomputation
// (compiler/passes/recompute_placement.h) gives the losses of a step that keeps every activation;
// budgets nothing fits are compile-time errors; a runtime out-of-memory is a clear error.
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "tests/common/random_batch.h"
#include "tests/common/sanitizers.h"
#include "compiler/pipeline.h"
#include "runtime/session/session.h"

namespace modelc {
namespace {

const std::string kModels = std::string(MODELC_SOURCE_DIR) + "/models/";

struct ModelCase {
  const char* file;
  std::vector<std::pair<std::string, std::string>> defines;  // compiled in
  int64_t batch;                                            // B, bound at run time
  int64_t classes;                                          // i32 inputs: [0, classes)
};

const ModelCase kCases[] = {
    {"fashion_mlp.model", {}, 512, 10},
    {"fashion_cnn.model", {}, 8, 10},
    {"lenet_bn.model", {}, 8, 10},  // buffers: batch norm's running statistics
    {"char_gpt.model", {{"T", "16"}, {"C", "48"}, {"L", "2"}}, 4, 96},
};

struct Compiled {
  std::shared_ptr<rt::Program> program;
  std::vector<BufferOrigin> origins;
  RecomputeReport recompute_report;
  MemoryPrediction prediction;
};

Compiled compile(const ModelCase& mc, ProgramOptions po) {
  CompileOptions o;
  o.defines = mc.defines;
  Compilation c(o);
  Compiled r;
  po.origins = &r.origins;
  po.recompute_report = &r.recompute_report;
  po.bindings = {{"B", mc.batch}};
  r.program = compile_program(c, kModels + mc.file, po);
  EXPECT_TRUE(r.program) << c.diags().render();
  if (!r.program) throw std::runtime_error("compile failed");
  r.prediction = predict_memory(*r.program, "train_step", r.origins,
                                bind_symbols(*r.program, "train_step", po.bindings));
  return r;
}

// The peak without recomputation and the smallest the greedy placement reaches (from a
// budget nothing fits, whose report is filled before the compile-time error).
std::pair<int64_t, int64_t> peak_range(const ModelCase& mc) {
  CompileOptions o;
  o.defines = mc.defines;
  Compilation c(o);
  ProgramOptions po;
  RecomputeReport ck;
  po.recompute_report = &ck;
  po.bindings = {{"B", mc.batch}};
  po.mem_budget = 1;
  EXPECT_THROW(compile_program(c, kModels + mc.file, po), UserError);
  EXPECT_FALSE(ck.placement.fits);
  EXPECT_LE(ck.placement.peak_after, ck.placement.peak_before) << mc.file;
  return {ck.placement.peak_before, ck.placement.peak_after};
}

// Random batches of the model's inputs at its batch size: f32 in [-1, 1), i32 in [0, classes).
std::vector<std::map<std::string, rt::HostTensor>> batches(const rt::Program& p, const ModelCase& mc, int n,
                                                           uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<std::map<std::string, rt::HostTensor>> out;
  const std::vector<int64_t> sym = bind_symbols(p, "train_step", {{"B", mc.batch}});
  for (int i = 0; i < n; ++i) out.push_back(test::random_train_batch(p, sym, mc.classes, rng));
  return out;
}

struct TrainRun {
  std::vector<float> losses;
  rt::MemoryUsage usage;
};

TrainRun train(const Compiled& c, const std::vector<std::map<std::string, rt::HostTensor>>& data, size_t memory_limit = 0) {
  rt::SessionOptions so;
  so.threads = 2;
  so.seed = 7;
  so.memory_limit = memory_limit;
  rt::Session s(c.program, so);
  TrainRun r;
  for (const auto& b : data) r.losses.push_back(s.train_step(b));
  r.usage = s.memory_usage();
  return r;
}

// Measured within 1 % of predicted, plus 4 KiB: the allocator rounds each allocation to
// 512 bytes, and nothing else may differ.
void expect_agree(const Compiled& c, const rt::MemoryUsage& u, const std::string& what) {
  const double predicted = static_cast<double>(c.prediction.peak), measured = static_cast<double>(u.peak());
  EXPECT_LE(std::abs(measured - predicted), 0.01 * predicted + 4096)
      << what << ": predicted " << c.prediction.peak << " measured " << u.peak() << " (persistent " << u.persistent
      << ", inputs " << u.inputs << ", allocator peak " << u.allocator.all.allocated_bytes.peak << ", predicted arena "
      << c.prediction.plan.size << ")";
  EXPECT_EQ(u.persistent, c.prediction.persistent) << what;
  EXPECT_EQ(u.inputs, c.prediction.inputs) << what;
}

void expect_same_losses(const std::vector<float>& a, const std::vector<float>& b, const std::string& what) {
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i)
    EXPECT_NEAR(a[i], b[i], 1e-5 * std::abs(a[i]) + 1e-6) << what << " step " << i;
}

class MemoryContract : public ::testing::TestWithParam<ModelCase> {};

TEST_P(MemoryContract, PredictedPeakIsMeasuredAndRecomputationKeepsTheLosses) {
  const ModelCase& mc = GetParam();
  const uint64_t seed = std::random_device{}();
  SCOPED_TRACE(std::string(mc.file) + " seed " + std::to_string(seed));
  ProgramOptions keep_all;
  keep_all.recompute = false;
  Compiled full = compile(mc, keep_all);
  auto data = batches(*full.program, mc, 3, seed);
  TrainRun base = train(full, data);
  expect_agree(full, base.usage, "no recomputation");

  // The model's own @checkpoint annotations (char_gpt's blocks), no budget.
  Compiled annotated = compile(mc, {});
  TrainRun ann = train(annotated, data);
  expect_agree(annotated, ann.usage, "@checkpoint");
  expect_same_losses(base.losses, ann.losses, "@checkpoint");

  // A budget halfway between the peak without recomputation and the smallest one.
  const auto [before, floor] = peak_range(mc);
  EXPECT_EQ(before, full.prediction.peak);
  if (floor == before) {
    // fashion_mlp: no activation is live at the peak (the last layer's weight gradient),
    // so nothing recomputed lowers it, and a smaller budget is an error.
    std::printf("%s: recomputation cannot lower the peak of %lld bytes\n", mc.file, static_cast<long long>(before));
    ProgramOptions po;
    po.mem_budget = before - 1;
    EXPECT_THROW(compile(mc, po), UserError);
    return;
  }
  const int64_t budget = floor + (before - floor) / 2;
  for (RecomputeAlgorithm algo : {RecomputeAlgorithm::Greedy, RecomputeAlgorithm::SqrtN}) {
    ProgramOptions po;
    po.mem_budget = budget;
    po.recompute_algorithm = algo;
    const std::string what = algo == RecomputeAlgorithm::Greedy ? "greedy" : "sqrt(n)";
    Compiled c;
    try {
      c = compile(mc, po);
    } catch (const UserError& e) {
      // sqrt(n) does not look at the budget: it may not fit; greedy must.
      EXPECT_EQ(algo, RecomputeAlgorithm::SqrtN) << e.what();
      EXPECT_NE(std::string(e.what()).find("does not fit"), std::string::npos) << e.what();
      continue;
    }
    EXPECT_TRUE(c.recompute_report.placement.fits);
    EXPECT_FALSE(c.recompute_report.recomputed.empty()) << what;
    EXPECT_LE(c.prediction.peak, budget) << what << ": the compiled step's predicted peak exceeds the budget";
    TrainRun r = train(c, data);
    expect_agree(c, r.usage, what);
    expect_same_losses(base.losses, r.losses, what);
  }
}

INSTANTIATE_TEST_SUITE_P(Models, MemoryContract, ::testing::ValuesIn(kCases),
                         [](const auto& param_info) {
                           std::string f = param_info.param.file;
                           return f.substr(0, f.find('.'));
                         });

TEST(MemoryContract, ADryCompilationHasTheRealBuffersAndSchedule) {
  // `modelc --emit=memory` and recomputation placement size programs compiled without code:
  // the same buffers and instructions as the real ones, so the same prediction.
  for (const ModelCase& mc : kCases) {
    ProgramOptions dry_options;
    dry_options.code = false;
    Compiled real = compile(mc, {}), dry = compile(mc, dry_options);
    const rt::Function &a = *real.program->function("train_step"), &b = *dry.program->function("train_step");
    ASSERT_EQ(a.instrs.size(), b.instrs.size()) << mc.file;
    for (size_t i = 0; i < a.instrs.size(); ++i) {
      EXPECT_EQ(a.instrs[i].kind, b.instrs[i].kind) << mc.file << " instruction " << i;
      EXPECT_EQ(a.instrs[i].inputs, b.instrs[i].inputs) << mc.file << " instruction " << i;
      EXPECT_EQ(a.instrs[i].outputs, b.instrs[i].outputs) << mc.file << " instruction " << i;
    }
    ASSERT_EQ(real.program->buffers.size(), dry.program->buffers.size()) << mc.file;
    std::vector<int64_t> sym = bind_symbols(*real.program, "train_step", {{"B", mc.batch}});
    for (uint32_t k = 0; k < real.program->buffers.size(); ++k)
      EXPECT_EQ(rt::buffer_bytes(*real.program, k, sym), rt::buffer_bytes(*dry.program, k, sym)) << mc.file << " buffer " << k;
    EXPECT_EQ(real.prediction.peak, dry.prediction.peak) << mc.file;
    EXPECT_TRUE(dry.program->codelets.empty());
  }
}

TEST(MemoryContract, ABudgetNothingFitsIsACompileTimeErrorWithTheBreakdown) {
  const ModelCase mc = kCases[2];
  ProgramOptions po;
  po.mem_budget = 64 * 1024;  // less than the parameters and optimizer state alone
  try {
    compile(mc, po);
    FAIL() << "expected a UserError";
  } catch (const UserError& e) {
    std::string m = e.what();
    for (const char* part : {"does not fit in the memory budget of 64.00 KiB", "parameters", "optimizer state",
                             "a budget of", "would fit", "not even B = 1 fits"})
      EXPECT_NE(m.find(part), std::string::npos) << "missing '" << part << "' in: " << m;
  }
}

TEST(MemoryContract, GreedyRecomputesNoMoreThanSqrtNWhereBothFit) {
  // At budgets between the peak without recomputation and the smallest the greedy
  // placement reaches, it fits with fewer recomputed FLOPs than sqrt(n) (or fits where
  // sqrt(n) does not).
  const ModelCase mc{"char_gpt.model", {{"T", "32"}, {"C", "48"}, {"L", "4"}}, 4, 96};
  const auto [before, floor] = peak_range(mc);
  int compared = 0;
  // Under a sanitizer (tests/common/sanitizers.h), one budget: each costs two placements.
  const std::vector<double> fracs = modelc::test::full_or(std::vector<double>{0.5, 0.25}, std::vector<double>{0.5});
  for (double frac : fracs) {
    const int64_t budget = floor + static_cast<int64_t>(frac * static_cast<double>(before - floor));
    ProgramOptions g, s;
    g.code = s.code = false;                // placements only
    g.annotations = s.annotations = false;  // the two algorithms alone, not char_gpt's @checkpoint
    g.mem_budget = s.mem_budget = budget;
    s.recompute_algorithm = RecomputeAlgorithm::SqrtN;
    Compiled greedy;
    try {
      greedy = compile(mc, g);
    } catch (const UserError& e) {
      ADD_FAILURE() << "greedy does not fit " << frac << ": " << e.what();
      continue;
    }
    try {
      Compiled sq = compile(mc, s);
      EXPECT_LE(greedy.recompute_report.placement.recompute_flops, sq.recompute_report.placement.recompute_flops)
          << "budget " << frac << " of the arena";
      ++compared;
    } catch (const UserError&) {
      // sqrt(n) does not fit this budget: greedy wins outright.
    }
  }
  std::printf("greedy vs sqrt(n): %d budgets where both fit\n", compared);
}

TEST(MemoryContract, ARuntimeOutOfMemoryIsAnErrorWithTheSummaryAndLeavesTheParameters) {
  const ModelCase mc = kCases[1];
  Compiled c = compile(mc, {});
  auto data = batches(*c.program, mc, 1, 1);
  rt::SessionOptions so;
  so.threads = 2;
  so.memory_limit = static_cast<size_t>(c.prediction.plan.size / 2);  // the arena cannot fit
  rt::Session s(c.program, so);
  std::map<std::string, rt::HostTensor> before;
  for (const std::string& n : s.param_names()) before[n] = s.param(n);
  try {
    s.train_step(data[0]);
    FAIL() << "expected an out-of-memory error";
  } catch (const rt::RuntimeError& e) {
    std::string m = e.what();
    EXPECT_NE(m.find("out of memory"), std::string::npos) << m;
    EXPECT_NE(m.find("the arena of its temporaries"), std::string::npos) << m;
    EXPECT_NE(m.find("memory summary"), std::string::npos) << "no memory summary in: " << m;
  }
  EXPECT_EQ(s.step(), 0);
  for (const std::string& n : s.param_names()) EXPECT_EQ(s.param(n).bytes, before[n].bytes) << n;
  EXPECT_EQ(s.memory_usage().allocator.num_ooms, 1);
}

}  // namespace
}  // namespace modelc
