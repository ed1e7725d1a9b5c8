// The GPU flavour of the kernels against the double reference, run on the CPU by emulation
// (tests/codegen/gpu_emulator.h): block reductions (warp shuffles, shared memory, barriers)
// for sum / mean / max, the row ops and cross_entropy, with one warp and with many, short
// and long rows, NaN and i32 sums; thread-mapped reductions; elementwise kernels through
// the 128-bit path (aligned buffers, begin a multiple of 4, a tail) and its fallback
// (misaligned buffers, or begin not a multiple of 4); column reductions in tiles (thread-
// and block-mapped) and two-phase reductions (partial kernels, then their combination);
// fused groups with a prologue and an epilogue. Grids smaller than the work, so that the
// grid-stride loops go round.
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
  rt::CodeletDesc desc;
  std::vector<RefTensor> outs;
  std::optional<rt::CodeletDesc> partial;  // a two-phase reduction's first kernel
};

// Emits with `emit` into a GPU compiler, runs the GPU flavour over the whole extent in one
// or two launches (split at a random work item), and returns the outputs. A two-phase
// reduction runs its Partial kernel first, into a NaN-filled scratch buffer.
GpuRun run_gpu(const std::function<EmittedCodelet(CodeletCompiler&)>& emit, const std::vector<const RefTensor*>& ins,
               const std::vector<TensorType>& out_types, const std::map<std::string, int64_t>& dims,
               const InterpOptions& opts, size_t misalign) {
  SymbolTable syms;
  CodeletCompiler kc(syms, /*gpu=*/true);
  EmittedCodelet k = emit(kc);
  const std::string ir = kc.gpu_module_text();
  std::shared_ptr<void> code;
  std::vector<rt::CodeletDesc> descs = kc.finish(code);
  emu::GpuEmulator gpu(ir);
  std::vector<int64_t> symvals = symbol_values(syms, dims, opts.seed, opts.step);
  RawBuffers io(ins, out_types, dims, misalign);
  const int before = emu::g_bad_sync.load();
  auto launch = [&](uint32_t kernel, const std::vector<rt::SizeExpr>& table, const rt::SizeExpr& extent_expr,
                    void* const* buffers) {
    const rt::CodeletDesc& d = descs.at(kernel);
    emu::GpuEmulator::Kernel fn = gpu.lookup(d.name);
    std::vector<int64_t> sizes;
    for (const rt::SizeExpr& s : table) sizes.push_back(s.eval(symvals));
    const int64_t extent = extent_expr.eval(symvals);
    int64_t split = extent > 1 && rnd(0, 1) ? rnd(1, extent - 1) : extent;
    for (auto [begin, end] : {std::pair{int64_t(0), split}, std::pair{split, extent}}) {
      if (begin >= end) continue;
      // Fewer threads (or blocks) than work items: the grid-stride loops go round.
      const int64_t n = end - begin;
      int64_t grid = d.gpu_mapping == rt::GpuMapping::Block ? std::min<int64_t>(n, 3)
                                                            : std::min<int64_t>((n + 4 * d.gpu_block - 1) / (4 * d.gpu_block), 2);
      emu::GpuEmulator::launch(fn, d, static_cast<uint32_t>(std::max<int64_t>(grid, 1)), buffers, sizes.data(), begin, end);
    }
    EXPECT_EQ(emu::g_bad_sync.load(), before) << d.name << ": a barrier or shuffle in a thread-mapped kernel";
  };
  GpuRun run{descs.at(k.codelet), {}, std::nullopt};
  if (!k.partial) {
    launch(k.codelet, k.sizes, k.extent, io.ptrs.data());
  } else {
    run.partial = descs.at(k.partial->codelet);
    // 16-byte aligned, as the runtime's buffers are.
    std::vector<double> scratch((static_cast<size_t>(k.partial->scratch_elements) + 1) / 2 + 2, std::nan(""));
    std::vector<void*> first(io.ptrs.begin(), io.ptrs.begin() + static_cast<std::ptrdiff_t>(io.inputs));
    first.push_back(scratch.data());
    launch(k.partial->codelet, k.partial->sizes, k.partial->extent, first.data());
    std::vector<void*> second = first;
    second.insert(second.end(), io.ptrs.begin() + static_cast<std::ptrdiff_t>(io.inputs), io.ptrs.end());
    launch(k.codelet, k.sizes, k.extent, second.data());
  }
  run.outs = io.read_outputs();
  return run;
}

// check_op for the GPU flavour: op's node against the reference.
GpuRun check_gpu_op(const OneOp& o, const std::vector<RefTensor>& inputs, double tol, const InterpOptions& opts = {},
                    size_t misalign = 0) {
  OpReference rr = op_reference(o, inputs, opts);
  const InterpResult& ref = rr.result;
  const std::vector<const RefTensor*>& ins = rr.inputs;
  const Node& n = o.g.node(o.node);
  EmitOptions eo;
  GpuRun r = run_gpu([&](CodeletCompiler& kc) { return kc.emit(o.g, o.node, eo); }, ins, n.outputs, ref.dims, opts, misalign);
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
    // The kernel over the positions (the partial one of two phases) is block-mapped.
    EXPECT_EQ((r.partial ? *r.partial : r.desc).gpu_mapping, rt::GpuMapping::Block);
  }
  // A bad target anywhere makes the loss NaN (the reference refuses instead).
  RefTensor logits = random_tensor(DType::F32, {500, 5});
  RefTensor targets = random_tensor(DType::I32, {500}, 0, 5);
  targets.data[static_cast<size_t>(rnd(0, 499))] = -1;
  OneOp o = build_op(OpKind::CrossEntropy, {type_of(logits), type_of(targets)});
  GpuRun r = run_gpu([&](CodeletCompiler& kc) { return kc.emit(o.g, o.node); }, {&logits, &targets},
                     o.g.node(o.node).outputs, {}, {}, 0);
  EXPECT_TRUE(std::isnan(r.outs.at(0)[0])) << r.outs.at(0)[0];
}

// Column reductions in tiles of 16 columns: thread-mapped (few rows: one column after
// another) and block-mapped (many rows: the block's threads split the tile's rows and
// columns, then combine through shared memory), with a last tile that is not full; and two
// phases for few outputs over many elements: a block-mapped partial kernel per chunk
// (tiles included), then a thread-mapped one that combines the partials.
TEST(GpuEmulated, ColumnTilesAndTwoPhases) {
  for (OpKind k : {OpKind::Sum, OpKind::Mean, OpKind::Max}) {
    const Attrs cols = attrs({{"axes", Ints{0}}});
    RefTensor few = random_tensor(DType::F32, {rnd(2, 40), rnd(17, 70)}, -2, 2);
    GpuRun r = check_gpu_op(build_op(k, {type_of(few)}, cols), {few}, 1e-6);
    EXPECT_EQ(r.desc.gpu_mapping, rt::GpuMapping::Thread);
    EXPECT_FALSE(r.partial);
    RefTensor many = random_tensor(DType::F32, {rnd(260, 480), rnd(17, 40)}, -2, 2);
    r = check_gpu_op(build_op(k, {type_of(many)}, cols), {many}, 1e-6);
    EXPECT_EQ(r.desc.gpu_mapping, rt::GpuMapping::Block);
    EXPECT_FALSE(r.partial);
    RefTensor wide = random_tensor(DType::F32, {3, rnd(9000, 12000)}, -2, 2);
    r = check_gpu_op(build_op(k, {type_of(wide)}, attrs({{"axes", Ints{1}}})), {wide}, 1e-6);
    ASSERT_TRUE(r.partial);
    EXPECT_EQ(r.partial->gpu_mapping, rt::GpuMapping::Block);
    EXPECT_EQ(r.desc.gpu_mapping, rt::GpuMapping::Thread);
    RefTensor tall = random_tensor(DType::F32, {rnd(9000, 11000), rnd(17, 40)}, -1, 1);
    r = check_gpu_op(build_op(k, {type_of(tall)}, cols), {tall}, 1e-6);
    ASSERT_TRUE(r.partial);
    EXPECT_EQ(r.partial->gpu_mapping, rt::GpuMapping::Block);
  }
  RefTensor i = random_tensor(DType::I32, {rnd(9000, 11000), 3}, -100000, 100000);
  check_gpu_op(build_op(OpKind::Sum, {type_of(i)}, attrs({{"axes", Ints{0}}})), {i}, 0);
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

// Groups with a prologue and an epilogue, through emit_group, with the reference on the
// whole graph: out = sum(exp(x * x), axis 1) * -sum(x); out = softmax(x) * w + exp(w); a
// column reduction of many rows whose prologue reads a row scale and w with broadcasting
// (block-mapped tiles), out = exp(sum(x * rs * w, axis 0)) * w; and a scalar over many
// elements (two phases), out = sqrt(mean(gelu(x + w)) + 3). Run on the emulated GPU and on
// the host (in random chunks of work items).
TEST(GpuEmulated, FusedGroups) {
  for (int variant = 0; variant < 4; ++variant) {
    Graph g;
    const int64_t rows = variant == 2 ? rnd(260, 400) : variant == 3 ? rnd(20, 40) : rnd(1, 4);
    const int64_t len = variant == 2 ? rnd(17, 70) : variant == 3 ? rnd(700, 1000) : rnd(200, 1500);
    Value x{add_source(g, OpKind::Input, "x", f32({rows, len})), 0};
    Value w{add_source(g, OpKind::Input, "w", f32({len})), 0};
    Value rs{add_source(g, OpKind::Input, "rs", f32({rows, 1})), 0};
    Value y;
    if (variant == 0) {
      Value e = op(g, OpKind::Exp, {op(g, OpKind::Mul, {x, x})});
      y = op(g, OpKind::Mul, {op(g, OpKind::Sum, {e}, attrs({{"axes", Ints{1}}})), op(g, OpKind::Neg, {op(g, OpKind::Sum, {x})})});
    } else if (variant == 1) {
      y = op(g, OpKind::Add, {op(g, OpKind::Mul, {op(g, OpKind::Softmax, {x}, attrs({{"axis", int64_t(-1)}})), w}),
                              op(g, OpKind::Exp, {w})});
    } else if (variant == 2) {
      Value p = op(g, OpKind::Mul, {op(g, OpKind::Mul, {x, rs}), w});
      y = op(g, OpKind::Mul, {op(g, OpKind::Exp, {op(g, OpKind::Sum, {p}, attrs({{"axes", Ints{0}}}))}), w});
    } else {
      Value m = op(g, OpKind::Mean, {op(g, OpKind::Gelu, {op(g, OpKind::Add, {x, w})})});
      Node c;
      c.op = OpKind::Constant;
      c.attrs = attrs({{"value", 3.0}});
      c.outputs = {f32({})};
      y = op(g, OpKind::Sqrt, {op(g, OpKind::Add, {m, Value{g.add(std::move(c)), 0}})});
    }
    g.outputs.push_back({"out", y});
    FusionOptions fo;
    fo.can_emit = [](const Graph& gr, NodeId id) { return CodeletCompiler::handles(gr, id); };
    FusionPlan plan = plan_fusion(g, fo);
    RefTensor xv = random_tensor(DType::F32, {rows, len}, -1, 1), wv = random_tensor(DType::F32, {len}, -1, 1);
    RefTensor rv = random_tensor(DType::F32, {rows, 1}, -1, 1);
    InterpResult ref = interpret(g, {{"x", xv}, {"w", wv}, {"rs", rv}});
    for (const FusionGroup& grp : plan.groups) {
      if (grp.kind == FusionGroup::Kind::Library) continue;
      std::vector<const RefTensor*> ins;
      for (const Value& v : grp.inputs) ins.push_back(&ref.values.at(v.node).at(v.index));
      std::vector<TensorType> types;
      for (const Value& v : grp.outputs) types.push_back(g.type(v));
      GpuRun r = run_gpu([&](CodeletCompiler& kc) { return kc.emit_group(g, grp, plan.inlined); }, ins, types, {}, {}, 0);
      if (variant == 2 && grp.kind == FusionGroup::Kind::Reduce) {
        EXPECT_EQ(r.desc.gpu_mapping, rt::GpuMapping::Block) << r.desc.name;
      }
      if (variant == 3 && grp.kind == FusionGroup::Kind::Reduce) {
        EXPECT_TRUE(r.partial) << r.desc.name;
      }
      SymbolTable syms;
      CodeletCompiler kc(syms);
      EmittedCodelet hk = kc.emit_group(g, grp, plan.inlined);
      std::shared_ptr<void> code;
      std::vector<rt::CodeletDesc> descs = kc.finish(code);
      RawBuffers io(ins, types, {});
      run_emitted(descs, hk, symbol_values(syms, {}), io);
      std::vector<RefTensor> host = io.read_outputs();
      for (size_t k = 0; k < grp.outputs.size(); ++k) {
        const RefTensor& want = ref.values.at(grp.outputs[k].node).at(grp.outputs[k].index);
        const std::string what = fmt::format("{} group of {} nodes, variant {}", r.desc.name, grp.nodes.size(), variant);
        expect_near(r.outs.at(k), want, 1e-5, "gpu " + what);
        expect_near(host.at(k), want, 1e-5, "host " + what);
      }
    }
  }
}

// A horizontal kernel (plan_horizontal): three parameter updates of different sizes (one
// of a single element, one that splits its host loop by a broadcast operand) as segments
// of one kernel, on the host in random chunks [begin, end) that cross the segments'
// boundaries, and on the emulated GPU, against the reference's updates.
TEST(GpuEmulated, HorizontalUpdateKernel) {
  for (int rep = 0; rep < 4; ++rep) {
    Graph g;
    const int64_t n1 = rnd(1, 3000), rows = rnd(1, 40), cols = rnd(16, 70);
    Value lr{add_source(g, OpKind::Input, "lr", f32({})), 0};
    Value scale{add_source(g, OpKind::Input, "scale", f32({cols})), 0};
    std::vector<std::pair<Value, Value>> pg;  // (param, gradient)
    const std::vector<std::vector<int64_t>> shapes = {{n1}, {1}, {rows, cols}};
    for (size_t k = 0; k < shapes.size(); ++k) {
      std::vector<Dim> shape(shapes[k].begin(), shapes[k].end());
      pg.emplace_back(Value{add_source(g, OpKind::Param, fmt::format("p{}", k), f32(shape)), 0},
                      Value{add_source(g, OpKind::Input, fmt::format("g{}", k), f32(shape)), 0});
    }
    for (size_t k = 0; k < pg.size(); ++k) {
      Value step = op(g, OpKind::Mul, {lr, pg[k].second});
      if (k == 2) step = op(g, OpKind::Mul, {step, scale});
      g.updates.push_back({pg[k].first.node, op(g, OpKind::Sub, {pg[k].first, step})});
    }
    g.outputs.push_back({"loss", lr});
    FusionOptions fo;
    fo.in_place = false;  // the outputs in buffers of their own, to read back
    fo.can_emit = [](const Graph& gr, NodeId id) { return CodeletCompiler::handles(gr, id); };
    FusionPlan plan = plan_fusion(g, fo);
    ASSERT_EQ(plan.horizontal.size(), 1u);
    ASSERT_EQ(plan.horizontal[0].size(), 3u);
    std::vector<const FusionGroup*> groups;
    for (size_t gi : plan.horizontal[0]) groups.push_back(&plan.groups[gi]);
    std::map<std::string, RefTensor> feeds{{"lr", random_tensor(DType::F32, {}, 0.1, 1)},
                                           {"scale", random_tensor(DType::F32, {cols})}};
    for (size_t k = 0; k < shapes.size(); ++k) {
      feeds[fmt::format("p{}", k)] = random_tensor(DType::F32, shapes[k]);
      feeds[fmt::format("g{}", k)] = random_tensor(DType::F32, shapes[k]);
    }
    InterpResult ref = interpret(g, feeds);
    std::vector<const RefTensor*> ins;
    std::vector<TensorType> types;
    for (const FusionGroup* grp : groups)
      for (const Value& v : grp->inputs) ins.push_back(&ref.values.at(v.node).at(v.index));
    for (const FusionGroup* grp : groups)
      for (const Value& v : grp->outputs) types.push_back(g.type(v));
    auto check = [&](const std::vector<RefTensor>& outs, const std::string& what) {
      ASSERT_EQ(outs.size(), 3u);
      for (size_t k = 0; k < 3; ++k) expect_near(outs[k], ref.updates.at(fmt::format("p{}", k)), 1e-6, fmt::format("{} p{}", what, k));
    };
    // Host: random chunks.
    {
      SymbolTable syms;
      CodeletCompiler kc(syms);
      EmittedCodelet k = kc.emit_horizontal(g, groups, plan.inlined);
      std::shared_ptr<void> code;
      std::vector<rt::CodeletDesc> descs = kc.finish(code);
      std::vector<int64_t> symvals = symbol_values(syms, {});
      std::vector<int64_t> sizes;
      for (const rt::SizeExpr& e : k.sizes) sizes.push_back(e.eval(symvals));
      const int64_t extent = k.extent.eval(symvals);
      EXPECT_EQ(extent, n1 + 1 + rows * cols);
      RawBuffers io(ins, types, {});
      for (int64_t begin = 0; begin < extent;) {
        int64_t end = std::min(extent, begin + rnd(1, extent / 3 + 1));
        descs.at(k.codelet).host(io.ptrs.data(), sizes.data(), begin, end);
        begin = end;
      }
      check(io.read_outputs(), "host " + descs.at(k.codelet).name);
      // One chunk writes exactly its work items: segment k's element e is item
      // offset_k + e, the segments end to end.
      RawBuffers one(ins, types, {});
      const int64_t begin = rnd(0, extent - 1), end = rnd(begin + 1, extent);
      descs.at(k.codelet).host(one.ptrs.data(), sizes.data(), begin, end);
      std::vector<RefTensor> outs = one.read_outputs();
      int64_t offset = 0;
      for (size_t s = 0; s < outs.size(); ++s) {
        const RefTensor& want = ref.updates.at(fmt::format("p{}", s));
        for (int64_t e = 0; e < outs[s].numel(); ++e) {
          const int64_t item = offset + e;
          if (item >= begin && item < end) EXPECT_NEAR(outs[s][e], want[e], 1e-6 * (1 + std::fabs(want[e]))) << "p" << s << "[" << e << "]";
          else EXPECT_TRUE(std::isnan(outs[s][e])) << "p" << s << "[" << e << "] outside [" << begin << ", " << end << ") was written";
        }
        offset += outs[s].numel();
      }
    }
    GpuRun r = run_gpu([&](CodeletCompiler& kc) { return kc.emit_horizontal(g, groups, plan.inlined); }, ins, types, {}, {}, 0);
    EXPECT_EQ(r.desc.gpu_mapping, rt::GpuMapping::Thread);
    check(r.outs, "gpu " + r.desc.name);
  }
}

}  // namespace
}  // namespace modelc::test
