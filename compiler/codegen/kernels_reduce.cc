// Reduction and row kernels.
//
// sum / mean / max: one output element per work item, a reduction over the reduced
// elements. softmax / log_softmax / layer_norm: one lane along the op's axis per work
// item: reductions over the lane, then a pass that writes it. cross_entropy: a single work
// item that reduces over every position. The loops are KernelBuilder's primitives
// (reduce_loop, parallel_loop), so the same code gives the host's sequential loops and a
// GPU block's cooperative ones (compiler/codegen/kernel_emit.h).
//
// Precision: sums (sum, mean, the softmax denominator, layer_norm's mean and variance,
// cross_entropy's total) accumulate in f64, so a sum of 1e5 f32 values stays within a few
// f32 ulps of the double reference; the f64 adds carry `reassoc` so the loop vectorizes.
// Elementwise math on the values (exp, the normalisation) is f32. i32 sums accumulate in
// i64 and wrap to i32 at the store.
#include <limits>

#include <fmt/format.h>
#include <llvm/IR/Intrinsics.h>

#include "compiler/codegen/kernel_emit.h"
#include "compiler/ir/op_registry.h"

namespace modelc {
namespace {

llvm::Value* dconst(KernelBuilder& kb, double v) { return llvm::ConstantFP::get(kb.b.getDoubleTy(), v); }

// acc + v in f64 with reassociation allowed (so the vectorizer may split the sum).
llvm::Value* fadd_reassoc(KernelBuilder& kb, llvm::Value* acc, llvm::Value* v) {
  llvm::FastMathFlags fmf;
  fmf.setAllowReassoc();
  llvm::Value* r = kb.b.CreateFAdd(acc, v);
  if (auto* inst = llvm::dyn_cast<llvm::Instruction>(r)) inst->setFastMathFlags(fmf);
  return r;
}

// The reference's NaN-sticky max: once acc is NaN it stays; a NaN value makes it NaN.
llvm::Value* max_nan(KernelBuilder& kb, llvm::Value* acc, llvm::Value* v) {
  auto& b = kb.b;
  llvm::Value* pick = b.CreateSelect(b.CreateFCmpUGT(v, acc), v, acc);
  return b.CreateSelect(b.CreateFCmpUNO(acc, acc), acc, pick);
}

// std::max(m, x) of the softmax reference: (m < x) ? x : m (a NaN x leaves m).
llvm::Value* std_max(KernelBuilder& kb, llvm::Value* m, llvm::Value* x) {
  return kb.b.CreateSelect(kb.b.CreateFCmpOLT(m, x), x, m);
}

// Lane geometry of an axis: outer * n * inner elements; lane w starts at
// (w / inner) * n * inner + w % inner and steps by inner.
struct Lane {
  llvm::Value* base;
  llvm::Value* stride;
  llvm::Value* n;
};

Lane lane(KernelBuilder& kb, const Shape& s, size_t axis, llvm::Value* w) {
  Dim inner = 1;
  for (size_t d = axis + 1; d < s.size(); ++d) inner = inner * s[d];
  llvm::Value* n = kb.size(s[axis]);
  llvm::Value* in = kb.size(inner);
  if (inner == Dim(1)) return {kb.b.CreateMul(w, n), kb.c64(1), n};
  llvm::Value* base = kb.b.CreateAdd(kb.b.CreateMul(kb.div(w, in), kb.size(s[axis] * inner)), kb.rem(w, in));
  return {base, in, n};
}

// Accumulators: the f64 sum with reassociation, and the softmax reference's max.
KernelBuilder::Accumulator sum_f64(KernelBuilder& kb) {
  return {kb.b.getDoubleTy(), dconst(kb, 0), [&kb](llvm::Value* a, llvm::Value* v) { return fadd_reassoc(kb, a, v); }};
}

KernelBuilder::Accumulator max_f32(KernelBuilder& kb) {
  return {kb.b.getFloatTy(), llvm::ConstantFP::getInfinity(kb.b.getFloatTy(), true),
          [&kb](llvm::Value* a, llvm::Value* v) { return std_max(kb, a, v); }};
}

// The max and the f64 sum of exp(x - max) along a lane of f32 input 0.
std::pair<llvm::Value*, llvm::Value*> max_and_sum_exp(KernelBuilder& kb, const Reader& read, const Lane& l) {
  auto& b = kb.b;
  llvm::Value* mv = kb.reduce_loop(l.n, max_f32(kb), [&](llvm::Value* k) {
    return read(0, b.CreateAdd(l.base, b.CreateMul(k, l.stride)));
  });
  llvm::Value* s = kb.reduce_loop(l.n, sum_f64(kb), [&](llvm::Value* k) {
    llvm::Value* x = read(0, b.CreateAdd(l.base, b.CreateMul(k, l.stride)));
    llvm::Value* e = b.CreateUnaryIntrinsic(llvm::Intrinsic::exp, b.CreateFSub(x, mv));
    return b.CreateFPExt(e, b.getDoubleTy());
  });
  return {mv, s};
}

}  // namespace

namespace {

// cross_entropy: the mean over positions of (max - x[target]) + log(sum exp(x - max)), one
// reduction over every position (each position's own max and sum are sequential). A target
// outside [0, C) makes the result NaN (the reference throws a UserError; a kernel cannot,
// so the loss says it instead).
llvm::Value* cross_entropy_value(KernelBuilder& kb, const Graph& g, const Node& n, const Reader& read) {
  auto& b = kb.b;
  llvm::Type* f32 = b.getFloatTy();
  llvm::Type* f64 = b.getDoubleTy();
  const Shape& xs = g.type(n.inputs.at(0)).shape;
  const Shape& ts = g.type(n.inputs.at(1)).shape;
  llvm::Value* classes = kb.size(xs.back());
  llvm::Value* positions = kb.size(kb.symbols.numel(ts));
  KernelBuilder::Accumulator total{f64, dconst(kb, 0), [&b](llvm::Value* a, llvm::Value* v) { return b.CreateFAdd(a, v); }};
  KernelBuilder::Accumulator bad{b.getInt1Ty(), b.getFalse(), [&b](llvm::Value* a, llvm::Value* v) { return b.CreateOr(a, v); }};
  std::vector<llvm::Value*> r = kb.reduce_loop({positions}, {total, bad}, [&](const std::vector<llvm::Value*>& k) {
    llvm::Value* pos = k[0];
    Lane l{b.CreateMul(pos, classes), kb.c64(1), classes};
    auto [m, s] = max_and_sum_exp(kb, read, l);
    llvm::Value* t = b.CreateSExt(read(1, pos), kb.i64());
    llvm::Value* outside = b.CreateICmpUGE(t, classes);  // negative t is huge unsigned
    llvm::Value* safe_t = b.CreateSelect(outside, kb.c64(0), t);
    llvm::Value* xt = b.CreateFPExt(read(0, b.CreateAdd(l.base, safe_t)), f64);
    llvm::Value* loss = b.CreateFAdd(b.CreateFSub(b.CreateFPExt(m, f64), xt),
                                     b.CreateUnaryIntrinsic(llvm::Intrinsic::log, s));
    return std::vector<llvm::Value*>{loss, outside};
  });
  llvm::Value* mean = b.CreateFDiv(r[0], b.CreateSIToFP(positions, f64));  // 0/0: NaN
  mean = b.CreateSelect(r[1], llvm::ConstantFP::getNaN(f64), mean);
  return b.CreateFPTrunc(mean, f32);
}

std::vector<bool> reduced_axes(const Graph& g, const Node& n) {
  std::vector<bool> reduced(g.type(n.inputs.at(0)).shape.size(), false);
  for (int64_t a : n.attrs.ints("axes")) reduced.at(static_cast<size_t>(a)) = true;
  return reduced;
}

}  // namespace

Dim reduced_count(const Graph& g, const Node& n) {
  const Shape& xs = g.type(n.inputs.at(0)).shape;
  if (n.op == OpKind::CrossEntropy) return [&] { Dim c = 1; for (const Dim& d : xs) c = c * d; return c; }();
  std::vector<bool> reduced = reduced_axes(g, n);
  Dim count = 1;
  for (size_t d = 0; d < xs.size(); ++d)
    if (reduced[d]) count = count * xs[d];
  return count;
}

llvm::Value* reduction_value(KernelBuilder& kb, const Graph& g, const Node& n, llvm::Value* out, const Reader& read) {
  if (n.op == OpKind::CrossEntropy) return cross_entropy_value(kb, g, n, read);
  auto& b = kb.b;
  const TensorType& xt = g.type(n.inputs.at(0));
  const Shape& xs = xt.shape;
  std::vector<bool> reduced = reduced_axes(g, n);

  // Merge neighbouring dims of the same kind; drop dims of extent 1.
  struct Group { Dim extent; bool reduced; };
  std::vector<Group> groups;
  Dim count = 1;
  for (size_t d = 0; d < xs.size(); ++d) {
    if (reduced[d]) count = count * xs[d];
    if (xs[d] == Dim(1)) continue;
    if (!groups.empty() && groups.back().reduced == reduced[d]) groups.back().extent = groups.back().extent * xs[d];
    else groups.push_back({xs[d], reduced[d]});
  }
  std::vector<Dim> stride(groups.size());
  Dim st = 1;
  for (size_t j = groups.size(); j-- > 0;) {
    stride[j] = st;
    st = st * groups[j].extent;
  }
  // The base offset of output element `out`: its coordinates over the kept groups.
  llvm::Value* base = kb.c64(0);
  {
    llvm::Value* rest = out;
    std::vector<size_t> kept;
    for (size_t j = 0; j < groups.size(); ++j)
      if (!groups[j].reduced) kept.push_back(j);
    for (size_t q = kept.size(); q-- > 0;) {
      size_t j = kept[q];
      llvm::Value* c = rest;
      if (q > 0) {
        llvm::Value* m = kb.size(groups[j].extent);
        c = kb.rem(rest, m);
        rest = kb.div(rest, m);
      }
      base = b.CreateAdd(base, b.CreateMul(c, kb.size(stride[j])));
    }
  }
  const bool is_max = n.op == OpKind::Max;
  const bool is_int = xt.dtype == DType::I32;
  KernelBuilder::Accumulator acc = sum_f64(kb);
  if (is_max) acc = {b.getFloatTy(), llvm::ConstantFP::getInfinity(b.getFloatTy(), true),
                     [&kb](llvm::Value* a, llvm::Value* v) { return max_nan(kb, a, v); }};
  else if (is_int) acc = {b.getInt64Ty(), kb.c64(0), [&b](llvm::Value* a, llvm::Value* v) { return b.CreateAdd(a, v); }};
  // One loop per reduced group, innermost last.
  std::vector<llvm::Value*> extents, strides;
  for (size_t j = 0; j < groups.size(); ++j) {
    if (!groups[j].reduced) continue;
    extents.push_back(kb.size(groups[j].extent));
    strides.push_back(kb.size(stride[j]));
  }
  llvm::Value* r = kb.reduce_loop(extents, {acc}, [&](const std::vector<llvm::Value*>& k) {
    llvm::Value* off = base;
    for (size_t j = 0; j < k.size(); ++j) off = b.CreateAdd(off, b.CreateMul(k[j], strides[j]));
    llvm::Value* v = read(0, off);
    if (is_max) return std::vector<llvm::Value*>{v};
    if (is_int) return std::vector<llvm::Value*>{b.CreateSExt(v, kb.i64())};
    return std::vector<llvm::Value*>{b.CreateFPExt(v, b.getDoubleTy())};
  })[0];
  if (n.op == OpKind::Mean) r = b.CreateFDiv(r, b.CreateSIToFP(kb.size(count), b.getDoubleTy()));  // 0/0: NaN
  if (is_int) return b.CreateTrunc(r, b.getInt32Ty());
  if (!is_max) return b.CreateFPTrunc(r, b.getFloatTy());
  return r;
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

void row_op(KernelBuilder& kb, const Graph& g, const Node& n, llvm::Value* w, const Reader& read, const RowWriter& write) {
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
