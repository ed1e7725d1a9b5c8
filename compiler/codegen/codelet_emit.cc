// The body builder of one kernel: arguments, size table, buffer access, loops, and the
// host forms of the target-dependent primitives (the GPU forms: gpu_primitives.cc).
#include "compiler/codegen/codelet_emit.h"

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
    case DType::F16: case DType::BF16: return llvm::Type::getInt16Ty(ctx);  // the bits
  }
  throw InternalError(fmt::format("kernel compiler: dtype {} is not supported", dtype_name(t)));
}

CodeletBuilder::CodeletBuilder(llvm::Module& m, SymbolTable& syms, const std::string& body_name, KernelTarget t,
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

void CodeletBuilder::seed_sizes(const std::vector<rt::SizeExpr>& table) {
  if (!sizes.empty()) throw InternalError("kernel compiler: seed_sizes() after the body read a size");
  for (const rt::SizeExpr& e : table) {
    sizes.push_back(e);
    size_values_.push_back(invariant_load(i64(), sizes_arg_, sizes.size() - 1, "size"));
  }
}

llvm::Value* CodeletBuilder::invariant_load(llvm::Type* t, llvm::Value* base, size_t k, const char* name) {
  // The tables never change while a kernel runs: invariant loads let the loop that calls
  // the body hoist them.
  llvm::IRBuilder<> eb(alloca_point_);
  llvm::Value* p = eb.CreateConstInBoundsGEP1_64(t, base, k);
  llvm::LoadInst* l = eb.CreateLoad(t, p, fmt::format("{}{}", name, k));
  l->setMetadata(llvm::LLVMContext::MD_invariant_load, llvm::MDNode::get(ctx, {}));
  return l;
}

llvm::Value* CodeletBuilder::size(const Dim& d) {
  if (d.is_const()) return c64(d.const_value());
  return size(symbols.size(d));
}

llvm::Value* CodeletBuilder::size(const rt::SizeExpr& e) {
  if (e.is_constant()) return c64(e.eval({}));
  for (size_t k = 0; k < sizes.size(); ++k)
    if (same_size(sizes[k], e)) return size_values_[k];
  sizes.push_back(e);
  size_values_.push_back(invariant_load(i64(), sizes_arg_, sizes.size() - 1, "size"));
  return size_values_.back();
}

llvm::Value* CodeletBuilder::buffer(size_t k) {
  if (buffer_values_.size() <= k) buffer_values_.resize(k + 1, nullptr);
  if (!buffer_values_[k]) {
    llvm::Value* p = invariant_load(b.getPtrTy(), buffers_, buffer_map.empty() ? k : buffer_map.at(k), "buf");
    if (target == KernelTarget::Gpu) {
      // Global memory (ld.global / st.global); the GPU wrapper knows this same value.
      llvm::IRBuilder<> eb(alloca_point_);
      p = eb.CreateAddrSpaceCast(p, eb.getPtrTy(1), fmt::format("gbuf{}", k));
    }
    buffer_values_[k] = p;
  }
  return buffer_values_[k];
}

llvm::Value* CodeletBuilder::element_ptr(llvm::Type* et, size_t buf, llvm::Value* offset) {
  if (direct_.size() <= buf) direct_.resize(buf + 1, false);
  if (offset == index) direct_[buf] = true;
  return b.CreateInBoundsGEP(et, buffer(buf), offset);
}

llvm::Value* CodeletBuilder::load(DType t, size_t buf, llvm::Value* offset) {
  llvm::Type* et = elem_type(ctx, t);
  llvm::Value* v = b.CreateLoad(et, element_ptr(et, buf, offset));
  if (t == DType::Bool) v = b.CreateICmpNE(v, b.getInt8(0));
  if (t == DType::F16 || t == DType::BF16) v = low_to_f32(b, v, t);
  return v;
}

llvm::Value* CodeletBuilder::load_input(DType t, size_t buf, llvm::Value* offset) {
  llvm::Type* et = elem_type(ctx, t);
  llvm::LoadInst* l = b.CreateLoad(et, element_ptr(et, buf, offset));
  l->setMetadata(llvm::LLVMContext::MD_invariant_load, llvm::MDNode::get(ctx, {}));
  llvm::Value* v = l;
  if (t == DType::Bool) v = b.CreateICmpNE(v, b.getInt8(0));
  if (t == DType::F16 || t == DType::BF16) v = low_to_f32(b, v, t);
  return v;
}

bool CodeletBuilder::available(llvm::Value* v) const {
  auto* inst = llvm::dyn_cast<llvm::Instruction>(v);
  if (!inst) return true;
  const llvm::BasicBlock* bb = inst->getParent();
  return bb == b.GetInsertBlock() || bb == &fn->getEntryBlock();
}

void CodeletBuilder::store(DType t, size_t buf, llvm::Value* offset, llvm::Value* v) {
  llvm::Type* et = elem_type(ctx, t);
  if (t == DType::F16 || t == DType::BF16) v = f32_to_low(b, convert(v, DType::F32), t);
  else v = convert(v, t);
  if (t == DType::Bool) v = b.CreateZExt(v, et);
  b.CreateStore(v, element_ptr(et, buf, offset));
}

llvm::Value* CodeletBuilder::convert(llvm::Value* v, DType to) {
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
    case DType::F16: case DType::BF16:
      // A low-precision value lives in an f32 register holding a representable value.
      return low_to_f32(b, f32_to_low(b, convert(v, DType::F32), to), to);
  }
  throw InternalError(fmt::format("kernel compiler: cannot convert a value to {}", dtype_name(to)));
}

llvm::AllocaInst* CodeletBuilder::var(llvm::Type* t, llvm::Value* init) {
  llvm::IRBuilder<> eb(alloca_point_);
  llvm::AllocaInst* a = eb.CreateAlloca(t);
  b.CreateStore(init, a);
  return a;
}

void CodeletBuilder::split_index(const Dim& n) {
  if (target != KernelTarget::Host) throw InternalError("kernel compiler: split_index() on a GPU body");
  split_size_ = size(n);
}

std::optional<CodeletBuilder::Split> CodeletBuilder::split() const {
  if (!split_size_) return std::nullopt;
  if (auto* c = llvm::dyn_cast<llvm::ConstantInt>(split_size_)) return Split{c->getSExtValue(), 0};
  for (size_t k = 0; k < size_values_.size(); ++k)
    if (size_values_[k] == split_size_) return Split{0, k};
  throw InternalError("kernel compiler: the split size is not in the size table");
}

llvm::Value* CodeletBuilder::div(llvm::Value* a, llvm::Value* d) {
  if (split_size_ && a == index && d == split_size_) return row_;
  if (auto it = divmod_.find({a, d}); it != divmod_.end()) return it->second.first;
  return b.CreateUDiv(a, d);
}

llvm::Value* CodeletBuilder::rem(llvm::Value* a, llvm::Value* d) {
  if (split_size_ && a == index && d == split_size_) return col_;
  if (auto it = divmod_.find({a, d}); it != divmod_.end()) return it->second.second;
  return b.CreateURem(a, d);
}

void CodeletBuilder::known_divmod(llvm::Value* v, llvm::Value* d, llvm::Value* q, llvm::Value* r) {
  divmod_[{v, d}] = {q, r};
}

void CodeletBuilder::loop(llvm::Value* n, const std::function<void(llvm::Value*)>& body) {
  strided_loop(c64(0), n, c64(1), body);
}

std::vector<llvm::Value*> CodeletBuilder::reduce_loop(const std::vector<llvm::Value*>& extents,
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

llvm::Value* CodeletBuilder::reduce_loop(llvm::Value* n, const Accumulator& acc,
                                        const std::function<llvm::Value*(llvm::Value*)>& element) {
  return reduce_loop(std::vector<llvm::Value*>{n}, {acc}, [&](const std::vector<llvm::Value*>& k) {
    return std::vector<llvm::Value*>{element(k[0])};
  })[0];
}

void CodeletBuilder::parallel_loop(llvm::Value* n, const std::function<void(llvm::Value*)>& body) {
  if (cooperative()) block_parallel_loop(n, body);
  else loop(n, body);
}

void CodeletBuilder::single(const std::function<void()>& body) {
  if (cooperative()) block_single(body);
  else body();
}

void CodeletBuilder::when(llvm::Value* cond, const std::function<void()>& body) {
  auto* run = llvm::BasicBlock::Create(ctx, "when", fn);
  auto* join = llvm::BasicBlock::Create(ctx, "when.join", fn);
  b.CreateCondBr(cond, run, join);
  b.SetInsertPoint(run);
  body();
  b.CreateBr(join);
  b.SetInsertPoint(join);
}

void CodeletBuilder::hinted_loop(llvm::Value* n, bool vectorize, const std::function<void(llvm::Value*)>& body) {
  llvm::AllocaInst* k = var(i64(), c64(0));
  auto* head = llvm::BasicBlock::Create(ctx, "hloop", fn);
  auto* inner = llvm::BasicBlock::Create(ctx, "hbody", fn);
  auto* exit = llvm::BasicBlock::Create(ctx, "hdone", fn);
  b.CreateBr(head);
  b.SetInsertPoint(head);
  llvm::Value* kv = b.CreateLoad(i64(), k);
  b.CreateCondBr(b.CreateICmpSLT(kv, n), inner, exit);
  b.SetInsertPoint(inner);
  body(kv);
  b.CreateStore(b.CreateAdd(kv, c64(1), "", true, true), k);
  llvm::BranchInst* latch = b.CreateBr(head);
  // Only hints that cannot fail: a loop marked for vectorization that the vectorizer
  // cannot take makes LLVM print a warning.
  std::vector<llvm::Metadata*> md = {nullptr};
  if (vectorize) md.push_back(llvm::MDNode::get(ctx, {llvm::MDString::get(ctx, "llvm.loop.unroll.disable")}));
  else md.push_back(llvm::MDNode::get(ctx, {llvm::MDString::get(ctx, "llvm.loop.vectorize.enable"),
                                            llvm::ConstantAsMetadata::get(b.getInt1(false))}));
  llvm::MDNode* self = llvm::MDNode::getDistinct(ctx, md);
  self->replaceOperandWith(0, self);
  latch->setMetadata(llvm::LLVMContext::MD_loop, self);
  b.SetInsertPoint(exit);
}

void CodeletBuilder::tile_reduce(int64_t width, llvm::Value* cols, const std::vector<llvm::Value*>& extents,
                                const std::vector<Accumulator>& accs, const TileElement& element, const TileDone& done) {
  if (cooperative()) return block_tile_reduce(width, cols, extents, accs, element, done);
  if (target == KernelTarget::Gpu) {
    // A thread: one column after another, each in registers (a local array would be
    // local memory).
    loop(cols, [&](llvm::Value* c) {
      done(c, reduce_loop(extents, accs, [&](const std::vector<llvm::Value*>& k) { return element(k, c); }));
    });
    return;
  }
  // Host. The rows are the outer loops; `columns` emits the inner part of a row.
  auto rows = [&](bool scalar, const std::function<void(const std::vector<llvm::Value*>&)>& columns) {
    std::vector<llvm::Value*> coords;
    std::function<void(size_t)> nest = [&](size_t j) {
      if (j == extents.size()) return columns(coords);
      auto body = [&](llvm::Value* k) {
        coords.push_back(k);
        nest(j + 1);
        coords.pop_back();
      };
      if (scalar) hinted_loop(extents[j], false, body);
      else loop(extents[j], body);
    };
    nest(0);
  };
  auto fold = [&](const std::vector<llvm::Value*>& vals, const std::function<llvm::Value*(size_t q)>& acc) {
    if (vals.size() != accs.size()) throw InternalError("kernel compiler: tile_reduce element gives the wrong arity");
    for (size_t q = 0; q < accs.size(); ++q) b.CreateStore(accs[q].combine(b.CreateLoad(accs[q].type, acc(q)), vals[q]), acc(q));
  };
  llvm::Value* full = b.CreateICmpEQ(cols, c64(width));
  auto* whole = llvm::BasicBlock::Create(ctx, "tile.full", fn);
  auto* part = llvm::BasicBlock::Create(ctx, "tile.part", fn);
  auto* join = llvm::BasicBlock::Create(ctx, "tile.join", fn);
  b.CreateCondBr(full, whole, part);
  // A full tile: the columns straight-line, each with its accumulators in registers, which
  // the SLP vectorizer packs (a row's consecutive columns are consecutive addresses); the
  // row loops are kept from the loop vectorizer, which would vectorize across rows with a
  // gather per column.
  b.SetInsertPoint(whole);
  {
    std::vector<std::vector<llvm::AllocaInst*>> vars(static_cast<size_t>(width));
    for (auto& v : vars)
      for (const Accumulator& a : accs) v.push_back(var(a.type, a.init));
    rows(true, [&](const std::vector<llvm::Value*>& k) {
      for (int64_t c = 0; c < width; ++c) fold(element(k, c64(c)), [&](size_t q) { return vars[static_cast<size_t>(c)][q]; });
    });
    for (int64_t c = 0; c < width; ++c) {
      std::vector<llvm::Value*> r;
      for (size_t q = 0; q < accs.size(); ++q) r.push_back(b.CreateLoad(accs[q].type, vars[static_cast<size_t>(c)][q]));
      done(c64(c), r);
    }
  }
  b.CreateBr(join);
  // The last tile of a row of outputs (fewer columns): the accumulators of column c in
  // slot c of a local array per accumulator, and the columns a loop inside each row, kept
  // rolled (fully unrolled, the slots would become registers and the vectorizer would take
  // the row loop instead, with gathers). An empty tile skips the rows.
  b.SetInsertPoint(part);
  when(b.CreateICmpSGT(cols, c64(0)), [&] {
    std::vector<llvm::AllocaInst*> slots;
    {
      llvm::IRBuilder<> eb(alloca_point_);
      for (const Accumulator& a : accs) slots.push_back(eb.CreateAlloca(llvm::ArrayType::get(a.type, static_cast<uint64_t>(width))));
    }
    auto slot = [&](size_t q, llvm::Value* c) {
      return b.CreateInBoundsGEP(slots[q]->getAllocatedType(), slots[q], {c64(0), c});
    };
    loop(cols, [&](llvm::Value* c) {
      for (size_t q = 0; q < accs.size(); ++q) b.CreateStore(accs[q].init, slot(q, c));
    });
    rows(false, [&](const std::vector<llvm::Value*>& k) {
      hinted_loop(cols, true, [&](llvm::Value* c) { fold(element(k, c), [&](size_t q) { return slot(q, c); }); });
    });
    loop(cols, [&](llvm::Value* c) {
      std::vector<llvm::Value*> r;
      for (size_t q = 0; q < accs.size(); ++q) r.push_back(b.CreateLoad(accs[q].type, slot(q, c)));
      done(c, r);
    });
  });
  b.CreateBr(join);
  b.SetInsertPoint(join);
}

void CodeletBuilder::finish() {
  b.CreateRetVoid();
  alloca_point_->eraseFromParent();
  alloca_point_ = nullptr;
}

}  // namespace modelc
