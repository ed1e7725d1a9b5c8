// Reduction and row kernels.
//
// sum / mean / max (emit_reduction): one output element per work item, a reduction over
// the reduced elements; a column reduction (the innermost axis kept: bias gradients) takes
// a tile of kTile (16) consecutive output columns per work item instead, its rows outside
// and its columns inside (CodeletBuilder::tile_reduce), so that it reads contiguous columns
// that vectorize rather than one column with a stride. cross_entropy: one work item that
// reduces over every position. softmax / log_softmax / layer_norm: one lane along the
// op's axis per work item: reductions over the lane, then a pass that writes it. The loops
// are CodeletBuilder's primitives (reduce_loop, tile_reduce, parallel_loop), so the same
// code gives the host's sequential loops and a GPU block's cooperative ones
// (compiler/codegen/codelet_emit.h).
//
// Two phases (plan_reduction; compiler/lowered/reduce_plan.cc has the constants): a
// reduction with fewer than kFewItems (64) work items (a loss, a squared gradient norm)
// over at least 2 * kChunk (8192) elements each would leave most threads idle (and a fused
// prologue would run on those few); so would a column reduction's tiles walk every row, a
// row apart. Such a reduction runs as a Partial kernel, a work item per (chunk of its
// reduced elements, work item of the one-phase form), chunk-major, with chunks = elements
// / kChunk clamped to [2, kMaxChunks = 64] splitting the longest reduced group
// (cross_entropy: the positions; a column reduction: its rows); and a Finish kernel, a
// work item per output, which combines that output's partials (in a fixed order: the
// results do not depend on the threads) and runs the group's epilogue. The partials live in a scratch buffer of f32 (i32 for i32 sums): see
// store_partial for how an f64 partial sum keeps its precision.
//
// Measured on the development machine (2 threads, [32768, 512] f32 rows): a bias gradient
// of x * y in tiles of 16 columns and two phases takes 13 ms, one column per work item
// 230 ms; tiles of 8 columns read half a cache line per row and 32 were slower than 16.
//
// Precision: sums (sum, mean, the softmax denominator, layer_norm's mean and variance,
// cross_entropy's total) accumulate in f64, so a sum of 1e5 f32 values stays within a few
// f32 ulps of the double reference; the f64 adds carry `reassoc` so the loop vectorizes.
// A two-phase sum keeps that: each chunk's f64 sum is stored as two f32 words exact to
// about 2^-48 of it, so the result differs from the one-phase f64 sum by at most about
// 2^-48 times the sum of the chunks' magnitudes (far below the f32 rounding of the result).
// Elementwise math on the values (exp, the normalisation) is f32. i32 sums accumulate in
// i64 and wrap to i32 at the store.
#include <algorithm>
#include <limits>
#include <map>
#include <optional>

#include <fmt/format.h>
#include <llvm/IR/Intrinsics.h>

#include "compiler/codegen/codelet_emit.h"
#include "compiler/lowered/reduce_plan.h"
#include "compiler/ir/op_registry.h"

namespace modelc {
namespace {

llvm::Value* dconst(CodeletBuilder& kb, double v) { return llvm::ConstantFP::get(kb.b.getDoubleTy(), v); }

// acc + v in f64 with reassociation allowed (so the vectorizer may split the sum).
llvm::Value* fadd_reassoc(CodeletBuilder& kb, llvm::Value* acc, llvm::Value* v) {
  llvm::FastMathFlags fmf;
  fmf.setAllowReassoc();
  llvm::Value* r = kb.b.CreateFAdd(acc, v);
  if (auto* inst = llvm::dyn_cast<llvm::Instruction>(r)) inst->setFastMathFlags(fmf);
  return r;
}

// The reference's NaN-sticky max: once acc is NaN it stays; a NaN value makes it NaN.
llvm::Value* max_nan(CodeletBuilder& kb, llvm::Value* acc, llvm::Value* v) {
  auto& b = kb.b;
  llvm::Value* pick = b.CreateSelect(b.CreateFCmpUGT(v, acc), v, acc);
  return b.CreateSelect(b.CreateFCmpUNO(acc, acc), acc, pick);
}

// std::max(m, x) of the softmax reference: (m < x) ? x : m (a NaN x leaves m).
llvm::Value* std_max(CodeletBuilder& kb, llvm::Value* m, llvm::Value* x) {
  return kb.b.CreateSelect(kb.b.CreateFCmpOLT(m, x), x, m);
}

// Lane geometry of an axis: outer * n * inner elements; lane w starts at
// (w / inner) * n * inner + w % inner and steps by inner.
struct Lane {
  llvm::Value* base;
  llvm::Value* stride;
  llvm::Value* n;
};

Lane lane(CodeletBuilder& kb, const Shape& s, size_t axis, llvm::Value* w) {
  Dim inner = 1;
  for (size_t d = axis + 1; d < s.size(); ++d) inner = inner * s[d];
  llvm::Value* n = kb.size(s[axis]);
  llvm::Value* in = kb.size(inner);
  if (inner == Dim(1)) return {kb.b.CreateMul(w, n), kb.c64(1), n};
  llvm::Value* base = kb.b.CreateAdd(kb.b.CreateMul(kb.div(w, in), kb.size(s[axis] * inner)), kb.rem(w, in));
  return {base, in, n};
}

// Accumulators: the f64 sum with reassociation, and the softmax reference's max.
CodeletBuilder::Accumulator sum_f64(CodeletBuilder& kb) {
  return {kb.b.getDoubleTy(), dconst(kb, 0), [&kb](llvm::Value* a, llvm::Value* v) { return fadd_reassoc(kb, a, v); }};
}

CodeletBuilder::Accumulator max_f32(CodeletBuilder& kb) {
  return {kb.b.getFloatTy(), llvm::ConstantFP::getInfinity(kb.b.getFloatTy(), true),
          [&kb](llvm::Value* a, llvm::Value* v) { return std_max(kb, a, v); }};
}

// The max and the f64 sum of exp(x - max) along a lane of f32 input 0. With `row`, the lane
// is row `row` of a contiguous [rows, l.n] (stride 1), and the builder learns each
// offset's quotient and remainder by l.n (CodeletBuilder::known_divmod).
std::pair<llvm::Value*, llvm::Value*> max_and_sum_exp(CodeletBuilder& kb, const Reader& read, const Lane& l,
                                                      llvm::Value* row = nullptr) {
  auto& b = kb.b;
  auto at = [&](llvm::Value* k) {
    llvm::Value* off = b.CreateAdd(l.base, b.CreateMul(k, l.stride));
    if (row) kb.known_divmod(off, l.n, row, k);
    return off;
  };
  llvm::Value* mv = kb.reduce_loop(l.n, max_f32(kb), [&](llvm::Value* k) { return read(0, at(k)); });
  llvm::Value* s = kb.reduce_loop(l.n, sum_f64(kb), [&](llvm::Value* k) {
    llvm::Value* x = read(0, at(k));
    llvm::Value* e = b.CreateUnaryIntrinsic(llvm::Intrinsic::exp, b.CreateFSub(x, mv));
    return b.CreateFPExt(e, b.getDoubleTy());
  });
  return {mv, s};
}

llvm::Value* umin(CodeletBuilder& kb, llvm::Value* a, llvm::Value* b) {
  return kb.b.CreateSelect(kb.b.CreateICmpULT(a, b), a, b);
}

// Chunk `chunk` of `chunks` over [0, n): its start and length (empty past the end).
std::pair<llvm::Value*, llvm::Value*> chunk_range(CodeletBuilder& kb, llvm::Value* n, llvm::Value* chunk, int64_t chunks) {
  auto& b = kb.b;
  llvm::Value* len = kb.div(b.CreateAdd(n, kb.c64(chunks - 1)), kb.c64(chunks));
  llvm::Value* lo = umin(kb, b.CreateMul(chunk, len), n);
  llvm::Value* hi = umin(kb, b.CreateAdd(lo, len), n);
  return {lo, b.CreateSub(hi, lo)};
}

// Partials in the scratch buffer. An f64 sum s is two f32 words: hi = f32(s) and lo =
// f32(s - hi) (0 when hi is infinite), whose sum in f64 is s to about 2^-48 |s| (a sum
// beyond the f32 range gives an infinity, as the one-phase f32 result would); f32 max
// partials and i32 sums (which wrap, as the result does) are one word each.
void store_partial(CodeletBuilder& kb, DType t, size_t scratch, llvm::Value* slot, llvm::Value* v) {
  auto& b = kb.b;
  if (!v->getType()->isDoubleTy()) {
    if (v->getType()->isIntegerTy(64)) v = b.CreateTrunc(v, b.getInt32Ty());
    kb.store(t, scratch, slot, v);
    return;
  }
  llvm::Value* hi = b.CreateFPTrunc(v, b.getFloatTy());
  llvm::Value* lo = b.CreateFPTrunc(b.CreateFSub(v, b.CreateFPExt(hi, b.getDoubleTy())), b.getFloatTy());
  llvm::Value* inf = b.CreateFCmpOEQ(b.CreateUnaryIntrinsic(llvm::Intrinsic::fabs, hi),
                                     llvm::ConstantFP::getInfinity(b.getFloatTy()));
  lo = b.CreateSelect(inf, llvm::ConstantFP::get(b.getFloatTy(), 0.0), lo);
  llvm::Value* at = b.CreateMul(slot, kb.c64(2));
  kb.store(DType::F32, scratch, at, hi);
  kb.store(DType::F32, scratch, b.CreateAdd(at, kb.c64(1)), lo);
}

// A partial as the accumulator's type (`acc`: f64, f32 or i64).
llvm::Value* load_partial(CodeletBuilder& kb, DType t, size_t scratch, llvm::Value* slot, llvm::Type* acc) {
  auto& b = kb.b;
  if (acc->isIntegerTy()) return b.CreateSExt(kb.load_input(t, scratch, slot), acc);
  if (acc->isFloatTy()) return kb.load_input(t, scratch, slot);
  llvm::Value* at = b.CreateMul(slot, kb.c64(2));
  llvm::Value* hi = b.CreateFPExt(kb.load_input(DType::F32, scratch, at), acc);
  llvm::Value* lo = b.CreateFPExt(kb.load_input(DType::F32, scratch, b.CreateAdd(at, kb.c64(1))), acc);
  return b.CreateFAdd(hi, lo);
}

// cross_entropy over positions [lo, lo + count): the f64 sum of (max - x[target]) +
// log(sum exp(x - max)) over the positions whose target is not ignore_index, how many
// those are (f64), and whether a target was outside [0, C) and not ignored, one reduction
// over the positions (each position's own max and sum are sequential).
std::vector<llvm::Value*> cross_entropy_sum(CodeletBuilder& kb, const Graph& g, const Node& n, const ReducePlan& p,
                                            const Reader& read, llvm::Value* lo, llvm::Value* count) {
  auto& b = kb.b;
  llvm::Type* f64 = b.getDoubleTy();
  llvm::Value* classes = kb.size(g.type(n.inputs.at(0)).shape.back());
  llvm::Value* ignore = kb.c64(n.attrs.i("ignore_index"));
  auto fadd = [&b](llvm::Value* a, llvm::Value* v) { return b.CreateFAdd(a, v); };
  CodeletBuilder::Accumulator total{f64, dconst(kb, 0), fadd};
  CodeletBuilder::Accumulator counted{f64, dconst(kb, 0), fadd};
  CodeletBuilder::Accumulator bad{b.getInt1Ty(), b.getFalse(), [&b](llvm::Value* a, llvm::Value* v) { return b.CreateOr(a, v); }};
  return kb.reduce_loop({count}, {total, counted, bad}, [&](const std::vector<llvm::Value*>& k) {
    llvm::Value* pos = b.CreateAdd(lo, k[0]);
    Lane l{b.CreateMul(pos, classes), kb.c64(1), classes};
    // A prologue's broadcast reads by the class count (a bias on the logits) are affine.
    const bool rows = p.inner && *p.inner == g.type(n.inputs.at(0)).shape.back();
    auto [m, s] = max_and_sum_exp(kb, read, l, rows ? pos : nullptr);
    llvm::Value* t = b.CreateSExt(read(1, pos), kb.i64());
    llvm::Value* skip = b.CreateICmpEQ(t, ignore);
    llvm::Value* outside = b.CreateAnd(b.CreateICmpUGE(t, classes), b.CreateNot(skip));  // negative t: huge unsigned
    llvm::Value* safe_t = b.CreateSelect(b.CreateICmpUGE(t, classes), kb.c64(0), t);
    llvm::Value* at_t = b.CreateAdd(l.base, safe_t);
    if (rows) kb.known_divmod(at_t, classes, pos, safe_t);
    llvm::Value* xt = b.CreateFPExt(read(0, at_t), f64);
    llvm::Value* loss = b.CreateFAdd(b.CreateFSub(b.CreateFPExt(m, f64), xt),
                                     b.CreateUnaryIntrinsic(llvm::Intrinsic::log, s));
    return std::vector<llvm::Value*>{b.CreateSelect(skip, dconst(kb, 0), loss),
                                     b.CreateSelect(skip, dconst(kb, 0), dconst(kb, 1)), outside};
  });
}

// cross_entropy: the mean over the positions counted of their losses. A target outside
// [0, C) that is not ignored makes the result NaN (the reference throws a UserError; a
// kernel cannot, so the loss says it instead). Partial: chunk p of the positions; its
// partials are the sum (NaN for a bad target, so that the mean is) in slot p and the count
// in slot chunks + p.
void cross_entropy(CodeletBuilder& kb, const Graph& g, const Node& n, const ReducePlan& p, ReducePhase phase,
                   size_t scratch, const Reader& read, const ReduceDone& done) {
  auto& b = kb.b;
  llvm::Type* f64 = b.getDoubleTy();
  llvm::Value* positions = kb.size(kb.symbols.numel(g.type(n.inputs.at(1)).shape));
  llvm::Value* nan = llvm::ConstantFP::getNaN(f64);
  llvm::Value* chunks = kb.c64(p.chunks);
  llvm::Value* total = nullptr;
  llvm::Value* counted = nullptr;
  if (phase == ReducePhase::Partial) {
    auto [lo, count] = chunk_range(kb, positions, kb.index, p.chunks);
    std::vector<llvm::Value*> r = cross_entropy_sum(kb, g, n, p, read, lo, count);
    llvm::Value* partial = b.CreateSelect(r[2], nan, r[0]);
    kb.single([&] {
      store_partial(kb, p.scratch_type, scratch, kb.index, partial);
      store_partial(kb, p.scratch_type, scratch, b.CreateAdd(chunks, kb.index), r[1]);
    });
    return;
  }
  if (phase == ReducePhase::Finish) {
    std::vector<llvm::Value*> r = kb.reduce_loop({chunks}, {sum_f64(kb), sum_f64(kb)}, [&](const std::vector<llvm::Value*>& k) {
      return std::vector<llvm::Value*>{load_partial(kb, p.scratch_type, scratch, k[0], f64),
                                       load_partial(kb, p.scratch_type, scratch, b.CreateAdd(chunks, k[0]), f64)};
    });
    total = r[0];
    counted = r[1];
  } else {
    std::vector<llvm::Value*> r = cross_entropy_sum(kb, g, n, p, read, kb.c64(0), positions);
    total = b.CreateSelect(r[2], nan, r[0]);
    counted = r[1];
  }
  llvm::Value* mean = b.CreateFDiv(total, counted);  // 0/0: NaN
  done(kb.index, b.CreateFPTrunc(mean, b.getFloatTy()));
}

// The input offset of output element `out`'s first element: its coordinates over the kept
// groups times their strides.
llvm::Value* input_base(CodeletBuilder& kb, const Geometry& geo, llvm::Value* out) {
  auto& b = kb.b;
  llvm::Value* base = kb.c64(0);
  llvm::Value* rest = out;
  std::vector<size_t> kept;
  for (size_t j = 0; j < geo.groups.size(); ++j)
    if (!geo.groups[j].reduced) kept.push_back(j);
  for (size_t q = kept.size(); q-- > 0;) {
    const Geometry::Group& grp = geo.groups[kept[q]];
    llvm::Value* c = rest;
    if (q > 0) {
      llvm::Value* m = kb.size(grp.extent);
      c = kb.rem(rest, m);
      rest = kb.div(rest, m);
    }
    base = b.CreateAdd(base, b.CreateMul(c, kb.size(grp.stride)));
  }
  return base;
}

}  // namespace

void emit_reduction(CodeletBuilder& kb, const Graph& g, const Node& n, const ReducePlan& p, ReducePhase phase,
                    size_t scratch, const Reader& read, const ReduceDone& done) {
  if (n.op == OpKind::CrossEntropy) return cross_entropy(kb, g, n, p, phase, scratch, read, done);
  auto& b = kb.b;
  const Geometry geo = geometry(g, n);
  const bool is_max = n.op == OpKind::Max;
  const bool is_int = g.type(n.inputs.at(0)).dtype == DType::I32;
  CodeletBuilder::Accumulator acc = sum_f64(kb);
  if (is_max) acc = {b.getFloatTy(), llvm::ConstantFP::getInfinity(b.getFloatTy(), true),
                     [&kb](llvm::Value* a, llvm::Value* v) { return max_nan(kb, a, v); }};
  else if (n.op == OpKind::Prod) acc = {b.getDoubleTy(), llvm::ConstantFP::get(b.getDoubleTy(), 1.0),
                                        [&b](llvm::Value* a, llvm::Value* v) { return b.CreateFMul(a, v); }};
  else if (is_int) acc = {b.getInt64Ty(), kb.c64(0), [&b](llvm::Value* a, llvm::Value* v) { return b.CreateAdd(a, v); }};
  // An element's contribution, and the output value of an accumulated result.
  auto widen = [&](llvm::Value* v) {
    if (is_max) return v;
    if (is_int) return b.CreateSExt(v, kb.i64());
    return b.CreateFPExt(v, b.getDoubleTy());
  };
  auto result = [&](llvm::Value* r) {
    if (n.op == OpKind::Mean) r = b.CreateFDiv(r, b.CreateSIToFP(kb.size(geo.count), b.getDoubleTy()));  // 0/0: NaN
    if (is_int) return b.CreateTrunc(r, b.getInt32Ty());
    if (!is_max) return b.CreateFPTrunc(r, b.getFloatTy());
    return r;
  };
  llvm::Value* chunks = kb.c64(p.chunks);
  if (phase == ReducePhase::Finish) {
    llvm::Value* first = b.CreateMul(kb.index, chunks);
    llvm::Value* r = kb.reduce_loop(chunks, acc, [&](llvm::Value* k) {
      return load_partial(kb, p.scratch_type, scratch, b.CreateAdd(first, k), acc.type);
    });
    done(kb.index, result(r));
    return;
  }

  // Whole: work item = an output or a tile; Partial: (chunk, that), chunk-major, so that
  // the work items a thread runs in a row read neighbouring memory (a tile's neighbours
  // read the rest of its rows' cache lines).
  llvm::Value* item = kb.index;
  llvm::Value* chunk = nullptr;
  if (phase == ReducePhase::Partial) {
    llvm::Value* units = kb.size(one_phase_items(g, n, p).first);
    item = kb.rem(kb.index, units);
    chunk = kb.div(kb.index, units);
  }
  // One loop per reduced group, innermost last; a Partial's chunked group runs its chunk.
  // With rows of `unit` elements (plan.inner) innermost, a reduced innermost group splits
  // into a loop over its rows and one over the row's elements, and every element offset's
  // quotient and remainder by unit are told to the builder: q = q0 + sum of k_j times
  // stride_j / unit over the row loops (each stride a multiple of unit), r = the innermost
  // coordinate (a column reduction's: the column).
  struct Loop {
    llvm::Value* extent;
    llvm::Value* stride;
    llvm::Value* start = nullptr;  // a Partial's chunk
    llvm::Value* rows = nullptr;   // stride / unit; null for the loop over a row's elements
  };
  std::vector<Loop> loops;
  size_t chunked = 0;
  std::optional<Dim> unit;
  if (p.inner && geo.column && *p.inner == geo.columns) unit = p.inner;
  if (p.inner && !geo.column && !geo.groups.empty() && geo.groups.back().reduced &&
      Dim::divide(geo.groups.back().extent, *p.inner))
    unit = p.inner;
  for (size_t j = 0, r = 0; j < geo.groups.size(); ++j) {
    const Geometry::Group& grp = geo.groups[j];
    if (!grp.reduced) continue;
    if (r++ == geo.chunked) chunked = loops.size();
    auto rows = [&](const Dim& stride) { return unit ? kb.size(*Dim::divide(stride, *unit)) : nullptr; };
    if (unit && !geo.column && j + 1 == geo.groups.size()) {
      loops.push_back({kb.size(*Dim::divide(grp.extent, *unit)), kb.size(*unit), nullptr, kb.c64(1)});
      loops.push_back({kb.size(*unit), kb.c64(1)});
    } else {
      loops.push_back({kb.size(grp.extent), kb.size(grp.stride), nullptr, rows(grp.stride)});
    }
  }
  if (phase == ReducePhase::Partial && !loops.empty()) {
    auto [lo, count] = chunk_range(kb, loops[chunked].extent, chunk, p.chunks);
    loops[chunked].start = lo;
    loops[chunked].extent = count;
  }
  std::vector<llvm::Value*> extents;
  for (const Loop& l : loops) extents.push_back(l.extent);
  // The offset of an element (plus `col` for a tile's column), with its quotient and
  // remainder by unit (from q0, the quotient of the work item's base).
  llvm::Value* q0 = nullptr;
  auto offset = [&](llvm::Value* base, const std::vector<llvm::Value*>& k, llvm::Value* col) {
    llvm::Value* off = base;
    llvm::Value* q = q0;
    llvm::Value* r = col;
    for (size_t j = 0; j < k.size(); ++j) {
      llvm::Value* kj = loops[j].start ? b.CreateAdd(k[j], loops[j].start) : k[j];
      off = b.CreateAdd(off, b.CreateMul(kj, loops[j].stride));
      if (!unit) continue;
      if (loops[j].rows) q = b.CreateAdd(q, b.CreateMul(kj, loops[j].rows));
      else r = kj;
    }
    if (col) off = b.CreateAdd(off, col);
    if (unit) kb.known_divmod(off, kb.size(*unit), q, r);
    return off;
  };
  auto finish = [&](llvm::Value* out, llvm::Value* r) {
    if (phase == ReducePhase::Whole) done(out, result(r));
    else store_partial(kb, p.scratch_type, scratch, b.CreateAdd(b.CreateMul(out, chunks), chunk), r);
  };

  if (!geo.column) {
    llvm::Value* base = input_base(kb, geo, item);
    if (unit) q0 = kb.div(base, kb.size(*unit));
    llvm::Value* r = kb.reduce_loop(extents, {acc}, [&](const std::vector<llvm::Value*>& k) {
      return std::vector<llvm::Value*>{widen(read(0, offset(base, k, nullptr)))};
    })[0];
    if (phase == ReducePhase::Whole) finish(item, r);
    else kb.single([&] { finish(item, r); });
    return;
  }
  // A tile of columns: the output offset of its first column, and how many it has.
  llvm::Value* c_n = kb.size(geo.columns);
  llvm::Value *first = nullptr, *col0 = nullptr, *cols = nullptr;
  if (std::optional<int64_t> tiles = tiles_per_row(geo, p.tile)) {
    llvm::Value* t = kb.c64(*tiles);
    col0 = b.CreateMul(kb.rem(item, t), kb.c64(p.tile));
    first = b.CreateAdd(b.CreateMul(kb.div(item, t), c_n), col0);
    cols = umin(kb, kb.c64(p.tile), b.CreateSub(c_n, col0));
  } else {
    col0 = kb.rem(item, c_n);
    first = item;
    llvm::Value* starts_tile = b.CreateICmpEQ(kb.rem(col0, kb.c64(p.tile)), kb.c64(0));
    cols = b.CreateSelect(starts_tile, umin(kb, kb.c64(p.tile), b.CreateSub(c_n, col0)), kb.c64(0));
  }
  llvm::Value* base = b.CreateSub(input_base(kb, geo, first), col0);  // the row's start
  if (unit) q0 = kb.div(base, c_n);
  kb.tile_reduce(p.tile, cols, extents, {acc},
                 [&](const std::vector<llvm::Value*>& k, llvm::Value* c) {
                   return std::vector<llvm::Value*>{widen(read(0, offset(base, k, b.CreateAdd(col0, c))))};
                 },
                 [&](llvm::Value* c, const std::vector<llvm::Value*>& r) { finish(b.CreateAdd(first, c), r[0]); });
}

namespace {
size_t row_axis(const Graph& g, const Node& n) {
  if (n.op == OpKind::LayerNorm) return g.type(n.inputs.at(0)).shape.size() - 1;
  return static_cast<size_t>(n.attrs.i("axis"));
}
}  // namespace

Dim row_length(const Graph& g, const Node& n) { return g.type(n.inputs.at(0)).shape.at(row_axis(g, n)); }

Dim row_lanes(const Graph& g, const Node& n) {
  const Shape& xs = g.type(n.inputs.at(0)).shape;
  const size_t axis = row_axis(g, n);
  Dim lanes = 1;
  for (size_t d = 0; d < xs.size(); ++d)
    if (d != axis) lanes = lanes * xs[d];
  return lanes;
}

void row_op(CodeletBuilder& kb, const Graph& g, const Node& n, llvm::Value* w, const Reader& read, const RowWriter& write) {
  auto& b = kb.b;
  const Shape& xs = g.type(n.inputs.at(0)).shape;
  llvm::Type* f32 = b.getFloatTy();
  llvm::Type* f64 = b.getDoubleTy();
  const size_t axis = row_axis(g, n);
  Lane l = lane(kb, xs, axis, w);

  if (n.op == OpKind::Softmax || n.op == OpKind::LogSoftmax) {
    auto [m, s] = max_and_sum_exp(kb, read, l);
    bool log = n.op == OpKind::LogSoftmax;
    llvm::Value* sf = b.CreateFPTrunc(s, f32);
    llvm::Value* logs = log ? b.CreateFPTrunc(b.CreateUnaryIntrinsic(llvm::Intrinsic::log, s), f32) : nullptr;
    kb.parallel_loop(l.n, [&](llvm::Value* k) {
      llvm::Value* at = b.CreateAdd(l.base, b.CreateMul(k, l.stride));
      llvm::Value* d = b.CreateFSub(read(0, at), m);
      write(at, log ? b.CreateFSub(d, logs) : b.CreateFDiv(b.CreateUnaryIntrinsic(llvm::Intrinsic::exp, d), sf));
    });
    return;
  }
  if (n.op == OpKind::LayerNorm) {
    auto has = [&](size_t k) { return k < n.inputs.size() && n.inputs[k].valid(); };
    llvm::Value* nd = b.CreateSIToFP(l.n, f64);
    llvm::Value* sum = kb.reduce_loop(l.n, sum_f64(kb), [&](llvm::Value* k) {
      return b.CreateFPExt(read(0, b.CreateAdd(l.base, k)), f64);
    });
    llvm::Value* mean = b.CreateFDiv(sum, nd);
    llvm::Value* var = kb.reduce_loop(l.n, sum_f64(kb), [&](llvm::Value* k) {
      llvm::Value* dx = b.CreateFSub(b.CreateFPExt(read(0, b.CreateAdd(l.base, k)), f64), mean);
      return b.CreateFMul(dx, dx);
    });
    llvm::Value* v = b.CreateFAdd(b.CreateFDiv(var, nd), dconst(kb, n.attrs.f("eps")));
    llvm::Value* inv = b.CreateFDiv(dconst(kb, 1), b.CreateUnaryIntrinsic(llvm::Intrinsic::sqrt, v));
    kb.parallel_loop(l.n, [&](llvm::Value* k) {
      llvm::Value* at = b.CreateAdd(l.base, k);
      llvm::Value* dx = b.CreateFSub(b.CreateFPExt(read(0, at), f64), mean);
      llvm::Value* y = b.CreateFPTrunc(b.CreateFMul(dx, inv), f32);
      if (has(1)) y = b.CreateFMul(y, read(1, k));
      if (has(2)) y = b.CreateFAdd(y, read(2, k));
      write(at, y);
    });
    return;
  }
  throw InternalError(fmt::format("kernel compiler: '{}' is not a row op", op_name(n.op)));
}

}  // namespace modelc
