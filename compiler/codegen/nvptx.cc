// The kernel compiler's NVPTX path: the GPU flavour of every group's body (emitted beside
// the host flavour, codelets_fused.cc) behind a GPU kernel per group, with libdevice for the
// math functions, compiled to PTX by LLVM's NVPTX backend.
//
// Launch shapes (choose_gpu_shape):
//  - Thread-mapped (loop groups, reductions over few elements per output): 256 threads per
//    block; a grid-stride loop over the work items. When the body reads or writes some
//    buffer at the work item's own index, the kernel first checks at run time that `begin`
//    is a multiple of 4 and that those buffers are 16-byte aligned; if so each thread takes
//    4 consecutive work items per step (the loads and stores of the 4 inlined bodies merge
//    into ld.global.v4 / st.global.v4), and the last extent % 4 items go one per thread.
//    Otherwise (or for a kernel without such a buffer) one work item per step.
//  - Block-mapped (row groups; reductions over many elements, or with few work items, and
//    the Partial kernels of two-phase reductions): one work item per block (grid-stride
//    over blocks), the block's threads cooperating through CodeletBuilder's primitives
//    (gpu_primitives.cc; a column reduction's tile splits the block into columns and
//    rows). The block size follows the work item's elements: about 4 per thread, a
//    multiple of 32 in [32, 1024].
// Every kernel carries .reqntid: it must be launched with exactly gpu_block threads. The
// ABI and the grid the runtime launches are in runtime/base/program.h (CodeletDesc).
#include <mutex>

#include <fmt/format.h>
#include <llvm/ADT/SmallString.h>
#include <llvm/IR/IRBuilder.h>
#include <llvm/IR/IntrinsicsNVPTX.h>
#include <llvm/IR/LegacyPassManager.h>
#include <llvm/IR/Verifier.h>
#include <llvm/MC/TargetRegistry.h>
#include <llvm/Support/TargetSelect.h>
#include <llvm/Support/raw_ostream.h>
#include <llvm/Transforms/Utils/Cloning.h>

#include "compiler/codegen/codelets_impl.h"
#include "compiler/ir/op_registry.h"

namespace modelc {
namespace {

constexpr const char* kTriple = "nvptx64-nvidia-cuda";
constexpr uint32_t kThreadBlock = 256;  // threads per block of a thread-mapped kernel
constexpr int64_t kItemsPerThread = 4;  // work items per thread and step of the vector path

std::unique_ptr<llvm::TargetMachine> nvptx_machine(const std::string& sm) {
  static std::once_flag init;
  std::call_once(init, [] {
    LLVMInitializeNVPTXTargetInfo();
    LLVMInitializeNVPTXTarget();
    LLVMInitializeNVPTXTargetMC();
    LLVMInitializeNVPTXAsmPrinter();
  });
  std::string err;
  const llvm::Target* target = llvm::TargetRegistry::lookupTarget(kTriple, err);
  if (!target) throw InternalError("kernel compiler: no NVPTX target: " + err);
  // PTX 7.8 (CUDA 11.8): the oldest ISA that covers both sm_80 and sm_90.
  std::unique_ptr<llvm::TargetMachine> tm(target->createTargetMachine(
      kTriple, sm, "+ptx78", llvm::TargetOptions(), std::nullopt, std::nullopt, llvm::CodeGenOptLevel::Aggressive));
  if (!tm) throw InternalError("kernel compiler: cannot create an NVPTX target machine for " + sm);
  return tm;
}

// About 4 elements per thread, a multiple of 32 in [32, 1024].
uint32_t block_for(int64_t elements) {
  int64_t t = (elements + 3) / 4;
  t = (t + 31) / 32 * 32;
  return static_cast<uint32_t>(std::clamp<int64_t>(t, 32, 1024));
}

// A 64-bit special register (tid.x, ctaid.x, nctaid.x).
llvm::Value* sreg(llvm::IRBuilder<>& b, llvm::Intrinsic::ID id) {
  return b.CreateZExt(b.CreateIntrinsic(id, {}, {}), b.getInt64Ty());
}

// for (i = start; i < end; i += step) body(i), as a loop with a phi.
void stride_loop(llvm::IRBuilder<>& b, llvm::Function* f, llvm::Value* start, llvm::Value* end, llvm::Value* step,
                 const std::function<void(llvm::Value*)>& body, const char* name) {
  llvm::LLVMContext& ctx = b.getContext();
  llvm::BasicBlock* before = b.GetInsertBlock();
  auto* loop = llvm::BasicBlock::Create(ctx, name, f);
  auto* done = llvm::BasicBlock::Create(ctx, std::string(name) + ".done", f);
  b.CreateCondBr(b.CreateICmpSLT(start, end), loop, done);
  b.SetInsertPoint(loop);
  llvm::PHINode* i = b.CreatePHI(b.getInt64Ty(), 2, "i");
  i->addIncoming(start, before);
  body(i);
  llvm::Value* next = b.CreateAdd(i, step, "", true, true);
  i->addIncoming(next, b.GetInsertBlock());
  b.CreateCondBr(b.CreateICmpSLT(next, end), loop, done);
  b.SetInsertPoint(done);
}

void annotate(llvm::Module& m, llvm::Function* f, const char* key, uint32_t value) {
  llvm::LLVMContext& ctx = m.getContext();
  llvm::Metadata* md[] = {llvm::ValueAsMetadata::get(f), llvm::MDString::get(ctx, key),
                          llvm::ValueAsMetadata::get(llvm::ConstantInt::get(llvm::Type::getInt32Ty(ctx), value))};
  m.getOrInsertNamedMetadata("nvvm.annotations")->addOperand(llvm::MDNode::get(ctx, md));
}

}  // namespace

std::unique_ptr<llvm::Module> new_gpu_module(llvm::LLVMContext& ctx) {
  auto m = std::make_unique<llvm::Module>("modelc_gpu_kernels", ctx);
  m->setTargetTriple(kTriple);
  m->setDataLayout(nvptx_machine("sm_80")->createDataLayout());
  return m;
}

GpuShape choose_gpu_shape(const Graph& g, const FusionGroup& grp, const ReducePlan& plan, ReducePhase phase) {
  GpuShape thread{false, kThreadBlock};
  if (grp.kind == FusionGroup::Kind::Row) return {true, block_for(estimate({row_length(g, g.node(grp.anchor))}))};
  if (grp.kind != FusionGroup::Kind::Reduce || grp.anchor == kNoNode) return thread;
  // Many elements per work item (cross_entropy: a position per thread), or too few work
  // items to fill the GPU with one thread each (codelets_reduce.cc, reduction_work).
  const ReduceWork w = reduction_work(g, g.node(grp.anchor), plan, phase);
  if (w.gpu_elements > 0) return {true, block_for(w.gpu_elements)};
  return thread;
}

llvm::Function* emit_gpu_kernel(llvm::Module& m, llvm::Function* body, const std::string& name, GpuShape shape,
                                const std::vector<bool>& direct) {
  llvm::LLVMContext& ctx = m.getContext();
  llvm::IRBuilder<> b(ctx);
  llvm::Function* f = declare_kernel_entry(m, name);
  llvm::Type* ptr = b.getPtrTy();
  llvm::Value *buffers = f->getArg(0), *sizes = f->getArg(1), *begin = f->getArg(2), *end = f->getArg(3);
  b.SetInsertPoint(llvm::BasicBlock::Create(ctx, "entry", f));
  auto call = [&](llvm::Value* i) { b.CreateCall(body, {i, buffers, sizes}); };
  llvm::Value* block = b.getInt64(shape.block);
  llvm::Value* ctaid = sreg(b, llvm::Intrinsic::nvvm_read_ptx_sreg_ctaid_x);
  llvm::Value* nctaid = sreg(b, llvm::Intrinsic::nvvm_read_ptx_sreg_nctaid_x);

  if (shape.block_mapped) {
    // One work item per block; every thread of the block runs the body for it.
    stride_loop(b, f, b.CreateAdd(begin, ctaid), end, nctaid, call, "items");
    b.CreateRetVoid();
  } else {
    llvm::Value* tid = sreg(b, llvm::Intrinsic::nvvm_read_ptx_sreg_tid_x);
    llvm::Value* thread = b.CreateAdd(b.CreateMul(ctaid, block), tid, "thread");
    llvm::Value* stride = b.CreateMul(nctaid, block, "stride");
    std::vector<size_t> vec;
    for (size_t k = 0; k < direct.size(); ++k)
      if (direct[k]) vec.push_back(k);
    if (!vec.empty()) {
      // The buffers exactly as the body reads them (so that they are the same values once
      // the body is inlined): global pointers loaded from the global table.
      llvm::Value* table = b.CreateAddrSpaceCast(buffers, b.getPtrTy(1));
      std::vector<llvm::Value*> bufs;
      llvm::Value* misaligned = b.CreateAnd(begin, b.getInt64(kItemsPerThread - 1));
      for (size_t k : vec) {
        llvm::LoadInst* p = b.CreateLoad(ptr, b.CreateConstInBoundsGEP1_64(ptr, table, k));
        p->setMetadata(llvm::LLVMContext::MD_invariant_load, llvm::MDNode::get(ctx, {}));
        bufs.push_back(b.CreateAddrSpaceCast(p, b.getPtrTy(1)));
        misaligned = b.CreateOr(misaligned, b.CreateAnd(b.CreatePtrToInt(bufs.back(), b.getInt64Ty()), b.getInt64(15)));
      }
      auto* wide = llvm::BasicBlock::Create(ctx, "wide", f);
      auto* scalar = llvm::BasicBlock::Create(ctx, "scalar", f);
      llvm::BasicBlock* entry = b.GetInsertBlock();
      llvm::Value* start = b.CreateAdd(begin, thread);
      b.CreateCondBr(b.CreateICmpEQ(misaligned, b.getInt64(0)), wide, scalar);
      b.SetInsertPoint(wide);
      for (llvm::Value* p : bufs) {
        llvm::Value* args[] = {p, b.getInt64(16)};
        b.CreateAssumption(b.getTrue(), {llvm::OperandBundleDef("align", args)});
      }
      llvm::Value* base = b.CreateAnd(begin, b.getInt64(-kItemsPerThread), "base");  // == begin here
      llvm::Value* groups = b.CreateSDiv(b.CreateSub(end, base), b.getInt64(kItemsPerThread), "groups");
      stride_loop(b, f, thread, groups, stride, [&](llvm::Value* q) {
        llvm::Value* i = b.CreateAdd(base, b.CreateShl(q, 2, "", true, true), "", true, true);
        for (int64_t j = 0; j < kItemsPerThread; ++j) call(j == 0 ? i : b.CreateAdd(i, b.getInt64(j), "", true, true));
      }, "quads");
      // The last (end - begin) % 4 work items: one per thread, in the scalar loop.
      llvm::Value* whole = b.CreateSelect(b.CreateICmpSGT(groups, b.getInt64(0)), groups, b.getInt64(0));
      llvm::Value* rest = b.CreateAdd(b.CreateAdd(base, b.CreateMul(whole, b.getInt64(kItemsPerThread))), thread);
      llvm::BasicBlock* from_wide = b.GetInsertBlock();
      b.CreateBr(scalar);
      b.SetInsertPoint(scalar);
      llvm::PHINode* phi = b.CreatePHI(b.getInt64Ty(), 2, "start");
      phi->addIncoming(start, entry);
      phi->addIncoming(rest, from_wide);
      stride_loop(b, f, phi, end, stride, call, "items");
    } else {
      stride_loop(b, f, b.CreateAdd(begin, thread), end, stride, call, "items");
    }
    b.CreateRetVoid();
  }
  annotate(m, f, "kernel", 1);
  annotate(m, f, "reqntidx", shape.block);
  return f;
}

llvm::Function* emit_gpu_horizontal(llvm::Module& m, const std::string& name, const std::vector<Segment>& segments,
                                    uint32_t block) {
  llvm::IRBuilder<> b(m.getContext());
  llvm::Function* f = declare_kernel_entry(m, name);
  llvm::Value *buffers = f->getArg(0), *sizes = f->getArg(1), *begin = f->getArg(2), *end = f->getArg(3);
  b.SetInsertPoint(llvm::BasicBlock::Create(m.getContext(), "entry", f));
  llvm::Type* i64 = b.getInt64Ty();
  llvm::Value* table = b.CreateAddrSpaceCast(sizes, b.getPtrTy(1));
  llvm::Value* ctaid = sreg(b, llvm::Intrinsic::nvvm_read_ptx_sreg_ctaid_x);
  llvm::Value* nctaid = sreg(b, llvm::Intrinsic::nvvm_read_ptx_sreg_nctaid_x);
  llvm::Value* tid = sreg(b, llvm::Intrinsic::nvvm_read_ptx_sreg_tid_x);
  llvm::Value* thread = b.CreateAdd(b.CreateMul(ctaid, b.getInt64(block)), tid, "thread");
  llvm::Value* stride = b.CreateMul(nctaid, b.getInt64(block), "stride");
  llvm::Value* off = b.getInt64(0);
  for (const Segment& s : segments) {
    llvm::LoadInst* n = b.CreateLoad(i64, b.CreateConstInBoundsGEP1_64(i64, table, s.extent_slot), "segment");
    n->setMetadata(llvm::LLVMContext::MD_invariant_load, llvm::MDNode::get(m.getContext(), {}));
    llvm::Value* lo = b.CreateSub(begin, off);
    lo = b.CreateSelect(b.CreateICmpSLT(lo, b.getInt64(0)), b.getInt64(0), lo);
    llvm::Value* hi = b.CreateSub(end, off);
    hi = b.CreateSelect(b.CreateICmpSLT(hi, n), hi, n);
    stride_loop(b, f, b.CreateAdd(lo, thread), hi, stride,
                [&](llvm::Value* i) { b.CreateCall(s.body, {i, buffers, sizes}); }, "segment");
    off = b.CreateAdd(off, n);
  }
  b.CreateRetVoid();
  annotate(m, f, "kernel", 1);
  annotate(m, f, "reqntidx", block);
  return f;
}

std::string CodeletCompiler::ptx(const std::string& sm) const {
  const Impl& im = *impl_;
  if (im.finished) throw InternalError("kernel compiler: ptx() after finish()");
  if (!im.gpu_module) throw InternalError("kernel compiler: ptx() needs a CodeletCompiler constructed with gpu = true");
  std::unique_ptr<llvm::TargetMachine> tm = nvptx_machine(sm);
  std::unique_ptr<llvm::Module> m = llvm::CloneModule(*im.gpu_module);
  m->setDataLayout(tm->createDataLayout());
  link_libdevice(*m);
  std::string err;
  llvm::raw_string_ostream es(err);
  if (llvm::verifyModule(*m, &es)) throw InternalError("kernel compiler: invalid NVPTX module: " + err);
  optimize_module(*m, tm.get(), false, /*vectorize=*/false);  // the backend merges loads itself
  for (const llvm::Function& f : *m)
    if (f.isDeclaration() && !f.isIntrinsic() && !f.use_empty())
      throw InternalError(fmt::format("kernel compiler: the GPU code calls '{}', which nothing defines", f.getName().str()));

  llvm::SmallString<0> out;
  llvm::raw_svector_ostream os(out);
  llvm::legacy::PassManager pm;
  if (tm->addPassesToEmitFile(pm, os, nullptr, llvm::CodeGenFileType::AssemblyFile))
    throw InternalError("kernel compiler: the NVPTX backend cannot emit assembly");
  pm.run(*m);
  return std::string(out.str());
}

}  // namespace modelc
