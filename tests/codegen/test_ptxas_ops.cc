// Every op the kernel tests cover compiles to PTX that ptxas assembles for sm_80 and sm_90:
// one graph per op and case (as test_kernels_*.cc build them: every registry op with a
// scalar definition, integer and bool forms, cast between every dtype pair, dropout in
// training and eval, causal_mask, one_hot, sum/mean/max over axis sets and with one output,
// softmax / log_softmax on any axis, layer_norm with and without weight and bias,
// cross_entropy), each a module of its own so that a failure names its op. Short rows and
// long ones, few and many reduced elements, so that both GPU mappings of each are built;
// column reductions in tiles and reductions in two phases (both kernels).
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
  ASSERT_TRUE(KernelCompiler::handles(op.g, op.node)) << label;
  EmitOptions eo;
  eo.training = training;
  cases.push_back({std::move(label), std::move(op), eo});
}

std::vector<Case> elementwise_cases() {
  std::vector<Case> cases;
  for (const OpInfo& info : OpRegistry::get().all()) {
    if (!info.scalar) continue;
    if (info.unary) {
      add(cases, info.name, build_op(info.kind, {f32({B, 37})}));
      add(cases, fmt::format("{}_aligned", info.name), build_op(info.kind, {f32({B, 1024})}));
    }
    if (info.binary) add(cases, info.name, build_op(info.kind, {f32({B, 37}), f32({37})}));
    if (info.binary) add(cases, fmt::format("{}_same", info.name), build_op(info.kind, {f32({B, 64}), f32({B, 64})}));
  }
  const TensorType i32 = tt(DType::I32, {B, 9}), flag = tt(DType::Bool, {B, 9});
  for (OpKind k : {OpKind::Neg, OpKind::Abs}) add(cases, fmt::format("{}_i32", op_name(k)), build_op(k, {i32}));
  for (OpKind k : {OpKind::Add, OpKind::Sub, OpKind::Mul, OpKind::Maximum, OpKind::Minimum, OpKind::Lt, OpKind::Le,
                   OpKind::Gt, OpKind::Ge, OpKind::Eq, OpKind::Ne})
    add(cases, fmt::format("{}_i32", op_name(k)), build_op(k, {i32, tt(DType::I32, {9})}));
  for (OpKind k : {OpKind::Eq, OpKind::Ne}) add(cases, fmt::format("{}_bool", op_name(k)), build_op(k, {flag, flag}));
  for (const char* approx : {"none", "tanh"})
    add(cases, fmt::format("gelu_{}", approx), build_op(OpKind::Gelu, {f32({B, 64})}, attrs({{"approximate", std::string(approx)}})));
  add(cases, "where", build_op(OpKind::Where, {flag, f32({B, 9}), f32({9})}));
  for (DType from : {DType::F32, DType::I32, DType::Bool})
    for (DType to : {DType::F32, DType::I32, DType::Bool})
      add(cases, fmt::format("cast_{}_{}", dtype_name(from), dtype_name(to)),
          build_op(OpKind::Cast, {tt(from, {B, 33})}, attrs({{"dtype", to}})));
  for (bool training : {true, false})
    add(cases, training ? "dropout_train" : "dropout_eval",
        build_op(OpKind::Dropout, {f32({B, 256})}, attrs({{"p", 0.1}, {"key", int64_t(977)}})), training);
  add(cases, "causal_mask", build_op(OpKind::CausalMask, {f32({B, 4, T, T})}));
  add(cases, "one_hot", build_op(OpKind::OneHot, {tt(DType::I32, {B, T})}, attrs({{"classes", int64_t(96)}})));
  add(cases, "broadcast_to", build_op(OpKind::BroadcastTo, {f32({T, 1})}, attrs({{"shape", Shape{B, T, 64}}})));
  return cases;
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
    KernelCompiler kc(syms, /*gpu=*/true);
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

TEST(PtxasOps, ElementwiseOps) {
  MODELC_REQUIRE_PTXAS();
  std::vector<Case> cases = elementwise_cases();
  EXPECT_GE(cases.size(), 60u);
  assemble_all(cases);
}

TEST(PtxasOps, ReductionAndRowOps) {
  MODELC_REQUIRE_PTXAS();
  assemble_all(reduction_cases());
}

}  // namespace
}  // namespace modelc::test
