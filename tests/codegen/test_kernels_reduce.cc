// Reduction and row kernels against the double reference: sum/mean/max over random axis
// sets with keepdims, a 1e5-element sum, NaN in max, softmax / log_softmax on any axis,
// layer_norm with and without weight and bias, cross_entropy (and NaN for a bad target),
// a symbolic batch; and the compiler's error paths.
//
// Tolerances (relative, as expect_near): sums accumulate in f64, so 1e-6 holds even for
// 1e5 elements; row ops 1e-5 (f32 exp and normalisation); i32 sums exact.
#include <limits>

#include "tests/codegen/jit_harness.h"

namespace modelc::test {
namespace {

Ints random_axes(int rank) {
  Ints axes;
  for (int d = 0; d < rank; ++d)
    if (rnd(0, 1)) axes.push_back(rnd(0, 1) ? d : d - rank);  // negative spellings too
  return axes;
}

TEST(KernelsReduce, SumMeanMaxOverRandomAxes) {
  for (OpKind k : {OpKind::Sum, OpKind::Mean, OpKind::Max}) {
    for (int rep = 0; rep < 8; ++rep) {
      auto shape = random_shape(rnd(0, 4), 1, 7);
      RefTensor x = random_tensor(DType::F32, shape, -2, 2);
      OneOp o = build_op(k, {type_of(x)}, attrs({{"axes", random_axes(x.rank())}, {"keepdims", rnd(0, 1) == 1}}));
      ASSERT_FALSE(o.error) << o.error->message;
      check_op(o, {x}, 1e-6);
    }
  }
}

TEST(KernelsReduce, IntegerSum) {
  auto shape = random_shape(rnd(1, 3), 1, 9);
  RefTensor x = random_tensor(DType::I32, shape, -1000, 1000);
  check_op(build_op(OpKind::Sum, {type_of(x)}, attrs({{"axes", random_axes(x.rank())}})), {x}, 0);
}

TEST(KernelsReduce, LargeSumStaysAccurate) {
  int64_t n = 100000 + rnd(0, 999);
  RefTensor x = random_tensor(DType::F32, {n}, 0, 1);  // no cancellation: the error is accumulation's
  for (OpKind k : {OpKind::Sum, OpKind::Mean}) check_op(build_op(k, {type_of(x)}), {x}, 1e-6);
  RefTensor y = random_tensor(DType::F32, {3, n / 3}, -1, 1);
  check_op(build_op(OpKind::Sum, {type_of(y)}, attrs({{"axes", Ints{1}}})), {y}, 1e-6);
}

TEST(KernelsReduce, MaxPropagatesNaNAndEmptyIsMinusInf) {
  RefTensor x = random_tensor(DType::F32, {3, 5});
  x.data[static_cast<size_t>(rnd(0, 4))] = std::numeric_limits<double>::quiet_NaN();  // row 0 only
  check_op(build_op(OpKind::Max, {type_of(x)}, attrs({{"axes", Ints{1}}})), {x}, 0);
  RefTensor empty(DType::F32, {2, 0});
  check_op(build_op(OpKind::Max, {type_of(empty)}, attrs({{"axes", Ints{1}}})), {empty}, 0);
  check_op(build_op(OpKind::Mean, {type_of(empty)}, attrs({{"axes", Ints{1}}})), {empty}, 0);  // NaN
}

TEST(KernelsReduce, SoftmaxAndLogSoftmaxOnAnyAxis) {
  for (OpKind k : {OpKind::Softmax, OpKind::LogSoftmax}) {
    for (int rep = 0; rep < 5; ++rep) {
      auto shape = random_shape(rnd(1, 4), 1, 9);
      RefTensor x = random_tensor(DType::F32, shape, -20, 20);
      int64_t axis = rnd(-x.rank(), x.rank() - 1);
      check_op(build_op(k, {type_of(x)}, attrs({{"axis", axis}})), {x}, 1e-5);
    }
  }
}

TEST(KernelsReduce, LayerNormWithOptionalWeightAndBias) {
  for (int mask = 0; mask < 4; ++mask) {
    auto shape = random_shape(rnd(1, 3), 1, 6);
    shape.back() = rnd(1, 67);
    RefTensor x = random_tensor(DType::F32, shape, -3, 5);
    RefTensor w = random_tensor(DType::F32, {shape.back()}), b = random_tensor(DType::F32, {shape.back()});
    std::vector<std::optional<TensorType>> types = {type_of(x), std::nullopt, std::nullopt};
    std::vector<RefTensor> feeds = {x};
    if (mask & 1) { types[1] = type_of(w); feeds.push_back(w); }
    if (mask & 2) { types[2] = type_of(b); feeds.push_back(b); }
    double eps = rnd(0, 1) ? 1e-5 : 0.1;
    OneOp o = build_op(OpKind::LayerNorm, types, attrs({{"eps", eps}}));
    ASSERT_FALSE(o.error) << o.error->message;
    check_op(o, feeds, 1e-5, {}, "mask " + std::to_string(mask));
  }
}

TEST(KernelsReduce, CrossEntropy) {
  for (int rep = 0; rep < 4; ++rep) {
    auto pos = random_shape(rnd(0, 3), 1, 6);
    int64_t classes = rnd(1, 40);
    auto ls = pos;
    ls.push_back(classes);
    RefTensor logits = random_tensor(DType::F32, ls, -8, 8);
    RefTensor targets = random_tensor(DType::I32, pos, 0, static_cast<double>(classes));
    check_op(build_op(OpKind::CrossEntropy, {type_of(logits), type_of(targets)}), {logits, targets}, 1e-5);
  }
}

TEST(KernelsReduce, CrossEntropyTargetOutOfRangeGivesNaN) {
  for (double bad : {-1.0, 5.0}) {
    RefTensor logits = random_tensor(DType::F32, {3, 5});
    RefTensor targets = random_tensor(DType::I32, {3}, 0, 5);
    targets.data[static_cast<size_t>(rnd(0, 2))] = bad;
    OneOp o = build_op(OpKind::CrossEntropy, {type_of(logits), type_of(targets)});
    auto c = compile_node(o.g, o.node);
    RefTensor got = run_kernel(*c, o.g.node(o.node), {&logits, &targets}, {}).at(0);
    EXPECT_TRUE(std::isnan(got[0])) << got[0];
    EXPECT_THROW(run_op(o, {logits, targets}), UserError);  // the reference refuses instead
  }
}

TEST(KernelsReduce, SymbolicBatchReductionAndRows) {
  OneOp s = build_op(OpKind::Sum, {f32({B, 9, T})}, attrs({{"axes", Ints{0, 2}}, {"keepdims", true}}));
  OneOp sm = build_op(OpKind::Softmax, {f32({B, T})}, attrs({{"axis", int64_t(0)}}));
  auto cs = compile_node(s.g, s.node);
  auto csm = compile_node(sm.g, sm.node);
  for (int rep = 0; rep < 3; ++rep) {
    int64_t bv = rnd(1, 20), tv = rnd(1, 20);
    RefTensor x = random_tensor(DType::F32, {bv, 9, tv});
    expect_near(run_kernel(*cs, s.g.node(s.node), {&x}, {{"B", bv}, {"T", tv}}).at(0), run_op(s, {x})[0], 1e-6);
    RefTensor y = random_tensor(DType::F32, {bv, tv}, -5, 5);
    expect_near(run_kernel(*csm, sm.g.node(sm.node), {&y}, {{"B", bv}, {"T", tv}}).at(0), run_op(sm, {y})[0], 1e-5);
  }
}

// --- the compiler's API and error paths -------------------------------------------------

TEST(KernelCompilerApi, HandlesByRegistryAndDtype) {
  OneOp mm = build_op(OpKind::Matmul, {f32({2, 3}), f32({3, 4})});
  ASSERT_FALSE(mm.error);
  EXPECT_FALSE(KernelCompiler::handles(mm.g, mm.node));
  OneOp half = build_op(OpKind::Exp, {tt(DType::F16, {4})});
  EXPECT_FALSE(KernelCompiler::handles(half.g, half.node));
  OneOp ok = build_op(OpKind::Exp, {f32({4})});
  EXPECT_TRUE(KernelCompiler::handles(ok.g, ok.node));
  EXPECT_FALSE(KernelCompiler::handles(ok.g, ok.g.inputs[0]));  // an input node
}

TEST(KernelCompilerApi, ErrorPaths) {
  SymbolTable syms;
  KernelCompiler kc(syms);
  OneOp mm = build_op(OpKind::Matmul, {f32({2, 3}), f32({3, 4})});
  EXPECT_THROW(kc.emit(mm.g, mm.node), InternalError);
  OneOp a = build_op(OpKind::Add, {f32({B, 3}), f32({3})});
  OneOp m = build_op(OpKind::Max, {f32({B, 3})}, attrs({{"axes", Ints{1}}}));
  EmittedKernel k0 = kc.emit(a.g, a.node);
  EmittedKernel k1 = kc.emit(m.g, m.node);
  EXPECT_EQ(k0.kernel, 0u);
  EXPECT_EQ(k1.kernel, 1u);
  EXPECT_GE(k0.grain, 1);
  std::string text = kc.module_text();
  EXPECT_NE(text.find("k0_add"), std::string::npos);
  EXPECT_NE(text.find("k1_max"), std::string::npos);
  std::shared_ptr<void> code;
  auto descs = kc.finish(code);
  ASSERT_EQ(descs.size(), 2u);
  EXPECT_EQ(descs[1].name, "k1_max");
  EXPECT_NE(descs[0].source.find("k0_add.body"), std::string::npos);
  EXPECT_TRUE(descs[0].host && descs[1].host && code);
  EXPECT_EQ(kc.module_text(), text);
  EXPECT_THROW(kc.emit(a.g, a.node), InternalError);
  EXPECT_THROW(kc.finish(code), InternalError);
  // The kernels outlive the compiler through `code`.
}

}  // namespace
}  // namespace modelc::test
