// Internal to the kernel compiler (compiler/codegen/codelets.h): the builder of one kernel's
// per-work-item body function, and the emitters of the op families.
//
// A body is `void body(i64 i, ptr buffers, ptr sizes)`: it processes work item i, reading
// buffer pointers from `buffers` and run-time sizes from `sizes` (the kernel's size table).
// A host body takes two more arguments, `i64 row, i64 col`: when the builder splits the
// index (split_index), the host wrapper runs a two-level loop and passes i = row * n + col,
// so that the body's `i / n` and `i % n` are row and col (broadcast reads become affine in
// the inner loop, which then vectorizes).
// The op emitters are target-neutral: they build bodies through this class, and the few
// things that depend on the target are its primitives (reduce_loop, tile_reduce,
// parallel_loop, single). Every group is emitted twice from the same emitter code:
//  - Host: the primitives are sequential loops (the host wrapper runs work items
//    [begin, end) in a loop, and the optimiser vectorizes them; a tile's columns are the
//    innermost);
//  - Gpu: buffers are global memory (addrspace(1)); in a thread-mapped kernel the
//    primitives are sequential as on the host; in a block-mapped kernel (one work item per
//    thread block, `block` threads) the threads of the block stride over a reduction,
//    combine in registers, then across the warp with shuffles and across warps through
//    shared memory, and every thread gets the result (compiler/codegen/gpu_primitives.cc).
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <llvm/IR/IRBuilder.h>
#include <llvm/IR/Module.h>

#include "compiler/lowered/reduce_plan.h"
#include "compiler/lowered/sizes.h"
#include "compiler/ir/graph.h"

namespace modelc {

enum class KernelTarget { Host, Gpu };

// How a GPU body is launched: one work item per thread, or one per block of `block` threads.
struct GpuShape {
  bool block_mapped = false;
  uint32_t block = 256;  // threads per block, a multiple of 32 (at most 1024)
};

class CodeletBuilder {
 public:
  CodeletBuilder(llvm::Module& m, SymbolTable& symbols, const std::string& body_name,
                KernelTarget target = KernelTarget::Host, GpuShape gpu = {});

  llvm::LLVMContext& ctx;
  llvm::Module& module;
  SymbolTable& symbols;
  llvm::IRBuilder<> b;
  llvm::Function* fn = nullptr;  // the body
  llvm::Value* index = nullptr;  // work item i (i64)
  std::vector<rt::SizeExpr> sizes;  // the size table, in the order the body reads it
  int64_t grain = 1;
  bool training = true;  // false: dropout is the identity
  // When not empty, buffer k is entry buffer_map[k] of the buffers table (a segment of a
  // horizontal kernel reads its own entries; CodeletCompiler::emit_horizontal).
  std::vector<size_t> buffer_map;
  const KernelTarget target;
  const GpuShape gpu;  // Gpu only

  llvm::Type* i64() { return b.getInt64Ty(); }
  llvm::Value* c64(int64_t v) { return b.getInt64(static_cast<uint64_t>(v)); }
  // A size: a constant when the dim is, else a (deduplicated) slot of the size table.
  llvm::Value* size(const Dim& d);
  llvm::Value* size(const rt::SizeExpr& e);
  // The data pointer of buffer k (inputs then outputs).
  llvm::Value* buffer(size_t k);
  // Element k of buffer `buf` of type t, as f32 (f16 and bf16 widened), i32 or i1 (bool);
  // and the store of a value converted to t (convert's semantics).
  llvm::Value* load(DType t, size_t buf, llvm::Value* offset);
  // The same for a buffer the kernel only reads: marked invariant, so that loads of
  // broadcast scalars are hoisted out of the host loop.
  llvm::Value* load_input(DType t, size_t buf, llvm::Value* offset);
  void store(DType t, size_t buf, llvm::Value* offset, llvm::Value* v);
  // `cast` semantics: f32 -> i32 truncates and saturates (NaN -> 0), -> bool is != 0,
  // -> f16/bf16 rounds to nearest even (the result is an f32 holding the rounded value).
  llvm::Value* convert(llvm::Value* v, DType to);
  // A mutable local (promoted to a register by the optimiser).
  llvm::AllocaInst* var(llvm::Type* t, llvm::Value* init);
  // for (k = 0; k < n; ++k) body(k), sequentially on every target.
  void loop(llvm::Value* n, const std::function<void(llvm::Value*)>& body);

  // --- The target-dependent primitives. ---
  // An accumulator of reduce_loop: starts at `init` (an identity of `combine`); combine(acc,
  // v) folds in an element's value. On a GPU, combine also merges partial results, so it
  // must be associative and commutative (up to rounding) and `init` its identity.
  struct Accumulator {
    llvm::Type* type;
    llvm::Value* init;
    std::function<llvm::Value*(llvm::Value* acc, llvm::Value* v)> combine;
  };
  // The values of an element at coordinates k (one per extent, innermost last), one per
  // accumulator.
  using Element = std::function<std::vector<llvm::Value*>(const std::vector<llvm::Value*>& k)>;
  // Folds element(k) into the accumulators for every k in extents[0] x extents[1] x ...
  // and returns the results. Host and thread-mapped GPU: nested sequential loops in order
  // (acc = combine(acc, v)). Block-mapped GPU: the block's threads stride over the flattened
  // index space and combine across the block; every thread gets the result. Nested inside
  // a cooperative primitive it is sequential (per thread).
  std::vector<llvm::Value*> reduce_loop(const std::vector<llvm::Value*>& extents, const std::vector<Accumulator>& accs,
                                        const Element& element);
  llvm::Value* reduce_loop(llvm::Value* n, const Accumulator& acc, const std::function<llvm::Value*(llvm::Value* k)>& element);
  // for k in [0, n): body(k), in any order (a row's final write pass). Host: a loop;
  // block-mapped GPU: each thread takes k = tid, tid + block, ...
  void parallel_loop(llvm::Value* n, const std::function<void(llvm::Value*)>& body);
  // Runs `body` once for the work item: on one thread of the block where the block
  // cooperates (stores of a reduction's result), else simply here.
  void single(const std::function<void()>& body);
  // A tile of `cols` consecutive columns (0 <= cols <= width; width a constant), each
  // reduced like reduce_loop over the same index space: element(k, c) gives column c's
  // values at coordinates k, and done(c, results) runs once per column c in [0, cols) with
  // its results. Host: the rows are the outer loops and the columns the inner one, with
  // the accumulators in local arrays (one slot per column), so that the reads of a row's
  // columns are contiguous and vectorize. Thread-mapped GPU: a sequential reduce_loop per
  // column. Block-mapped GPU (gpu_primitives.cc): thread t takes column t % width and
  // every (block / width)-th row from t / width; the rows' partial results combine through
  // shared memory (in one order for every thread) and done runs on the threads t < cols.
  using TileElement = std::function<std::vector<llvm::Value*>(const std::vector<llvm::Value*>& k, llvm::Value* c)>;
  using TileDone = std::function<void(llvm::Value* c, const std::vector<llvm::Value*>& results)>;
  void tile_reduce(int64_t width, llvm::Value* cols, const std::vector<llvm::Value*>& extents,
                   const std::vector<Accumulator>& accs, const TileElement& element, const TileDone& done);
  // True where the primitives cooperate across the block at the insertion point.
  bool cooperative() const { return target == KernelTarget::Gpu && gpu.block_mapped && coop_depth_ == 0; }

  // Starts the size table with `table` (so that a second flavour of a body reads the same
  // slots as the first; slots it adds come after).
  void seed_sizes(const std::vector<rt::SizeExpr>& table);
  // Per buffer: read or written at the work item's own index somewhere (offset == index).
  const std::vector<bool>& direct_buffers() const { return direct_; }
  // Unsigned-style division helpers on non-negative i64 (sizes and indices). With the
  // index split by n, index / n and index % n are the host body's row and col arguments.
  llvm::Value* div(llvm::Value* a, llvm::Value* d);
  llvm::Value* rem(llvm::Value* a, llvm::Value* d);
  // Records that v == q * d + r with 0 <= r < d, so that div(v, d) and rem(v, d) give q and
  // r (a reduction's loops run rows of d elements: a prologue's broadcast reads at v / d
  // and v % d are then affine in the innermost loop, which vectorizes).
  void known_divmod(llvm::Value* v, llvm::Value* d, llvm::Value* q, llvm::Value* r);
  // Host only: the wrapper will loop over rows of n work items (n > 0 at run time, or the
  // extent is 0) and columns inside. Call before the body divides the index.
  void split_index(const Dim& n);
  // The split's size: a constant, or a slot of the size table (std::nullopt: no split).
  struct Split {
    int64_t constant = 0;  // > 0: n is this constant
    size_t slot = 0;       // else: n is sizes[slot]
  };
  std::optional<Split> split() const;
  void finish();  // ret void
  // True when `v` may be used at the insertion point: not an instruction, or defined in
  // the current block or the entry block (a conservative dominance test for memoising).
  bool available(llvm::Value* v) const;

 private:
  llvm::Value* buffers_ = nullptr;
  llvm::Value* sizes_arg_ = nullptr;
  std::vector<llvm::Value*> size_values_, buffer_values_;
  llvm::Instruction* alloca_point_ = nullptr;
  std::vector<bool> direct_;
  int coop_depth_ = 0;
  llvm::Value* split_size_ = nullptr;  // the split's n, as size() gives it
  llvm::Value *row_ = nullptr, *col_ = nullptr;
  std::map<std::pair<llvm::Value*, llvm::Value*>, std::pair<llvm::Value*, llvm::Value*>> divmod_;  // known_divmod
  llvm::Value* invariant_load(llvm::Type* t, llvm::Value* base, size_t k, const char* name);
  llvm::Value* element_ptr(llvm::Type* et, size_t buf, llvm::Value* offset);
  // gpu_primitives.cc: the block-cooperative forms.
  llvm::Value* thread_id();
  void strided_loop(llvm::Value* start, llvm::Value* n, llvm::Value* step, const std::function<void(llvm::Value*)>& body);
  std::vector<llvm::Value*> block_reduce(const std::vector<llvm::Value*>& extents, const std::vector<Accumulator>& accs,
                                         const Element& element);
  llvm::Value* shuffle_xor(llvm::Value* v, unsigned lane_mask);
  void block_parallel_loop(llvm::Value* n, const std::function<void(llvm::Value*)>& body);
  void block_single(const std::function<void()>& body);
  void block_tile_reduce(int64_t width, llvm::Value* cols, const std::vector<llvm::Value*>& extents,
                         const std::vector<Accumulator>& accs, const TileElement& element, const TileDone& done);
  // for (k = 0; k < n; ++k) body(k), not to be unrolled (vectorize: left to the loop
  // vectorizer), or kept from the loop vectorizer (host tiles: kernel_emit.cc).
  void hinted_loop(llvm::Value* n, bool vectorize, const std::function<void(llvm::Value*)>& body);
  // if (cond) body(): the insertion point continues after it.
  void when(llvm::Value* cond, const std::function<void()>& body);
};

llvm::Type* elem_type(llvm::LLVMContext& ctx, DType t);  // f32 float, i32 i32, bool i8, f16/bf16 i16

// f16 and bf16 elements are stored as i16 bits and computed on as f32 (compiler/codegen/
// low_float.cc): the exact widening of the bits, and the f32 value rounded to nearest even.
llvm::Value* low_to_f32(llvm::IRBuilder<>& b, llvm::Value* bits, DType t);
llvm::Value* f32_to_low(llvm::IRBuilder<>& b, llvm::Value* v, DType t);

// Reads input k of the node being emitted at a flat offset into that input's own shape
// (from a buffer, or computed by a fused producer).
using Reader = std::function<llvm::Value*(size_t input, llvm::Value* offset)>;

// The op families, as values (compiler/codegen/codelets_elementwise.cc, codelets_reduce.cc).
// Elementwise ops (the scalar definitions with numpy broadcasting of their inputs, cast,
// dropout, causal_mask, one_hot): element `off` of the node's output.
llvm::Value* elementwise_value(CodeletBuilder& kb, const Graph& g, const Node& n, llvm::Value* off, const Reader& read);
// The n by which an elementwise node's value divides the work item's index (i / n, i % n:
// a broadcast operand's innermost group, causal_mask's key axis); none when it reads
// every input at the index itself.
std::optional<Dim> index_divisor(const Graph& g, const Node& n);
// sum / mean / max / cross_entropy (codelets_reduce.cc; how one runs: ReducePlan,
// compiler/lowered/reduce_plan.h).
// Emits work item kb.index of a reduction kernel of `phase`: Whole and Finish call
// done(offset, value) for each output element the work item finishes (its flat offset and
// f32 / i32 value); Partial stores the work item's partials into buffer `scratch`, which
// Finish reads.
using ReduceDone = std::function<void(llvm::Value* offset, llvm::Value* value)>;
void emit_reduction(CodeletBuilder& kb, const Graph& g, const Node& n, const ReducePlan& plan, ReducePhase phase,
                    size_t scratch, const Reader& read, const ReduceDone& done);
// Row ops (softmax, log_softmax, layer_norm): lane `lane` along the op's axis; calls
// write(offset, value) for every element of the lane in its last pass.
using RowWriter = std::function<void(llvm::Value* offset, llvm::Value* value)>;
void row_op(CodeletBuilder& kb, const Graph& g, const Node& n, llvm::Value* lane, const Reader& read, const RowWriter& write);
// The number of lanes of a row op and its length.
Dim row_lanes(const Graph& g, const Node& n);
Dim row_length(const Graph& g, const Node& n);

}  // namespace modelc
