// The body builder of one kernel: arguments, size table, buffer access, loops, and the
// host forms of the target-dependent primitives (the GPU forms: gpu_primitives.cc).
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

KernelBuilder::KernelBuilder(llvm::Module& m, SymbolTable& syms, const std::string& body_name, KernelTarget t,
                             GpuShape shape)
    : ctx(m.getContext()), module(m), symbols(syms), b(m.getContext()), target(t), gpu(shape) {
  llvm::Type* ptr = b.getPtrTy();
  std::vector<llvm::Type*> params{b.getInt64Ty(), ptr, ptr};
  if (t == KernelTarget::Host) params.insert(params.end(), {b.getInt64Ty(), b.getInt64Ty()});  // row, col
  auto* ty = llvm::FunctionType::get(b.getVoidTy(), params, false);
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
  if (t == KernelTarget::Host) {
    row_ = fn->getArg(3);
    row_->setName("row");
    col_ = fn->getArg(4);
    col_->setName("col");
  }
  auto* entry = llvm::BasicBlock::Create(ctx, "entry", fn);
  b.SetInsertPoint(entry);
  // Allocas go before this marker, so that they all sit at the top of the entry block.
  alloca_point_ = llvm::BinaryOperator::CreateAdd(b.getInt32(0), b.getInt32(0), "allocas", entry);
  if (target == KernelTarget::Gpu) {
    // The tables and the buffers are in the GPU's global memory.
    llvm::IRBuilder<> eb(alloca_point_);
    buffers_ = eb.CreateAddrSpaceCast(buffers_, eb.getPtrTy(1), "buffers.global");
    sizes_arg_ = eb.CreateAddrSpaceCast(sizes_arg_, eb.getPtrTy(1), "sizes.global");
  }
}

void KernelBuilder::seed_sizes(const std::vector<rt::SizeExpr>& table) {
  if (!sizes.empty()) throw InternalError("kernel compiler: seed_sizes() after the body read a size");
  for (const rt::SizeExpr& e : table) {
    sizes.push_back(e);
    size_values_.push_back(invariant_load(i64(), sizes_arg_, sizes.size() - 1, "size"));
  }
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
  if (!buffer_values_[k]) {
    llvm::Value* p = invariant_load(b.getPtrTy(), buffers_, k, "buf");
    if (target == KernelTarget::Gpu) {
      // Global memory (ld.global / st.global); the GPU wrapper knows this same value.
      llvm::IRBuilder<> eb(alloca_point_);
      p = eb.CreateAddrSpaceCast(p, eb.getPtrTy(1), fmt::format("gbuf{}", k));
    }
    buffer_values_[k] = p;
  }
  return buffer_values_[k];
}

llvm::Value* KernelBuilder::element_ptr(llvm::Type* et, size_t buf, llvm::Value* offset) {
  if (direct_.size() <= buf) direct_.resize(buf + 1, false);
  if (offset == index) direct_[buf] = true;
  return b.CreateInBoundsGEP(et, buffer(buf), offset);
}

llvm::Value* KernelBuilder::load(DType t, size_t buf, llvm::Value* offset) {
  llvm::Type* et = elem_type(ctx, t);
  llvm::Value* v = b.CreateLoad(et, element_ptr(et, buf, offset));
  if (t == DType::Bool) v = b.CreateICmpNE(v, b.getInt8(0));
  return v;
}

llvm::Value* KernelBuilder::load_input(DType t, size_t buf, llvm::Value* offset) {
  llvm::Type* et = elem_type(ctx, t);
  llvm::LoadInst* l = b.CreateLoad(et, element_ptr(et, buf, offset));
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
  b.CreateStore(v, element_ptr(et, buf, offset));
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

void KernelBuilder::split_index(const Dim& n) {
  if (target != KernelTarget::Host) throw InternalError("kernel compiler: split_index() on a GPU body");
  split_size_ = size(n);
}

std::optional<KernelBuilder::Split> KernelBuilder::split() const {
  if (!split_size_) return std::nullopt;
  if (auto* c = llvm::dyn_cast<llvm::ConstantInt>(split_size_)) return Split{c->getSExtValue(), 0};
  for (size_t k = 0; k < size_values_.size(); ++k)
    if (size_values_[k] == split_size_) return Split{0, k};
  throw InternalError("kernel compiler: the split size is not in the size table");
}

llvm::Value* KernelBuilder::div(llvm::Value* a, llvm::Value* d) {
  if (split_size_ && a == index && d == split_size_) return row_;
  return b.CreateUDiv(a, d);
}

llvm::Value* KernelBuilder::rem(llvm::Value* a, llvm::Value* d) {
  if (split_size_ && a == index && d == split_size_) return col_;
  return b.CreateURem(a, d);
}

void KernelBuilder::loop(llvm::Value* n, const std::function<void(llvm::Value*)>& body) {
  strided_loop(c64(0), n, c64(1), body);
}

std::vector<llvm::Value*> KernelBuilder::reduce_loop(const std::vector<llvm::Value*>& extents,
                                                     const std::vector<Accumulator>& accs, const Element& element) {
  if (cooperative() && !extents.empty()) return block_reduce(extents, accs, element);
  // Sequential: nested loops, the accumulators in mutable locals.
  std::vector<llvm::AllocaInst*> vars;
  for (const Accumulator& a : accs) vars.push_back(var(a.type, a.init));
  std::vector<llvm::Value*> coords;
  std::function<void(size_t)> nest = [&](size_t j) {
    if (j == extents.size()) {
      std::vector<llvm::Value*> vals = element(coords);
      if (vals.size() != accs.size()) throw InternalError("kernel compiler: reduce_loop element gives the wrong arity");
      for (size_t q = 0; q < accs.size(); ++q)
        b.CreateStore(accs[q].combine(b.CreateLoad(accs[q].type, vars[q]), vals[q]), vars[q]);
      return;
    }
    loop(extents[j], [&](llvm::Value* k) {
      coords.push_back(k);
      nest(j + 1);
      coords.pop_back();
    });
  };
  nest(0);
  std::vector<llvm::Value*> out;
  for (size_t q = 0; q < accs.size(); ++q) out.push_back(b.CreateLoad(accs[q].type, vars[q]));
  return out;
}

llvm::Value* KernelBuilder::reduce_loop(llvm::Value* n, const Accumulator& acc,
                                        const std::function<llvm::Value*(llvm::Value*)>& element) {
  return reduce_loop(std::vector<llvm::Value*>{n}, {acc}, [&](const std::vector<llvm::Value*>& k) {
    return std::vector<llvm::Value*>{element(k[0])};
  })[0];
}

void KernelBuilder::parallel_loop(llvm::Value* n, const std::function<void(llvm::Value*)>& body) {
  if (cooperative()) block_parallel_loop(n, body);
  else loop(n, body);
}

void KernelBuilder::single(const std::function<void()>& body) {
  if (cooperative()) block_single(body);
  else body();
}

void KernelBuilder::finish() {
  b.CreateRetVoid();
  alloca_point_->eraseFromParent();
  alloca_point_ = nullptr;
}

}  // namespace modelc
