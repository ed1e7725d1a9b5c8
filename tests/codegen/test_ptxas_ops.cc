// Every GPU mapping of the reductions and row ops compiles to PTX that ptxas assembles for
// sm_80 and sm_90 (every op's PTX is tests/conformance's check (d); these are the mappings
// its small calls do not reach): sum/mean/max over axis sets and with one output, softmax /
// log_softmax on any axis, layer_norm with and without weight and bias, cross_entropy, each
// a module of its own so that a failure names its case. Short rows and long ones, few and
// many reduced elements, so that both GPU mappings of each are built; column reductions in
// tiles and reductions in two phases (both kernels).
#include <fmt/format.h>

#include "tests/codegen/jit_harness.h"
#include "tests/codegen/ptxas.h"

namespace modelc::test {
namespace {

struct Case {
  std::string label;
  OneOp op;
  EmitOptions options;
};

void add(std::vector<Case>& cases, std::string label, OneOp op, bool training = true) {
  ASSERT_FALSE(op.error) << label << ": " << op.error->message;
  ASSERT_TRUE(CodeletCompiler::handles(op.g, op.node)) << label;
  EmitOptions eo;
  eo.training = training;
  cases.push_back({std::move(label), std::move(op), eo});
}

std::vector<Case> reduction_cases() {
  std::vector<Case> cases;
  for (OpKind k : {OpKind::Sum, OpKind::Mean, OpKind::Max}) {
    const std::string n(op_name(k));
    add(cases, fmt::format("{}_cols", n), build_op(k, {f32({B, 9, T})}, attrs({{"axes", Ints{0}}})));
    add(cases, fmt::format("{}_outer_inner", n), build_op(k, {f32({B, 9, T})}, attrs({{"axes", Ints{0, 2}}, {"keepdims", true}})));
    add(cases, fmt::format("{}_rows", n), build_op(k, {f32({B, 3000})}, attrs({{"axes", Ints{1}}})));
    add(cases, fmt::format("{}_all", n), build_op(k, {f32({B, T})}));
    add(cases, fmt::format("{}_split", n), build_op(k, {f32({8, 3, 5000})}, attrs({{"axes", Ints{0, 2}}})));
    // Column tiles of many rows (block-mapped), in two phases, and a scalar in two phases.
    add(cases, fmt::format("{}_tiles", n), build_op(k, {f32({300, 40})}, attrs({{"axes", Ints{0}}})));
    add(cases, fmt::format("{}_tiles_split", n), build_op(k, {f32({B, T, 40})}, attrs({{"axes", Ints{0, 1}}})));
    add(cases, fmt::format("{}_all_split", n), build_op(k, {f32({B, T, 96})}));
  }
  add(cases, "sum_i32_tiles_split", build_op(OpKind::Sum, {tt(DType::I32, {B, T, 20})}, attrs({{"axes", Ints{0, 1}}})));
  add(cases, "sum_i32_rows", build_op(OpKind::Sum, {tt(DType::I32, {B, 4096})}, attrs({{"axes", Ints{1}}})));
  add(cases, "sum_i32_cols", build_op(OpKind::Sum, {tt(DType::I32, {B, 7})}, attrs({{"axes", Ints{0}}})));
  for (OpKind k : {OpKind::Softmax, OpKind::LogSoftmax}) {
    const std::string n(op_name(k));
    for (int64_t axis : {0, 1, -1}) add(cases, fmt::format("{}_axis{}", n, axis), build_op(k, {f32({B, T, 33})}, attrs({{"axis", axis}})));
    add(cases, fmt::format("{}_long", n), build_op(k, {f32({B, 4096})}, attrs({{"axis", int64_t(-1)}})));
  }
  for (int64_t len : {int64_t(10), int64_t(192), int64_t(4096)})
    for (int mask = 0; mask < 4; ++mask) {
      std::vector<std::optional<TensorType>> in = {f32({B, len}), std::nullopt, std::nullopt};
      if (mask & 1) in[1] = f32({len});
      if (mask & 2) in[2] = f32({len});
      add(cases, fmt::format("layer_norm_{}_{}", len, mask), build_op(OpKind::LayerNorm, in, attrs({{"eps", 1e-5}})));
    }
  add(cases, "cross_entropy", build_op(OpKind::CrossEntropy, {f32({B, T, 96}), tt(DType::I32, {B, T})}));
  add(cases, "cross_entropy_small", build_op(OpKind::CrossEntropy, {f32({3, 5}), tt(DType::I32, {3})}));
  return cases;
}

void assemble_all(const std::vector<Case>& cases) {
  ASSERT_FALSE(cases.empty());
  size_t assembled = 0;
  for (const Case& c : cases) {
    SymbolTable syms;
    CodeletCompiler kc(syms, /*gpu=*/true);
    kc.emit(c.op.g, c.op.node, c.options);
    for (const char* sm : {"sm_80", "sm_90"}) {
      std::string ptx;
      try {
        ptx = kc.ptx(sm);
      } catch (const std::exception& e) {
        ADD_FAILURE() << c.label << " " << sm << ": " << e.what();
        continue;
      }
      std::string err = assemble_ptx(ptx, sm, c.label);
      EXPECT_EQ(err, "") << c.label;
      assembled += err.empty();
    }
  }
  EXPECT_EQ(assembled, 2 * cases.size());
}

TEST(PtxasOps, ReductionAndRowOps) {
  MODELC_REQUIRE_PTXAS();
  assemble_all(reduction_cases());
}

}  // namespace
}  // namespace modelc::test
