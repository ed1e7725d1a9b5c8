// Tests of the compile pipeline (compiler/pipeline.h), over every model in models/: the state
// printed after each pass is what the later passes read (after fusion, the recomputed clones
// of @checkpoint are in the graph the plan runs, and the compiled Program has exactly one
// instruction per fused group, plus a Partial per two-phase reduction); the passes stop where
// asked; verifying after every pass passes; print_state has a view for every pass; and
// recomputation placement sizes candidates with the same passes (a budget the memory-plan pass
// says the step fits in gives the same Program as no budget).
#include <gtest/gtest.h>

#include <filesystem>

#include "compiler/lowered/memory_report.h"
#include "compiler/passes/recompute.h"
#include "compiler/pipeline.h"
#include "runtime/base/error.h"

namespace modelc {
namespace {

const std::string kModels = std::string(MODELC_SOURCE_DIR) + "/models/";

// Every model of models/, at a size that compiles quickly.
std::vector<std::string> models() {
  std::vector<std::string> v;
  for (const auto& e : std::filesystem::directory_iterator(kModels))
    if (e.path().extension() == ".model") v.push_back(e.path().filename().string());
  std::sort(v.begin(), v.end());
  return v;
}
CompileOptions small(const std::string& file) {
  CompileOptions o;
  if (file == "char_gpt.model") o.defines = {{"T", "8"}, {"C", "24"}, {"L", "2"}};
  return o;
}

size_t groups_run(const FusionPlan& plan) {
  size_t n = plan.groups.size();
  for (const auto& run : plan.horizontal) n -= run.size() - 1;  // a horizontal run is one instruction
  return n;
}

TEST(Pipeline, PassesAreOneListAndStopWhereAsked) {
  std::vector<std::string> names;
  for (const PassInfo& p : pipeline_passes()) names.emplace_back(p.name);
  EXPECT_EQ(names, (std::vector<std::string>{"parse", "elaborate", "autocast", "train-step", "eval-mode", "predict", "simplify",
                                             "recompute",
                                             "fusion", "memory-plan", "schedule", "codegen"}));
  for (const std::string& n : names) EXPECT_TRUE(is_pass(n));
  EXPECT_FALSE(is_pass("lower"));
  Compilation c(small("fashion_mlp.model"));
  CompileState s{c, kModels + "fashion_mlp.model", {}};
  PipelineHooks h;
  h.until = "train-step";
  ASSERT_TRUE(run_pipeline(s, h)) << c.diags().render();
  ASSERT_TRUE(s.step);
  EXPECT_TRUE(s.step_plan.groups.empty()) << "fusion ran past train-step";
  EXPECT_FALSE(s.lowered.program);
}

TEST(Pipeline, EveryModelPrintsEveryPassAndVerifiesAfterEach) {
  for (const std::string& m : models()) {
    SCOPED_TRACE(m);
    Compilation c(small(m));
    ProgramOptions po;
    po.code = m == "fashion_mlp.model";  // code for one model (seconds each otherwise)
    po.streams = 2;
    CompileState s{c, kModels + m, po};
    PipelineHooks h;
    h.verify_each = true;
    std::vector<std::string> printed;
    for (const PassInfo& p : pipeline_passes()) h.print_after.emplace_back(p.name);
    h.print = [&](std::string_view pass, const std::string& text) {
      printed.emplace_back(pass);
      EXPECT_FALSE(text.empty() && (pass != "codegen" || po.code)) << "nothing printed after " << pass;
    };
    ASSERT_TRUE(run_pipeline(s, h)) << c.diags().render();
    EXPECT_EQ(printed.size(), pipeline_passes().size());
  }
}

// --emit=fusion shows what runs: the plan after the fusion pass is the one the Program was
// lowered from, recomputed clones included.
TEST(Pipeline, TheFusionStateIsWhatTheProgramRuns) {
  for (const std::string& m : models()) {
    SCOPED_TRACE(m);
    Compilation c(small(m));
    ProgramOptions po;
    po.code = false;
    CompileState s{c, kModels + m, po};
    PipelineHooks h;
    Graph before;  // the step before recomputation
    h.print_after = {"simplify"};
    h.print = [&](std::string_view, const std::string&) { before = *s.step; };
    h.until = "memory-plan";
    ASSERT_TRUE(run_pipeline(s, h)) << c.diags().render();
    ASSERT_TRUE(s.step);
    const size_t clones = s.recompute.placement.drop.size();
    if (m == "char_gpt.model") {
      EXPECT_GT(clones, 0u) << "char_gpt's @checkpoint blocks recompute nothing";
    }
    // The report --emit=memory prints names every value the recomputation cloned.
    EXPECT_EQ(s.recompute.recomputed.size(), recompute(before, s.recompute.placement.drop).original.size());
    // The fused graph is the recomputed one, and the plan covers every node of it.
    if (clones > 0) {
      EXPECT_GT(s.step->nodes.size(), before.nodes.size()) << "the fused graph lacks the recomputed clones";
    }
    std::vector<char> covered(s.step->nodes.size(), 0);
    for (const FusionGroup& grp : s.step_plan.groups)
      for (NodeId id : grp.nodes) covered[id] = 1;
    for (NodeId id = 0; id < s.step->nodes.size(); ++id) {
      const OpKind op = s.step->nodes[id].op;
      if (op == OpKind::Input || op == OpKind::Param || op == OpKind::State || op == OpKind::Constant) continue;
      EXPECT_TRUE(covered[id]) << "node %" << id << " of the recomputed step is in no fused group";
    }
    const rt::Function* f = s.lowered.program->function("train_step");
    ASSERT_TRUE(f);
    size_t partials = 0;
    for (const CodeletSite& site : s.lowered.sites) partials += site.function == 0 && site.partial.has_value();
    size_t copies = 0;  // outputs that are inputs or params get a copy instruction
    for (const rt::Instr& in : f->instrs) copies += in.kind == rt::Instr::Kind::Library && in.op == "copy";
    EXPECT_EQ(f->instrs.size(), groups_run(s.step_plan) + partials + copies);
  }
}

// A budget as large as the peak the memory-plan pass predicts needs nothing recomputed beyond
// the annotations: the sizer and the pipeline agree.
TEST(Pipeline, ThePlacementSizesWithThePipelinesOwnPasses) {
  Compilation c(small("fashion_mlp.model"));
  ProgramOptions po;
  po.code = false;
  CompileState s{c, kModels + "fashion_mlp.model", po};
  ASSERT_TRUE(run_pipeline(s, PipelineHooks{"memory-plan", {}, {}, false})) << c.diags().render();
  const rt::Program& p = *s.lowered.program;
  const int64_t peak = predict_memory(p, "train_step", {}, bind_symbols(p, "train_step", {})).peak;
  for (int64_t budget : {peak, peak - 1}) {
    Compilation c2(small("fashion_mlp.model"));
    ProgramOptions b = po;
    b.mem_budget = budget;
    RecomputeReport r;
    b.recompute_report = &r;
    CompileState s2{c2, kModels + "fashion_mlp.model", b};
    if (budget == peak) {
      ASSERT_TRUE(run_pipeline(s2, PipelineHooks{"memory-plan", {}, {}, false}));
      EXPECT_TRUE(r.placement.fits);
      EXPECT_EQ(r.placement.peak_before, peak);
      EXPECT_TRUE(r.placement.drop.empty());
    } else {
      // One byte less: something is recomputed, or it does not fit and says so.
      try {
        ASSERT_TRUE(run_pipeline(s2, PipelineHooks{"memory-plan", {}, {}, false}));
        EXPECT_FALSE(r.placement.drop.empty());
        EXPECT_LE(r.placement.peak_after, budget);
      } catch (const UserError& e) {
        EXPECT_NE(std::string(e.what()).find("does not fit in the memory budget"), std::string::npos) << e.what();
      }
    }
  }
}

}  // namespace
}  // namespace modelc
