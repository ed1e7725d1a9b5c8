// Internal to the kernel compiler (compiler/codegen/kernels.h): the builder of one kernel's
// per-work-item body function, and the emitters of the op families.
//
// A body is target-neutral: `void body(i64 i, ptr buffers, ptr sizes)` processes work item
// i; it reads buffer pointers from `buffers` and run-time sizes from `sizes` (the kernel's
// size table). Only the wrappers that call it (host loop, GPU thread index) know a target.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include <llvm/IR/IRBuilder.h>
#include <llvm/IR/Module.h>

#include "compiler/codegen/sizes.h"
#include "compiler/ir/graph.h"

namespace modelc {

class KernelBuilder {
 public:
  KernelBuilder(llvm::Module& m, SymbolTable& symbols, const std::string& body_name);

  llvm::LLVMContext& ctx;
  llvm::Module& module;
  SymbolTable& symbols;
  llvm::IRBuilder<> b;
  llvm::Function* fn = nullptr;  // the body
  llvm::Value* index = nullptr;  // work item i (i64)
  std::vector<rt::SizeExpr> sizes;  // the size table, in the order the body reads it
  int64_t grain = 1;

  llvm::Type* i64() { return b.getInt64Ty(); }
  llvm::Value* c64(int64_t v) { return b.getInt64(static_cast<uint64_t>(v)); }
  // A size: a constant when the dim is, else a (deduplicated) slot of the size table.
  llvm::Value* size(const Dim& d);
  llvm::Value* size(const rt::SizeExpr& e);
  // The data pointer of buffer k (inputs then outputs).
  llvm::Value* buffer(size_t k);
  // Element k of buffer `buf` of type t, as f32, i32 or i1 (bool); and the store of a
  // value converted to t (convert's semantics).
  llvm::Value* load(DType t, size_t buf, llvm::Value* offset);
  void store(DType t, size_t buf, llvm::Value* offset, llvm::Value* v);
  // `cast` semantics: f32 -> i32 truncates and saturates (NaN -> 0), -> bool is != 0.
  llvm::Value* convert(llvm::Value* v, DType to);
  // A mutable local (promoted to a register by the optimiser).
  llvm::AllocaInst* var(llvm::Type* t, llvm::Value* init);
  // for (k = 0; k < n; ++k) body(k)
  void loop(llvm::Value* n, const std::function<void(llvm::Value*)>& body);
  // Unsigned-style division helpers on non-negative i64 (sizes and indices).
  llvm::Value* div(llvm::Value* a, llvm::Value* d) { return b.CreateUDiv(a, d); }
  llvm::Value* rem(llvm::Value* a, llvm::Value* d) { return b.CreateURem(a, d); }
  void finish();  // ret void

 private:
  llvm::Value* buffers_ = nullptr;
  llvm::Value* sizes_arg_ = nullptr;
  std::vector<llvm::Value*> size_values_, buffer_values_;
  llvm::Instruction* alloca_point_ = nullptr;
  llvm::Value* invariant_load(llvm::Type* t, llvm::Value* base, size_t k, const char* name);
};

llvm::Type* elem_type(llvm::LLVMContext& ctx, DType t);  // f32 float, i32 i32, bool i8

// Family emitters: fill kb's body for node `id`. Elementwise ops (the scalar definitions,
// cast, dropout, causal_mask, one_hot) process one output element per work item; the
// extent they return is the number of work items.
rt::SizeExpr emit_elementwise(KernelBuilder& kb, const Graph& g, NodeId id);
rt::SizeExpr emit_reduction(KernelBuilder& kb, const Graph& g, NodeId id);  // sum, mean, max
rt::SizeExpr emit_row_op(KernelBuilder& kb, const Graph& g, NodeId id);     // softmax, ...

// A rough per-work-item cost from a shape's constant dims (a symbolic dim counts as 64).
int64_t estimate(const Shape& s);

}  // namespace modelc
