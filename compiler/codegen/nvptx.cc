// The kernel compiler's NVPTX path: the emitted target-neutral bodies in a module with the
// nvptx64-nvidia-cuda triple, each behind a GPU kernel that takes its work item from the
// thread index, compiled to PTX by LLVM's NVPTX backend.
//
// This is the minimal wrapper that proves the bodies are target-neutral (one work item per
// thread, a 1-D grid); launch geometry, libdevice for libm calls and addrspace(1)
// parameters belong to the CUDA lowering.
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

#include "compiler/codegen/kernels_impl.h"

namespace modelc {
namespace {

constexpr const char* kTriple = "nvptx64-nvidia-cuda";

// `void name(ptr buffers, ptr sizes, i64 begin, i64 end)`: thread
// begin + ctaid.x * ntid.x + tid.x runs the body when it is below end.
void emit_gpu_wrapper(llvm::Module& m, llvm::Function* body, const std::string& name) {
  llvm::LLVMContext& ctx = m.getContext();
  llvm::IRBuilder<> b(ctx);
  llvm::Type* ptr = b.getPtrTy();
  auto* ty = llvm::FunctionType::get(b.getVoidTy(), {ptr, ptr, b.getInt64Ty(), b.getInt64Ty()}, false);
  auto* f = llvm::Function::Create(ty, llvm::Function::ExternalLinkage, name, m);
  auto* entry = llvm::BasicBlock::Create(ctx, "entry", f);
  auto* run = llvm::BasicBlock::Create(ctx, "run", f);
  auto* exit = llvm::BasicBlock::Create(ctx, "exit", f);
  b.SetInsertPoint(entry);
  auto sreg = [&](llvm::Intrinsic::ID id) { return b.CreateZExt(b.CreateIntrinsic(id, {}, {}), b.getInt64Ty()); };
  llvm::Value* tid = sreg(llvm::Intrinsic::nvvm_read_ptx_sreg_tid_x);
  llvm::Value* ntid = sreg(llvm::Intrinsic::nvvm_read_ptx_sreg_ntid_x);
  llvm::Value* ctaid = sreg(llvm::Intrinsic::nvvm_read_ptx_sreg_ctaid_x);
  llvm::Value* i = b.CreateAdd(f->getArg(2), b.CreateAdd(b.CreateMul(ctaid, ntid), tid), "i");
  b.CreateCondBr(b.CreateICmpSLT(i, f->getArg(3)), run, exit);
  b.SetInsertPoint(run);
  b.CreateCall(body, {i, f->getArg(0), f->getArg(1)});
  b.CreateBr(exit);
  b.SetInsertPoint(exit);
  b.CreateRetVoid();
  llvm::Metadata* md[] = {llvm::ValueAsMetadata::get(f), llvm::MDString::get(ctx, "kernel"),
                          llvm::ValueAsMetadata::get(b.getInt32(1))};
  m.getOrInsertNamedMetadata("nvvm.annotations")->addOperand(llvm::MDNode::get(ctx, md));
}

}  // namespace

std::string KernelCompiler::ptx(const std::string& sm) const {
  const Impl& im = *impl_;
  if (im.finished) throw InternalError("kernel compiler: ptx() after finish()");
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

  llvm::ValueToValueMapTy vmap;
  std::unique_ptr<llvm::Module> m = llvm::CloneModule(*im.module, vmap);
  for (const Impl::Kernel& k : im.kernels) m->getFunction(k.name)->eraseFromParent();  // the host loops
  m->setTargetTriple(kTriple);
  m->setDataLayout(tm->createDataLayout());
  for (const Impl::Kernel& k : im.kernels)
    emit_gpu_wrapper(*m, llvm::cast<llvm::Function>(vmap[k.body]), k.name);
  llvm::raw_string_ostream es(err);
  if (llvm::verifyModule(*m, &es)) throw InternalError("kernel compiler: invalid NVPTX module: " + err);
  optimize_module(*m, tm.get(), false);

  llvm::SmallString<0> out;
  llvm::raw_svector_ostream os(out);
  llvm::legacy::PassManager pm;
  if (tm->addPassesToEmitFile(pm, os, nullptr, llvm::CodeGenFileType::AssemblyFile))
    throw InternalError("kernel compiler: the NVPTX backend cannot emit assembly");
  pm.run(*m);
  return std::string(out.str());
}

}  // namespace modelc
