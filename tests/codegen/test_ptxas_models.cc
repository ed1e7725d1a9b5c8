// Every example model in models/ compiles to PTX that ptxas assembles, for sm_80 and
// sm_90, with fusion on and off: compile_program with ProgramOptions::ptx_target, the
// Program holding train_step and eval (an eval-only Program's kernels are those of its
// eval function), one PTX module each.
// Also: each kernel of the Program is an entry point of the PTX, with the .reqntid of its
// CodeletDesc::gpu_block, and the fused programs use both GPU mappings.
#include <filesystem>
#include <tuple>

#include <fmt/format.h>

#include "compiler/pipeline.h"
#include "tests/codegen/ptxas.h"

namespace modelc::test {
namespace {

namespace fs = std::filesystem;

std::vector<std::string> example_models() {
  std::vector<std::string> out;
  for (const auto& e : fs::directory_iterator(fs::path(MODELC_SOURCE_DIR) / "models"))
    if (e.path().extension() == ".model") out.push_back(e.path().stem().string());
  std::sort(out.begin(), out.end());
  return out;
}

// (model, fusion, target): one compile each, so that ctest runs them in parallel.
using Variant = std::tuple<std::string, bool, std::string>;

class PtxasModels : public testing::TestWithParam<Variant> {};

TEST_P(PtxasModels, EveryPtxAssembles) {
  MODELC_REQUIRE_PTXAS();
  const auto& [model, fusion, sm] = GetParam();
  const std::string path = fmt::format("{}/models/{}.model", MODELC_SOURCE_DIR, model);
  const std::string label = fmt::format("{}_{}", model, fusion ? "fused" : "unfused");
  CompileOptions co;
  // char_gpt's blocks are the same kernels over again: two of them cover what four do, in
  // half the ptxas time (its variants are the suite's longest tests).
  if (model == "char_gpt") co.defines = {{"L", "2"}};
  Compilation c(co);
  ProgramOptions po;
  po.fusion = fusion;
  po.ptx_target = sm;
  std::shared_ptr<rt::Program> p = compile_program(c, path, po);
  ASSERT_TRUE(p) << c.diags().render();
  ASSERT_FALSE(p->codelets.empty());
  EXPECT_EQ(p->ptx_target, sm);
  EXPECT_NE(p->function("eval"), nullptr);
  EXPECT_NE(p->function("train_step"), nullptr);  // every example trains: both functions' kernels
  EXPECT_NE(p->ptx.find(fmt::format(".target {}", sm)), std::string::npos);
  bool block_mapped = false, thread_mapped = false;
  for (const rt::CodeletDesc& k : p->codelets) {
    // The entry point and its block size, as the runtime will launch it.
    const size_t at = p->ptx.find(fmt::format(".entry {}(", k.name));
    ASSERT_NE(at, std::string::npos) << k.name;
    const size_t close = p->ptx.find(')', at);
    const size_t req = p->ptx.find(".reqntid", close);
    ASSERT_NE(req, std::string::npos) << k.name;
    EXPECT_EQ(p->ptx.find_first_not_of(" \t\n", close + 1), req) << k.name;
    const std::string want = fmt::format(".reqntid {}, 1, 1", k.gpu_block);
    EXPECT_EQ(p->ptx.substr(req, want.size()), want) << k.name;
    EXPECT_EQ(k.gpu_block % 32, 0u) << k.name;
    EXPECT_TRUE(k.gpu_block >= 32 && k.gpu_block <= 1024) << k.name;
    (k.gpu_mapping == rt::GpuMapping::Block ? block_mapped : thread_mapped) = true;
  }
  EXPECT_TRUE(block_mapped && thread_mapped);
  EXPECT_EQ(assemble_ptx(p->ptx, sm, label), "");
}

INSTANTIATE_TEST_SUITE_P(Models, PtxasModels,
                         testing::Combine(testing::ValuesIn(example_models()), testing::Bool(),
                                          testing::Values(std::string("sm_80"), std::string("sm_90"))),
                         [](const testing::TestParamInfo<Variant>& i) {
                           return fmt::format("{}_{}_{}", std::get<0>(i.param), std::get<1>(i.param) ? "fused" : "unfused",
                                              std::get<2>(i.param));
                         });

TEST(PtxasModelsList, HasTheExamples) {
  std::vector<std::string> models = example_models();
  EXPECT_GE(models.size(), 3u);
}

}  // namespace
}  // namespace modelc::test
