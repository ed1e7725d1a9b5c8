// The NVPTX path: the GPU flavour of each kernel compiles to PTX through LLVM's NVPTX
// backend and assembles with ptxas for sm_80 and sm_90; the launch shape chosen per group
// (CodeletDesc::gpu_mapping, gpu_block) and the PTX's structure: row reductions with warp
// shuffles, shared memory and barriers; 128-bit loads and stores for aligned elementwise
// kernels; .reqntid; libdevice for math and its error when missing.
#include <cstdlib>
#include <regex>

#include "compiler/pipeline.h"
#include "tests/codegen/jit_harness.h"
#include "tests/codegen/ptxas.h"
#include "tests/passes/train_step_harness.h"

namespace modelc::test {
namespace {

bool has(const std::string& text, const std::string& what) { return text.find(what) != std::string::npos; }

// The PTX of one entry point (from its .entry to the next).
std::string entry_text(const std::string& ptx, const std::string& name) {
  std::string head = ".entry ";
  head.append(name).append("(");
  size_t at = ptx.find(head);
  if (at == std::string::npos) return "";
  size_t next = ptx.find(".entry ", at + 1);
  return ptx.substr(at, next == std::string::npos ? std::string::npos : next - at);
}

TEST(KernelsNvptx, ElementwiseAndReductionGivePtx) {
  SymbolTable syms;
  CodeletCompiler kc(syms, /*gpu=*/true);
  OneOp add = build_op(OpKind::Add, {f32({B, 5}), f32({5})});
  OneOp sum = build_op(OpKind::Sum, {f32({B, 7})}, attrs({{"axes", Ints{1}}}));
  kc.emit(add.g, add.node);
  kc.emit(sum.g, sum.node);
  std::vector<std::string> failures;
  for (const char* sm : {"sm_80", "sm_90"}) {
    std::string ptx = kc.ptx(sm);
    EXPECT_TRUE(has(ptx, std::string(".target ") + sm)) << ptx;
    EXPECT_TRUE(has(ptx, ".entry k0_add")) << ptx;
    EXPECT_TRUE(has(ptx, ".entry k1_sum")) << ptx;
    EXPECT_TRUE(has(ptx, "%tid.x"));
    EXPECT_TRUE(has(ptx, "%ctaid.x"));
    EXPECT_TRUE(has(ptx, "%nctaid.x"));  // grid-stride loops
    EXPECT_TRUE(has(ptx, ".reqntid 256")) << ptx;
    if (!ptxas_path().empty())
      if (std::string e = assemble_ptx(ptx, sm, "add_sum"); !e.empty()) failures.push_back(e);
  }
  for (const std::string& f : failures) ADD_FAILURE() << f;
  // The host path still works after ptx().
  std::shared_ptr<void> code;
  auto descs = kc.finish(code);
  ASSERT_EQ(descs.size(), 2u);
  EXPECT_EQ(descs[0].gpu_mapping, rt::GpuMapping::Thread);
  EXPECT_EQ(descs[1].gpu_mapping, rt::GpuMapping::Thread);  // 7 elements per output: one thread each
  EXPECT_THROW(kc.ptx(), InternalError);
  MODELC_REQUIRE_PTXAS();
}

TEST(KernelsNvptx, PtxNeedsAGpuCompiler) {
  SymbolTable syms;
  CodeletCompiler kc(syms);
  OneOp add = build_op(OpKind::Add, {f32({4}), f32({4})});
  kc.emit(add.g, add.node);
  EXPECT_THROW(kc.ptx("sm_80"), InternalError);
}

TEST(KernelsNvptx, RowGroupUsesShufflesAndSharedMemory) {
  SymbolTable syms;
  CodeletCompiler kc(syms, /*gpu=*/true);
  OneOp sm = build_op(OpKind::Softmax, {f32({B, 1024})}, attrs({{"axis", int64_t(1)}}));
  OneOp ln = build_op(OpKind::LayerNorm, {f32({B, 96}), f32({96}), f32({96})});
  OneOp tiny = build_op(OpKind::LogSoftmax, {f32({B, 10})}, attrs({{"axis", int64_t(-1)}}));
  ASSERT_FALSE(sm.error || ln.error || tiny.error);
  kc.emit(sm.g, sm.node);
  kc.emit(ln.g, ln.node);
  kc.emit(tiny.g, tiny.node);
  const std::string ptx = kc.ptx("sm_80");
  const std::string softmax = entry_text(ptx, "k0_softmax");
  ASSERT_FALSE(softmax.empty()) << ptx;
  EXPECT_TRUE(has(softmax, "shfl.sync.bfly")) << softmax;
  EXPECT_TRUE(has(softmax, "bar.sync")) << softmax;
  EXPECT_TRUE(has(softmax, "st.shared")) << softmax;
  EXPECT_TRUE(has(softmax, ".reqntid 256")) << softmax;
  EXPECT_TRUE(std::regex_search(ptx, std::regex(R"(\.shared \.align \d+ \.b8 k0_softmax\S*\[\d+\])"))) << ptx;
  // f64 sums shuffle as two 32-bit halves.
  EXPECT_TRUE(has(entry_text(ptx, "k1_layer_norm"), "shfl.sync.bfly.b32")) << ptx;
  // A row of 10 fits one warp: shuffles only, no shared memory or barrier.
  const std::string one_warp = entry_text(ptx, "k2_log_softmax");
  EXPECT_TRUE(has(one_warp, "shfl.sync.bfly")) << one_warp;
  EXPECT_FALSE(has(one_warp, "bar.sync")) << one_warp;
  EXPECT_TRUE(has(one_warp, ".reqntid 32")) << one_warp;
  std::shared_ptr<void> code;
  auto descs = kc.finish(code);
  ASSERT_EQ(descs.size(), 3u);
  for (const rt::CodeletDesc& d : descs) EXPECT_EQ(d.gpu_mapping, rt::GpuMapping::Block) << d.name;
  EXPECT_EQ(descs[0].gpu_block, 256u);  // 1024 elements, about 4 per thread
  EXPECT_EQ(descs[1].gpu_block, 32u);
  EXPECT_EQ(descs[2].gpu_block, 32u);
  MODELC_REQUIRE_PTXAS();
  EXPECT_EQ(assemble_ptx(ptx, "sm_80", "rows"), "");
}

TEST(KernelsNvptx, AlignedElementwiseUses128BitAccesses) {
  SymbolTable syms;
  CodeletCompiler kc(syms, /*gpu=*/true);
  OneOp add = build_op(OpKind::Add, {f32({B, 4096}), f32({B, 4096})});
  OneOp bias = build_op(OpKind::Mul, {f32({B, 4096}), f32({4096})});
  kc.emit(add.g, add.node);
  kc.emit(bias.g, bias.node);
  const std::string ptx = kc.ptx("sm_90");
  const std::string k0 = entry_text(ptx, "k0_add"), k1 = entry_text(ptx, "k1_mul");
  const std::regex v4_load(R"(ld\.global(\.nc)?\.v4\.f32)");
  EXPECT_TRUE(std::regex_search(k0, v4_load)) << k0;
  EXPECT_TRUE(has(k0, "st.global.v4.f32")) << k0;
  EXPECT_TRUE(has(k0, "ld.global.nc.f32") || has(k0, "ld.global.f32")) << k0;  // the unaligned path stays
  EXPECT_TRUE(std::regex_search(k1, v4_load)) << k1;  // the operand read at its own index
  EXPECT_TRUE(has(k1, "st.global.v4.f32")) << k1;
  EXPECT_FALSE(has(k0, "bar.sync"));
  MODELC_REQUIRE_PTXAS();
  EXPECT_EQ(assemble_ptx(ptx, "sm_90", "aligned"), "");
}

// A parameter update written in place (plan_in_place) reads the parameter with ordinary
// loads, since the kernel writes it: the non-coherent cache is only for buffers nothing
// writes while the kernel runs. Both still take the 128-bit path.
TEST(KernelsNvptx, InPlaceUpdateReadsItsTargetWithoutTheNonCoherentCache) {
  Graph g;
  Value x{add_source(g, OpKind::Input, "x", f32({4096})), 0};
  Value w{add_source(g, OpKind::Param, "w", f32({4096})), 0};
  Node c;
  c.op = OpKind::Constant;
  c.attrs = attrs({{"value", 0.5}});
  c.outputs = {f32({})};
  Value half{g.add(std::move(c)), 0};
  g.outputs.push_back({"loss", op(g, OpKind::Sum, {x}, attrs({{"axes", Ints{0}}})), {}});
  Graph forward = g;
  g.updates.push_back({w.node, op(g, OpKind::Sub, {w, op(g, OpKind::Mul, {x, half})})});
  LowerOptions lo;
  lo.ptx_target = "sm_80";
  auto prog = lower_program(forward, &g, nullptr, lo);
  const rt::Function* fn = prog->function("train_step");
  ASSERT_EQ(fn->updates.size(), 1u);
  const uint32_t wb = fn->updates[0].second;
  ASSERT_EQ(fn->updates[0].first, wb) << "the update is not in place";
  std::string name;
  for (const rt::Instr& in : fn->instrs)
    if (in.kind == rt::Instr::Kind::Codelet && std::find(in.outputs.begin(), in.outputs.end(), wb) != in.outputs.end())
      name = prog->codelets.at(in.codelet).name;
  ASSERT_FALSE(name.empty());
  const std::string k = entry_text(prog->ptx, name);
  EXPECT_TRUE(has(k, "ld.global.v4.f32")) << k;     // w: written by this kernel
  EXPECT_TRUE(has(k, "ld.global.nc.v4.f32")) << k;  // x: only read
  EXPECT_TRUE(has(k, "st.global.v4.f32")) << k;
  MODELC_REQUIRE_PTXAS();
  EXPECT_EQ(assemble_ptx(prog->ptx, "sm_80", "in_place"), "");
}

TEST(KernelsNvptx, ReductionMappingFollowsTheWork) {
  SymbolTable syms;
  CodeletCompiler kc(syms, /*gpu=*/true);
  OneOp cols = build_op(OpKind::Sum, {f32({B, 784})}, attrs({{"axes", Ints{0}}}));   // bias gradient: 49 tiles
  OneOp rows = build_op(OpKind::Sum, {f32({B, 784})}, attrs({{"axes", Ints{1}}}));   // long rows
  OneOp all = build_op(OpKind::Mean, {f32({B})});                                    // one output
  OneOp ce = build_op(OpKind::CrossEntropy, {f32({B, 10}), tt(DType::I32, {B})});
  OneOp mx = build_op(OpKind::Max, {f32({8, 3, 5000})}, attrs({{"axes", Ints{0, 2}}}));  // two phases
  OneOp tall = build_op(OpKind::Sum, {f32({300, 40})}, attrs({{"axes", Ints{0}}}));     // tiles of many rows
  for (const OneOp* o : {&cols, &rows, &all, &ce, &mx, &tall}) {
    ASSERT_FALSE(o->error);
    kc.emit(o->g, o->node);
  }
  const std::string ptx = kc.ptx("sm_80");
  EXPECT_FALSE(has(entry_text(ptx, "k0_sum"), "shfl.sync"));
  EXPECT_TRUE(has(entry_text(ptx, "k1_sum"), "shfl.sync"));
  EXPECT_TRUE(has(entry_text(ptx, "k3_cross_entropy"), "shfl.sync"));
  EXPECT_TRUE(has(entry_text(ptx, "k4_max_partial"), "bar.sync"));  // 3 outputs: partials, then
  EXPECT_FALSE(has(entry_text(ptx, "k5_max"), "bar.sync"));          // their combination
  // A block per tile of 16 columns: its rows split over the block, combined in shared memory.
  const std::string tile = entry_text(ptx, "k6_sum");
  EXPECT_TRUE(has(tile, "bar.sync")) << tile;
  EXPECT_TRUE(has(tile, "st.shared")) << tile;
  EXPECT_FALSE(has(tile, "shfl.sync")) << tile;
  std::shared_ptr<void> code;
  auto d = kc.finish(code);
  ASSERT_EQ(d.size(), 7u);
  EXPECT_EQ(d[0].gpu_mapping, rt::GpuMapping::Thread);
  EXPECT_EQ(d[0].gpu_block, 256u);
  EXPECT_EQ(d[1].gpu_mapping, rt::GpuMapping::Block);
  EXPECT_EQ(d[1].gpu_block, 196u + 28u);  // 784 / 4 = 196, rounded up to 224
  EXPECT_EQ(d[2].gpu_mapping, rt::GpuMapping::Block);
  EXPECT_EQ(d[3].gpu_mapping, rt::GpuMapping::Block);
  EXPECT_EQ(d[4].gpu_mapping, rt::GpuMapping::Block);
  EXPECT_EQ(d[4].gpu_block, 1024u);
  EXPECT_EQ(d[5].gpu_mapping, rt::GpuMapping::Thread);
  EXPECT_EQ(d[6].gpu_mapping, rt::GpuMapping::Block);
  EXPECT_EQ(d[6].gpu_block, 1024u);
  for (const rt::CodeletDesc& k : d) EXPECT_EQ(k.gpu_block % 32, 0u) << k.name;
  MODELC_REQUIRE_PTXAS();
  EXPECT_EQ(assemble_ptx(ptx, "sm_80", "reductions"), "");
}

// Sets an environment variable for one scope.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = old;
    setenv(name, value, 1);
  }
  ~ScopedEnv() {
    if (old_) setenv(name_, old_->c_str(), 1);
    else unsetenv(name_);
  }
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;

 private:
  const char* name_;
  std::optional<std::string> old_;
};

TEST(KernelsNvptx, MathComesFromLibdevice) {
  SymbolTable syms;
  CodeletCompiler kc(syms, /*gpu=*/true);
  OneOp gelu = build_op(OpKind::Gelu, {f32({B, 64})});
  OneOp ex = build_op(OpKind::Exp, {f32({B, 64})});
  OneOp pw = build_op(OpKind::Pow, {f32({B, 64}), f32({64})});
  for (const OneOp* o : {&gelu, &ex, &pw}) {
    ASSERT_FALSE(o->error);
    kc.emit(o->g, o->node);
  }
  const std::string ptx = kc.ptx("sm_80");
  EXPECT_FALSE(has(ptx, ".extern")) << ptx;  // every math function is defined (inlined)
  EXPECT_FALSE(has(ptx, "__nv_")) << ptx;
  {
    ScopedEnv env("MODELC_LIBDEVICE", "/nonexistent/libdevice.10.bc");
    try {
      (void)kc.ptx("sm_80");
      ADD_FAILURE() << "no error without libdevice";
    } catch (const UserError& e) {
      EXPECT_TRUE(has(e.what(), "MODELC_LIBDEVICE=/nonexistent/libdevice.10.bc")) << e.what();
      EXPECT_TRUE(has(e.what(), "__nv_expf")) << e.what();
    }
  }
  MODELC_REQUIRE_PTXAS();
  EXPECT_EQ(assemble_ptx(ptx, "sm_80", "libdevice"), "");
}

TEST(KernelsNvptx, NoMathNeedsNoLibdevice) {
  ScopedEnv env("MODELC_LIBDEVICE", "/nonexistent/libdevice.10.bc");
  SymbolTable syms;
  CodeletCompiler kc(syms, /*gpu=*/true);
  OneOp add = build_op(OpKind::Add, {f32({B, 5}), f32({5})});
  kc.emit(add.g, add.node);
  EXPECT_TRUE(has(kc.ptx("sm_90"), ".entry k0_add"));
}

}  // namespace
}  // namespace modelc::test
