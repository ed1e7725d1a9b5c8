// The body builder of one kernel: arguments, size table, buffer access, loops.
#include "compiler/codegen/kernel_emit.h"

#include <fmt/format.h>
#include <llvm/IR/Intrinsics.h>
#include <llvm/IR/MDBuilder.h>

#include "compiler/support/diagnostics.h"

namespace modelc {

static bool same_size(const rt::SizeExpr& a, const rt::SizeExpr& b) {
  if (a.terms.size() != b.terms.size()) return false;
  for (size_t i = 0; i < a.terms.size(); ++i)
    if (a.terms[i].coef != b.terms[i].coef || a.terms[i].symbols != b.terms[i].symbols) return false;
  return true;
}

llvm::Type* elem_type(llvm::LLVMContext& ctx, DType t) {
  switch (t) {
    case DType::F32: return llvm::Type::getFloatTy(ctx);
    case DType::I32: return llvm::Type::getInt32Ty(ctx);
    case DType::Bool: return llvm::Type::getInt8Ty(ctx);
    default: break;
  }
  throw InternalError(fmt::format("kernel compiler: dtype {} is not supported", dtype_name(t)));
}

int64_t estimate(const Shape& s) {
  int64_t n = 1;
  for (const Dim& d : s) n = std::min<int64_t>(n * (d.is_const() ? std::max<int64_t>(d.const_value(), 1) : 64), 1 << 30);
  return n;
}

KernelBuilder::KernelBuilder(llvm::Module& m, SymbolTable& syms, const std::string& body_name)
    : ctx(m.getContext()), module(m), symbols(syms), b(m.getContext()) {
  llvm::Type* ptr = b.getPtrTy();
  auto* ty = llvm::FunctionType::get(b.getVoidTy(), {b.getInt64Ty(), ptr, ptr}, false);
  fn = llvm::Function::Create(ty, llvm::Function::InternalLinkage, body_name, m);
  fn->addFnAttr(llvm::Attribute::AlwaysInline);
  fn->addFnAttr(llvm::Attribute::NoUnwind);
  for (unsigned a : {1u, 2u}) {
    fn->addParamAttr(a, llvm::Attribute::NoAlias);
    fn->addParamAttr(a, llvm::Attribute::ReadOnly);
    fn->addParamAttr(a, llvm::Attribute::NoCapture);
  }
  index = fn->getArg(0);
  index->setName("i");
  buffers_ = fn->getArg(1);
  buffers_->setName("buffers");
  sizes_arg_ = fn->getArg(2);
  sizes_arg_->setName("sizes");
  auto* entry = llvm::BasicBlock::Create(ctx, "entry", fn);
  b.SetInsertPoint(entry);
  // Allocas go before this marker, so that they all sit at the top of the entry block.
  alloca_point_ = llvm::BinaryOperator::CreateAdd(b.getInt32(0), b.getInt32(0), "allocas", entry);
}

llvm::Value* KernelBuilder::invariant_load(llvm::Type* t, llvm::Value* base, size_t k, const char* name) {
  // The tables never change while a kernel runs: invariant loads let the loop that calls
  // the body hoist them.
  llvm::IRBuilder<> eb(alloca_point_);
  llvm::Value* p = eb.CreateConstInBoundsGEP1_64(t, base, k);
  llvm::LoadInst* l = eb.CreateLoad(t, p, fmt::format("{}{}", name, k));
  l->setMetadata(llvm::LLVMContext::MD_invariant_load, llvm::MDNode::get(ctx, {}));
  return l;
}

llvm::Value* KernelBuilder::size(const Dim& d) {
  if (d.is_const()) return c64(d.const_value());
  return size(symbols.size(d));
}

llvm::Value* KernelBuilder::size(const rt::SizeExpr& e) {
  if (e.is_constant()) return c64(e.eval({}));
  for (size_t k = 0; k < sizes.size(); ++k)
    if (same_size(sizes[k], e)) return size_values_[k];
  sizes.push_back(e);
  size_values_.push_back(invariant_load(i64(), sizes_arg_, sizes.size() - 1, "size"));
  return size_values_.back();
}

llvm::Value* KernelBuilder::buffer(size_t k) {
  if (buffer_values_.size() <= k) buffer_values_.resize(k + 1, nullptr);
  if (!buffer_values_[k]) buffer_values_[k] = invariant_load(b.getPtrTy(), buffers_, k, "buf");
  return buffer_values_[k];
}

llvm::Value* KernelBuilder::load(DType t, size_t buf, llvm::Value* offset) {
  llvm::Type* et = elem_type(ctx, t);
  llvm::Value* v = b.CreateLoad(et, b.CreateInBoundsGEP(et, buffer(buf), offset));
  if (t == DType::Bool) v = b.CreateICmpNE(v, b.getInt8(0));
  return v;
}

llvm::Value* KernelBuilder::load_input(DType t, size_t buf, llvm::Value* offset) {
  llvm::Type* et = elem_type(ctx, t);
  llvm::LoadInst* l = b.CreateLoad(et, b.CreateInBoundsGEP(et, buffer(buf), offset));
  l->setMetadata(llvm::LLVMContext::MD_invariant_load, llvm::MDNode::get(ctx, {}));
  llvm::Value* v = l;
  if (t == DType::Bool) v = b.CreateICmpNE(v, b.getInt8(0));
  return v;
}

bool KernelBuilder::available(llvm::Value* v) const {
  auto* inst = llvm::dyn_cast<llvm::Instruction>(v);
  if (!inst) return true;
  const llvm::BasicBlock* bb = inst->getParent();
  return bb == b.GetInsertBlock() || bb == &fn->getEntryBlock();
}

void KernelBuilder::store(DType t, size_t buf, llvm::Value* offset, llvm::Value* v) {
  v = convert(v, t);
  llvm::Type* et = elem_type(ctx, t);
  if (t == DType::Bool) v = b.CreateZExt(v, et);
  b.CreateStore(v, b.CreateInBoundsGEP(et, buffer(buf), offset));
}

llvm::Value* KernelBuilder::convert(llvm::Value* v, DType to) {
  llvm::Type* from = v->getType();
  switch (to) {
    case DType::F32:
      if (from->isFloatTy()) return v;
      if (from->isIntegerTy(1)) return b.CreateUIToFP(v, b.getFloatTy());
      if (from->isIntegerTy()) return b.CreateSIToFP(v, b.getFloatTy());
      break;
    case DType::I32:
      if (from->isIntegerTy(32)) return v;
      if (from->isIntegerTy(1)) return b.CreateZExt(v, b.getInt32Ty());
      if (from->isFloatTy())  // truncates toward zero, saturates, NaN -> 0: round_to_dtype
        return b.CreateIntrinsic(llvm::Intrinsic::fptosi_sat, {b.getInt32Ty(), from}, {v});
      break;
    case DType::Bool:
      if (from->isIntegerTy(1)) return v;
      if (from->isFloatTy()) return b.CreateFCmpUNE(v, llvm::ConstantFP::get(from, 0.0));  // NaN is true
      if (from->isIntegerTy()) return b.CreateICmpNE(v, llvm::ConstantInt::get(from, 0));
      break;
    default: break;
  }
  throw InternalError(fmt::format("kernel compiler: cannot convert a value to {}", dtype_name(to)));
}

llvm::AllocaInst* KernelBuilder::var(llvm::Type* t, llvm::Value* init) {
  llvm::IRBuilder<> eb(alloca_point_);
  llvm::AllocaInst* a = eb.CreateAlloca(t);
  b.CreateStore(init, a);
  return a;
}

void KernelBuilder::loop(llvm::Value* n, const std::function<void(llvm::Value*)>& body) {
  llvm::AllocaInst* k = var(i64(), c64(0));
  auto* head = llvm::BasicBlock::Create(ctx, "loop", fn);
  auto* inner = llvm::BasicBlock::Create(ctx, "body", fn);
  auto* exit = llvm::BasicBlock::Create(ctx, "done", fn);
  b.CreateBr(head);
  b.SetInsertPoint(head);
  llvm::Value* kv = b.CreateLoad(i64(), k);
  b.CreateCondBr(b.CreateICmpSLT(kv, n), inner, exit);
  b.SetInsertPoint(inner);
  body(kv);
  b.CreateStore(b.CreateAdd(kv, c64(1), "", true, true), k);
  b.CreateBr(head);
  b.SetInsertPoint(exit);
}

void KernelBuilder::finish() {
  b.CreateRetVoid();
  alloca_point_->eraseFromParent();
  alloca_point_ = nullptr;
}

}  // namespace modelc
