// Reduction and row kernels against the double reference: sum/mean/max over random axis
// sets with keepdims, a 1e5-element sum, NaN in max, softmax / log_softmax on any axis,
// layer_norm with and without weight and bias, cross_entropy (and NaN for a bad target),
// a symbolic batch; and the compiler's error paths.
//
// Column reductions in tiles of 16 columns, and reductions with few outputs over many
// elements in two phases (partials over chunks, then their combination), scalar, rows,
// tiles and cross_entropy, with symbolic sizes; each kernel runs in random chunks
// [begin, end) of its work items, as the executor splits them.
//
// Tolerances (relative, as expect_near): sums accumulate in f64, so 1e-6 holds even for
// 1e5 elements (and for two phases, whose f64 partials are kept to about 2^-48); row ops
// and cross_entropy 1e-5 (f32 exp and normalisation); max and i32 sums exact.
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

// Column reductions (the innermost axis kept) take tiles of 16 columns per work item:
// column counts below, at and around multiples of 16 (a last tile that is not full), a kept
// group before the reduced one, keepdims, every kind and an i32 sum.
TEST(KernelsReduce, ColumnReductionsInTiles) {
  for (OpKind k : {OpKind::Sum, OpKind::Mean, OpKind::Max}) {
    for (int64_t cols : {rnd(2, 15), int64_t{16}, int64_t{17}, rnd(18, 70)}) {
      const int64_t rows = rnd(1, 40);
      RefTensor x = random_tensor(DType::F32, {rows, cols}, -2, 2);
      check_op(build_op(k, {type_of(x)}, attrs({{"axes", Ints{0}}, {"keepdims", rnd(0, 1) == 1}})), {x}, 1e-6);
      RefTensor y = random_tensor(DType::F32, {rnd(1, 4), rows, cols}, -2, 2);
      check_op(build_op(k, {type_of(y)}, attrs({{"axes", Ints{1}}})), {y}, 1e-6);
      check_op(build_op(k, {type_of(y)}, attrs({{"axes", Ints{0, 1}}})), {y}, 1e-6);
    }
  }
  RefTensor i = random_tensor(DType::I32, {rnd(1, 30), rnd(17, 40)}, -1000, 1000);
  check_op(build_op(OpKind::Sum, {type_of(i)}, attrs({{"axes", Ints{0}}})), {i}, 0);
}

// Emits op's node and says whether it runs in two phases (a partial kernel over chunks of
// the reduced elements, then one that combines the partials).
bool two_phase(const OneOp& o) { return compile_node(o.g, o.node)->codelet.partial.has_value(); }

// Few outputs over many elements: two phases, with chunk counts that do not divide the
// reduced extent; a scalar, three rows, columns in tiles (the partials per tile), two
// reduced groups around a kept one; every kind, i32 sums, NaN in one chunk of a max.
TEST(KernelsReduce, TwoPhaseReductions) {
  const std::vector<std::pair<std::vector<int64_t>, Ints>> cases = {
      {{rnd(20000, 70000)}, {0}},                   // one output
      {{3, rnd(9000, 20000)}, {1}},                 // three rows
      {{rnd(9000, 20000), rnd(17, 40)}, {0}},       // few tiles of many rows
      {{rnd(2, 4), rnd(3000, 9000), 5}, {0, 1}},    // one tile
      {{rnd(3000, 6000), 3, 7}, {0, 2}},            // chunks of the longer reduced group
  };
  for (const auto& [shape, axes] : cases) {
    for (OpKind k : {OpKind::Sum, OpKind::Mean, OpKind::Max}) {
      RefTensor x = random_tensor(DType::F32, shape, -2, 2);
      OneOp o = build_op(k, {type_of(x)}, attrs({{"axes", axes}}));
      ASSERT_FALSE(o.error) << o.error->message;
      EXPECT_TRUE(two_phase(o)) << x.shape_str();
      check_op(o, {x}, 1e-6);
    }
    RefTensor i = random_tensor(DType::I32, shape, -1000, 1000);
    check_op(build_op(OpKind::Sum, {type_of(i)}, attrs({{"axes", axes}})), {i}, 0);
  }
  RefTensor x = random_tensor(DType::F32, {rnd(20000, 40000)});
  x.data[static_cast<size_t>(rnd(0, x.numel() - 1))] = std::numeric_limits<double>::quiet_NaN();
  check_op(build_op(OpKind::Max, {type_of(x)}), {x}, 0);
  check_op(build_op(OpKind::Sum, {type_of(x)}), {x}, 0);
  // Few elements stay one phase.
  EXPECT_FALSE(two_phase(build_op(OpKind::Sum, {f32({1000})})));
  EXPECT_FALSE(two_phase(build_op(OpKind::Sum, {f32({100, 9000})}, attrs({{"axes", Ints{1}}}))));  // 100 outputs
}

// cross_entropy over many positions: two phases (chunks of positions), and a bad target
// in any chunk still makes the loss NaN.
TEST(KernelsReduce, TwoPhaseCrossEntropy) {
  const int64_t positions = rnd(600, 1500), classes = rnd(17, 40);
  RefTensor logits = random_tensor(DType::F32, {positions, classes}, -8, 8);
  RefTensor targets = random_tensor(DType::I32, {positions}, 0, static_cast<double>(classes));
  OneOp o = build_op(OpKind::CrossEntropy, {type_of(logits), type_of(targets)});
  EXPECT_TRUE(two_phase(o));
  check_op(o, {logits, targets}, 1e-5);
  targets.data[static_cast<size_t>(rnd(0, positions - 1))] = -1;
  auto c = compile_node(o.g, o.node);
  RefTensor got = run_kernel(*c, o.g.node(o.node), {&logits, &targets}, {}).at(0);
  EXPECT_TRUE(std::isnan(got[0])) << got[0];
}

// Symbolic sizes: the rows of a column reduction and a scalar's elements (chunks planned
// for B = T = 64, run with fewer rows than chunks and with many), and symbolic columns
// (every column a work item; those at multiples of 16 reduce a tile).
TEST(KernelsReduce, SymbolicTwoPhasesAndTiles) {
  OneOp cols = build_op(OpKind::Sum, {f32({B, T, 24})}, attrs({{"axes", Ints{0, 1}}}));
  OneOp all = build_op(OpKind::Mean, {f32({B, 300})});
  OneOp sym = build_op(OpKind::Max, {f32({7, B})}, attrs({{"axes", Ints{0}}}));
  EXPECT_TRUE(two_phase(cols));
  EXPECT_TRUE(two_phase(all));
  EXPECT_FALSE(two_phase(sym));
  for (auto [bv, tv] : {std::pair{rnd(1, 3), rnd(1, 3)}, std::pair{rnd(30, 60), rnd(40, 80)}}) {
    RefTensor x = random_tensor(DType::F32, {bv, tv, 24});
    expect_near(run_kernel(*compile_node(cols.g, cols.node), cols.g.node(cols.node), {&x}, {{"B", bv}, {"T", tv}}).at(0),
                run_op(cols, {x})[0], 1e-6, "cols");
    RefTensor y = random_tensor(DType::F32, {bv, 300});
    expect_near(run_kernel(*compile_node(all.g, all.node), all.g.node(all.node), {&y}, {{"B", bv}}).at(0),
                run_op(all, {y})[0], 1e-6, "all");
    RefTensor z = random_tensor(DType::F32, {7, bv * 3 + 1});
    const int64_t zb = bv * 3 + 1;
    expect_near(run_kernel(*compile_node(sym.g, sym.node), sym.g.node(sym.node), {&z}, {{"B", zb}}).at(0),
                run_op(sym, {z})[0], 0, "symbolic columns");
  }
}

// --- the compiler's API and error paths -------------------------------------------------

TEST(KernelCompilerApi, HandlesByRegistryAndDtype) {
  OneOp mm = build_op(OpKind::Matmul, {f32({2, 3}), f32({3, 4})});
  ASSERT_FALSE(mm.error);
  EXPECT_FALSE(CodeletCompiler::handles(mm.g, mm.node));
  // f16 and bf16 are stored as bits and computed on as f32 (test_codelets_lowp.cc).
  OneOp half = build_op(OpKind::Exp, {tt(DType::F16, {4})});
  EXPECT_TRUE(CodeletCompiler::handles(half.g, half.node));
  OneOp ok = build_op(OpKind::Exp, {f32({4})});
  EXPECT_TRUE(CodeletCompiler::handles(ok.g, ok.node));
  EXPECT_FALSE(CodeletCompiler::handles(ok.g, ok.g.inputs[0]));  // an input node
}

TEST(KernelCompilerApi, ErrorPaths) {
  SymbolTable syms;
  CodeletCompiler kc(syms);
  OneOp mm = build_op(OpKind::Matmul, {f32({2, 3}), f32({3, 4})});
  EXPECT_THROW(kc.emit(mm.g, mm.node), InternalError);
  OneOp a = build_op(OpKind::Add, {f32({B, 3}), f32({3})});
  OneOp m = build_op(OpKind::Max, {f32({B, 3})}, attrs({{"axes", Ints{1}}}));
  EmittedCodelet k0 = kc.emit(a.g, a.node);
  EmittedCodelet k1 = kc.emit(m.g, m.node);
  EXPECT_EQ(k0.codelet, 0u);
  EXPECT_EQ(k1.codelet, 1u);
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
