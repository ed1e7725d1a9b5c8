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
  bool training = true;  // false: dropout is the identity

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
  // The same for a buffer the kernel only reads: marked invariant, so that loads of
  // broadcast scalars are hoisted out of the host loop.
  llvm::Value* load_input(DType t, size_t buf, llvm::Value* offset);
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
  // True when `v` may be used at the insertion point: not an instruction, or defined in
  // the current block or the entry block (a conservative dominance test for memoising).
  bool available(llvm::Value* v) const;

 private:
  llvm::Value* buffers_ = nullptr;
  llvm::Value* sizes_arg_ = nullptr;
  std::vector<llvm::Value*> size_values_, buffer_values_;
  llvm::Instruction* alloca_point_ = nullptr;
  llvm::Value* invariant_load(llvm::Type* t, llvm::Value* base, size_t k, const char* name);
};

llvm::Type* elem_type(llvm::LLVMContext& ctx, DType t);  // f32 float, i32 i32, bool i8

// Reads input k of the node being emitted at a flat offset into that input's own shape
// (from a buffer, or computed by a fused producer).
using Reader = std::function<llvm::Value*(size_t input, llvm::Value* offset)>;

// The op families, as values (compiler/codegen/kernels_elementwise.cc, kernels_reduce.cc).
// Elementwise ops (the scalar definitions with numpy broadcasting of their inputs, cast,
// dropout, causal_mask, one_hot): element `off` of the node's output.
llvm::Value* elementwise_value(KernelBuilder& kb, const Graph& g, const Node& n, llvm::Value* off, const Reader& read);
// sum / mean / max / cross_entropy: output element `out`, one loop (nest) over the reduced
// elements.
llvm::Value* reduction_value(KernelBuilder& kb, const Graph& g, const Node& n, llvm::Value* out, const Reader& read);
// Row ops (softmax, log_softmax, layer_norm): lane `lane` along the op's axis; calls
// write(offset, value) for every element of the lane in its last pass.
using RowWriter = std::function<void(llvm::Value* offset, llvm::Value* value)>;
void row_op(KernelBuilder& kb, const Graph& g, const Node& n, llvm::Value* lane, const Reader& read, const RowWriter& write);
// The number of lanes of a row op, and the number of elements a reduction reads per output.
Dim row_lanes(const Graph& g, const Node& n);
Dim row_length(const Graph& g, const Node& n);
Dim reduced_count(const Graph& g, const Node& n);

// A rough per-work-item cost from a shape's constant dims (a symbolic dim counts as 64).
int64_t estimate(const Shape& s);

}  // namespace modelc
