// The GPU flavour of the kernels against the double reference, run on the CPU by emulation
// (tests/codegen/gpu_emulator.h): block reductions (warp shuffles, shared memory, barriers)
// for sum / mean / max, the row ops and cross_entropy, with one warp and with many, short
// and long rows, NaN and i32 sums; thread-mapped reductions; elementwise kernels through
// the 128-bit path (aligned buffers, begin a multiple of 4, a tail) and its fallback
// (misaligned buffers, or begin not a multiple of 4); fused groups with a prologue and an
// epilogue. Grids smaller than the work, so that the grid-stride loops go round.
//
// Tolerances as the host tests': f64 sums in another order stay within 1e-6; row ops 1e-5.
#include <limits>

#include <fmt/format.h>

#include "compiler/passes/fusion.h"
#include "tests/codegen/gpu_emulator.h"
#include "tests/codegen/jit_harness.h"
#include "tests/passes/train_step_harness.h"

namespace modelc::test {
namespace {

struct GpuRun {
  rt::KernelDesc desc;
  std::vector<RefTensor> outs;
};

// Emits with `emit` into a GPU compiler, runs the GPU flavour over the whole extent in one
// or two launches (split at a random work item), and returns the outputs.
GpuRun run_gpu(const std::function<EmittedKernel(KernelCompiler&)>& emit, const std::vector<const RefTensor*>& ins,
               const std::vector<TensorType>& out_types, const std::map<std::string, int64_t>& dims,
               const InterpOptions& opts, size_t misalign) {
  SymbolTable syms;
  KernelCompiler kc(syms, /*gpu=*/true);
  EmittedKernel k = emit(kc);
  const std::string ir = kc.gpu_module_text();
  std::shared_ptr<void> code;
  std::vector<rt::KernelDesc> descs = kc.finish(code);
  const rt::KernelDesc& d = descs.at(k.kernel);
  emu::GpuEmulator gpu(ir);
  emu::GpuEmulator::Kernel fn = gpu.lookup(d.name);
  std::vector<int64_t> symvals = symbol_values(syms, dims, opts.seed, opts.step);
  std::vector<int64_t> sizes;
  for (const rt::SizeExpr& s : k.sizes) sizes.push_back(s.eval(symvals));
  const int64_t extent = k.extent.eval(symvals);
  RawBuffers io(ins, out_types, dims, misalign);
  const int before = emu::g_bad_sync.load();
  int64_t split = extent > 1 && rnd(0, 1) ? rnd(1, extent - 1) : extent;
  for (auto [begin, end] : {std::pair{int64_t(0), split}, std::pair{split, extent}}) {
    if (begin >= end) continue;
    // Fewer threads (or blocks) than work items: the grid-stride loops go round.
    const int64_t n = end - begin;
    int64_t grid = d.gpu_mapping == rt::GpuMapping::Block ? std::min<int64_t>(n, 3)
                                                          : std::min<int64_t>((n + 4 * d.gpu_block - 1) / (4 * d.gpu_block), 2);
    emu::GpuEmulator::launch(fn, d, static_cast<uint32_t>(std::max<int64_t>(grid, 1)), io.ptrs.data(), sizes.data(), begin, end);
  }
  EXPECT_EQ(emu::g_bad_sync.load(), before) << d.name << ": a barrier or shuffle in a thread-mapped kernel";
  return {d, io.read_outputs()};
}

// check_op for the GPU flavour: op's node against the reference.
GpuRun check_gpu_op(const OneOp& o, const std::vector<RefTensor>& inputs, double tol, const InterpOptions& opts = {},
                    size_t misalign = 0) {
  OpReference rr = op_reference(o, inputs, opts);
  const InterpResult& ref = rr.result;
  const std::vector<const RefTensor*>& ins = rr.inputs;
  const Node& n = o.g.node(o.node);
  EmitOptions eo;
  GpuRun r = run_gpu([&](KernelCompiler& kc) { return kc.emit(o.g, o.node, eo); }, ins, n.outputs, ref.dims, opts, misalign);
  std::string label = fmt::format("gpu {} ({} block {}) out {}", op_name(n.op),
                                  r.desc.gpu_mapping == rt::GpuMapping::Block ? "block-mapped" : "thread-mapped",
                                  r.desc.gpu_block, ref.outputs.at("out0").shape_str());
  expect_near(r.outs.at(0), ref.outputs.at("out0"), tol, label);
  return r;
}

TEST(GpuEmulated, BlockReductionsOverLongRows) {
  for (OpKind k : {OpKind::Sum, OpKind::Mean, OpKind::Max}) {
    RefTensor x = random_tensor(DType::F32, {3, rnd(1500, 3000)}, -2, 2);
    GpuRun r = check_gpu_op(build_op(k, {type_of(x)}, attrs({{"axes", Ints{1}}})), {x}, 1e-6);
    EXPECT_EQ(r.desc.gpu_mapping, rt::GpuMapping::Block);
    EXPECT_GT(r.desc.gpu_block, 32u);
    RefTensor all = random_tensor(DType::F32, {rnd(300, 5000)}, 0, 1);
    check_gpu_op(build_op(k, {type_of(all)}), {all}, 1e-6);
    // Two reduced groups around a kept one: the flattened index space.
    RefTensor y = random_tensor(DType::F32, {rnd(2, 9), 3, rnd(300, 700)}, -1, 1);
    check_gpu_op(build_op(k, {type_of(y)}, attrs({{"axes", Ints{0, 2}}, {"keepdims", true}})), {y}, 1e-6);
  }
}

TEST(GpuEmulated, SmallAndThreadMappedReductions) {
  for (OpKind k : {OpKind::Sum, OpKind::Mean, OpKind::Max}) {
    for (int rep = 0; rep < 3; ++rep) {
      auto shape = random_shape(rnd(1, 3), 1, 7);
      RefTensor x = random_tensor(DType::F32, shape, -2, 2);
      Ints axes;
      for (int d = 0; d < x.rank(); ++d)
        if (rnd(0, 1)) axes.push_back(d);
      check_gpu_op(build_op(k, {type_of(x)}, attrs({{"axes", axes}})), {x}, 1e-6);
    }
    RefTensor cols = random_tensor(DType::F32, {rnd(2, 40), 300}, -2, 2);  // a bias gradient
    GpuRun r = check_gpu_op(build_op(k, {type_of(cols)}, attrs({{"axes", Ints{0}}})), {cols}, 1e-6);
    EXPECT_EQ(r.desc.gpu_mapping, rt::GpuMapping::Thread);
  }
}

TEST(GpuEmulated, IntegerSumsAndNaNMax) {
  RefTensor x = random_tensor(DType::I32, {2, rnd(1000, 3000)}, -100000, 100000);
  check_gpu_op(build_op(OpKind::Sum, {type_of(x)}, attrs({{"axes", Ints{1}}})), {x}, 0);
  RefTensor y = random_tensor(DType::F32, {3, 1200});
  y.data[static_cast<size_t>(rnd(0, 1199))] = std::numeric_limits<double>::quiet_NaN();  // row 0 only
  check_gpu_op(build_op(OpKind::Max, {type_of(y)}, attrs({{"axes", Ints{1}}})), {y}, 0);
  RefTensor empty(DType::F32, {2, 0});
  check_gpu_op(build_op(OpKind::Max, {type_of(empty)}, attrs({{"axes", Ints{1}}})), {empty}, 0);
}

TEST(GpuEmulated, RowOps) {
  for (OpKind k : {OpKind::Softmax, OpKind::LogSoftmax}) {
    for (int64_t len : {rnd(1, 40), rnd(100, 300), rnd(1000, 2100)}) {
      RefTensor x = random_tensor(DType::F32, {rnd(1, 5), len}, -20, 20);
      check_gpu_op(build_op(k, {type_of(x)}, attrs({{"axis", int64_t(-1)}})), {x}, 1e-5);
    }
    RefTensor t = random_tensor(DType::F32, {rnd(200, 600), 3, 2}, -5, 5);  // a strided lane
    check_gpu_op(build_op(k, {type_of(t)}, attrs({{"axis", int64_t(0)}})), {t}, 1e-5);
  }
  for (int mask = 0; mask < 4; ++mask) {
    int64_t len = mask % 2 ? rnd(1, 60) : rnd(500, 1500);
    RefTensor x = random_tensor(DType::F32, {rnd(1, 4), len}, -3, 5);
    RefTensor w = random_tensor(DType::F32, {len}), b = random_tensor(DType::F32, {len});
    std::vector<std::optional<TensorType>> types = {type_of(x), std::nullopt, std::nullopt};
    std::vector<RefTensor> feeds = {x};
    if (mask & 1) { types[1] = type_of(w); feeds.push_back(w); }
    if (mask & 2) { types[2] = type_of(b); feeds.push_back(b); }
    check_gpu_op(build_op(OpKind::LayerNorm, types, attrs({{"eps", 1e-5}})), feeds, 1e-5);
  }
}

TEST(GpuEmulated, CrossEntropy) {
  for (int64_t positions : {rnd(1, 20), rnd(300, 900)}) {
    int64_t classes = rnd(2, 40);
    RefTensor logits = random_tensor(DType::F32, {positions, classes}, -8, 8);
    RefTensor targets = random_tensor(DType::I32, {positions}, 0, static_cast<double>(classes));
    GpuRun r = check_gpu_op(build_op(OpKind::CrossEntropy, {type_of(logits), type_of(targets)}), {logits, targets}, 1e-5);
    EXPECT_EQ(r.desc.gpu_mapping, rt::GpuMapping::Block);
  }
  // A bad target anywhere makes the loss NaN (the reference refuses instead).
  RefTensor logits = random_tensor(DType::F32, {500, 5});
  RefTensor targets = random_tensor(DType::I32, {500}, 0, 5);
  targets.data[static_cast<size_t>(rnd(0, 499))] = -1;
  OneOp o = build_op(OpKind::CrossEntropy, {type_of(logits), type_of(targets)});
  GpuRun r = run_gpu([&](KernelCompiler& kc) { return kc.emit(o.g, o.node); }, {&logits, &targets},
                     o.g.node(o.node).outputs, {}, {}, 0);
  EXPECT_TRUE(std::isnan(r.outs.at(0)[0])) << r.outs.at(0)[0];
}

TEST(GpuEmulated, ElementwiseWideAndScalarPaths) {
  for (size_t misalign : {size_t(0), size_t(4)}) {
    RefTensor a = random_tensor(DType::F32, {rnd(1, 3), rnd(900, 1100)}), b = random_tensor(DType::F32, a.shape);
    check_gpu_op(build_op(OpKind::Add, {type_of(a), type_of(b)}), {a, b}, 1e-6, {}, misalign);
    RefTensor bias = random_tensor(DType::F32, {a.shape.back()});
    check_gpu_op(build_op(OpKind::Mul, {type_of(a), type_of(bias)}), {a, bias}, 1e-6, {}, misalign);
    RefTensor x = random_tensor(DType::F32, {rnd(2000, 3000)}, -4, 4);
    check_gpu_op(build_op(OpKind::Gelu, {type_of(x)}), {x}, 1e-5, {}, misalign);
    RefTensor c = random_tensor(DType::Bool, x.shape, 0, 2), i = random_tensor(DType::I32, x.shape, -9, 9);
    check_gpu_op(build_op(OpKind::Where, {type_of(c), type_of(x), type_of(RefTensor(DType::F32, {}))}),
                 {c, x, RefTensor(DType::F32, {}, 0.5)}, 0, {}, misalign);
    check_gpu_op(build_op(OpKind::Cast, {type_of(i)}, attrs({{"dtype", DType::Bool}})), {i}, 0, {}, misalign);
    InterpOptions opts;
    opts.seed = static_cast<uint64_t>(rnd(0, 1 << 30));
    opts.step = static_cast<uint64_t>(rnd(0, 1000));
    RefTensor pos = random_tensor(DType::F32, x.shape, 0.5, 1.5);  // never 0: a 0 output means dropped
    OneOp drop = build_op(OpKind::Dropout, {type_of(pos)}, attrs({{"p", 0.3}, {"key", int64_t(977)}}));
    RefTensor got = check_gpu_op(drop, {pos}, 1e-6, opts, misalign).outs.at(0);
    RefTensor want = run_op(drop, {pos}, opts)[0];
    for (int64_t e = 0; e < got.numel(); ++e) ASSERT_EQ(got[e] == 0, want[e] == 0) << "element " << e;
  }
}

// A group with a prologue and an epilogue: out = sum(exp(x * 2), axis 1) * 3, and
// out = softmax(x) * w + 1, through emit_group, with the reference on the whole graph.
TEST(GpuEmulated, FusedGroups) {
  for (bool row : {false, true}) {
    Graph g;
    const int64_t rows = rnd(1, 4), len = rnd(200, 1500);
    Value x{add_source(g, OpKind::Input, "x", f32({rows, len})), 0};
    Value w{add_source(g, OpKind::Input, "w", f32({len})), 0};
    Value y;
    if (row) {
      y = op(g, OpKind::Add, {op(g, OpKind::Mul, {op(g, OpKind::Softmax, {x}, attrs({{"axis", int64_t(-1)}})), w}),
                              op(g, OpKind::Exp, {w})});
    } else {
      Value e = op(g, OpKind::Exp, {op(g, OpKind::Mul, {x, x})});
      y = op(g, OpKind::Mul, {op(g, OpKind::Sum, {e}, attrs({{"axes", Ints{1}}})), op(g, OpKind::Neg, {op(g, OpKind::Sum, {x})})});
    }
    g.outputs.push_back({"out", y});
    FusionOptions fo;
    fo.can_emit = [](const Graph& gr, NodeId id) { return KernelCompiler::handles(gr, id); };
    FusionPlan plan = plan_fusion(g, fo);
    RefTensor xv = random_tensor(DType::F32, {rows, len}, -1, 1), wv = random_tensor(DType::F32, {len}, -1, 1);
    InterpResult ref = interpret(g, {{"x", xv}, {"w", wv}});
    for (const FusionGroup& grp : plan.groups) {
      if (grp.kind == FusionGroup::Kind::Library) continue;
      std::vector<const RefTensor*> ins;
      for (const Value& v : grp.inputs) ins.push_back(&ref.values.at(v.node).at(v.index));
      std::vector<TensorType> types;
      for (const Value& v : grp.outputs) types.push_back(g.type(v));
      GpuRun r = run_gpu([&](KernelCompiler& kc) { return kc.emit_group(g, grp, plan.inlined); }, ins, types, {}, {}, 0);
      for (size_t k = 0; k < grp.outputs.size(); ++k)
        expect_near(r.outs.at(k), ref.values.at(grp.outputs[k].node).at(grp.outputs[k].index), 1e-5,
                    fmt::format("{} group of {} nodes, {}", r.desc.name, grp.nodes.size(), row ? "row" : "reduce"));
    }
  }
}

}  // namespace
}  // namespace modelc::test
