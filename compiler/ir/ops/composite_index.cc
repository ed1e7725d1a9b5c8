// Composite index ops: argmax and argmin (the first position of the maximum or minimum along
// an axis, as torch.argmax / torch.argmin), built from max, eq, where and a column of
// positions (a cumsum of ones); tril and triu (where on the row and column positions); and
// index_select (an embedding lookup of the selected axis, so its indices are checked
// against the axis's extent as embedding's ids are, and its gradient is embedding's
// scatter-add). They fuse and run on every backend as their parts do; their references,
// written apart from the expansions, are what tests/conformance checks the expansions
// against.
#include <cmath>
#include <limits>

#include <fmt/format.h>

#include "compiler/ir/op_examples.h"
#include "compiler/ir/op_registry.h"

namespace modelc {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

// A RefTensor seen as [outer, len, inner] around `axis`.
struct Lines {
  int64_t outer = 1, len = 1, inner = 1;
};

Lines lines_of(const std::vector<int64_t>& shape, int64_t axis) {
  Lines l;
  for (size_t d = 0; d < shape.size(); ++d) {
    const auto du = static_cast<int64_t>(d);
    if (du < axis) l.outer *= shape[d];
    else if (du == axis) l.len = shape[d];
    else l.inner *= shape[d];
  }
  return l;
}

// The position of each element along `axis` (0, 1, ...), f32 of x's shape: a running sum of
// ones less one, exact below 2^24.
Value positions(ExpandCtx& x, const Shape& shape, int64_t axis) {
  const Value ones = x.op(OpKind::BroadcastTo, {x.number(1, DType::F32)}, {{"shape", shape}});
  const Value run = x.op(OpKind::Cumsum, {ones}, {{"axis", axis}});
  return x.op(OpKind::Sub, {run, x.number(1, DType::F32)});
}

// ---- argmax, argmin ----

void infer_arg(InferCtx& ctx, std::string_view name) {
  const TensorType& x = ctx.input(0);
  if (!is_float(x.dtype)) return ctx.fail(fmt::format("{} expects a floating-point tensor, got {}", name, x.str()), 0);
  int64_t axis = ctx.attrs.i("axis");
  if (!normalize_axis(axis, x.rank()))
    return ctx.fail_attr(fmt::format("{}: axis {} is out of range for {} (rank {})", name, ctx.attrs.i("axis"), x.str(),
                                     x.rank()), "axis");
  const Dim& extent = x.shape[static_cast<size_t>(axis)];
  if (extent == Dim(0))
    return ctx.fail_attr(fmt::format("{}: axis {} of {} is empty (no element to pick)", name, axis, x.str()), "axis");
  ctx.attrs.set("axis", axis);
  TensorType t{DType::I32, {}};
  for (size_t d = 0; d < x.shape.size(); ++d) {
    if (static_cast<int64_t>(d) != axis) t.shape.push_back(x.shape[d]);
    else if (ctx.attrs.b("keepdims")) t.shape.push_back(Dim(1));
  }
  ctx.out = {t};
}

// The first position of the largest (smallest) value of each line; a NaN counts as beyond
// every number (the first NaN wins), as PyTorch.
void ref_arg(RefCtx& c, bool largest) {
  const RefTensor& x = c.input(0);
  const Lines l = lines_of(x.shape, c.attrs().i("axis"));
  for (int64_t o = 0; o < l.outer; ++o)
    for (int64_t k = 0; k < l.inner; ++k) {
      int64_t best = 0;
      for (int64_t s = 1; s < l.len; ++s) {
        const double v = x[(o * l.len + s) * l.inner + k], b = x[(o * l.len + best) * l.inner + k];
        if (std::isnan(b)) break;
        if (std::isnan(v) || (largest ? v > b : v < b)) best = s;
      }
      c.out[0][o * l.inner + k] = static_cast<double>(best);
    }
}

// The least position where x equals its max (min) along the axis, or, where the line holds
// a NaN (and so the max is NaN), the least position of a NaN.
Value expand_arg(ExpandCtx& x, bool largest) {
  const Value in = x.input(0);
  const int64_t axis = x.attrs.i("axis");
  const Value m = x.op(largest ? OpKind::Max : OpKind::Min, {in}, {{"axes", Ints{axis}}, {"keepdims", true}});
  const Value pos = positions(x, x.type(in).shape, axis);
  const Value none = x.number(kInf, DType::F32);
  const Value at_m = x.op(OpKind::Where, {x.op(OpKind::Eq, {in, m}), pos, none});
  const Value at = x.op(OpKind::Where, {x.op(OpKind::Ne, {in, in}), pos, at_m});
  const Value first = x.op(OpKind::Min, {at}, {{"axes", Ints{axis}}, {"keepdims", x.attrs.b("keepdims")}});
  return x.op(OpKind::Cast, {first}, {{"dtype", DType::I32}});
}

// Values on a grid of 0.5 (so lines meet ties), on every axis of shapes of rank 1 to 4.
std::vector<OpExample> arg_examples(ExampleRng& rng) {
  return examples::calls(6, [&](int rep, OpExample& e) {
    const std::vector<int64_t> s = examples::shape(rng, 1, 4, 1, 6);
    const auto rank = static_cast<int64_t>(s.size());
    const int64_t axis = examples::pick(rng, -rank, rank - 1);
    const bool keep = rep % 2 == 1;
    e.inputs = {examples::values(rng, DType::F32, s, Domain{-1, 1, 0.5})};
    e.attrs.set("axis", axis);
    e.attrs.set("keepdims", keep);
    e.label = fmt::format("{} axis {}{}", RefTensor(DType::F32, s).shape_str(), axis, keep ? ", keepdims" : "");
    e.grad = false;
  });
}

void def_arg(OpRegistry& r, OpKind k, bool largest, std::string summary) {
  const std::string name = r.info(k).name;  // not op_name: the registry is being built
  r.def(k).signature("x: tensor, axis: int, keepdims: bool = false")
      .infer([name](InferCtx& c) { infer_arg(c, name); })
      .reference([largest](RefCtx& c) { ref_arg(c, largest); })
      .composite([largest](ExpandCtx& x) { return expand_arg(x, largest); })
      .no_grad("its result is i32 positions, constant wherever x does not tie")
      .examples(arg_examples).summary(std::move(summary));
}


// ---- tril, triu ----

void infer_tri(InferCtx& ctx, std::string_view name) {
  const TensorType& x = ctx.input(0);
  if (x.rank() < 2) return ctx.fail(fmt::format("{} needs a matrix or a batch of them (rank >= 2), got {}", name, x.str()), 0);
  if (x.dtype == DType::Bool) return ctx.fail(fmt::format("{} expects a number tensor, got {}", name, x.str()), 0);
  ctx.out = {x};
}

// Keeps x[..., i, j] where j - i <= diagonal (tril) or j - i >= diagonal (triu), else 0.
void ref_tri(RefCtx& c, bool lower) {
  const RefTensor& x = c.input(0);
  const int64_t diag = c.attrs().i("diagonal");
  const int64_t cols = x.shape.back(), rows = x.shape[x.shape.size() - 2];
  for (int64_t e = 0; e < x.numel(); ++e) {
    const int64_t j = e % cols, i = (e / cols) % rows;
    const bool keep = lower ? j - i <= diag : j - i >= diag;
    c.out[0][e] = keep ? x[e] : 0.0;
  }
}

// where(col - row <= diagonal, x, 0) on a [R, C] grid of positions that broadcasts to x.
Value expand_tri(ExpandCtx& x, bool lower) {
  const Value in = x.input(0);
  const Shape& s = x.type(in).shape;
  const Dim& rows = s[s.size() - 2];
  const Dim& cols = s.back();
  const Value row = positions(x, Shape{rows, Dim(1)}, 0);
  const Value col = positions(x, Shape{Dim(1), cols}, 1);
  const Value offset = x.op(OpKind::Sub, {col, row});
  const Value diag = x.number(static_cast<double>(x.attrs.i("diagonal")), DType::F32);
  const Value keep = x.op(lower ? OpKind::Le : OpKind::Ge, {offset, diag});
  return x.op(OpKind::Where, {keep, in, x.number(0, x.type(in).dtype)});
}

std::vector<OpExample> tri_examples(ExampleRng& rng) {
  return examples::calls(6, [&](int rep, OpExample& e) {
    const std::vector<int64_t> s = examples::shape(rng, 2, 4, 1, 6);
    const int64_t diag = rep == 0 ? 0 : examples::pick(rng, -6, 6);
    const DType t = rep == 5 ? DType::I32 : DType::F32;
    e.inputs = {examples::values(rng, t, s, Domain{-3, 3})};
    e.attrs.set("diagonal", diag);
    e.label = fmt::format("{} diagonal {}", RefTensor(t, s).shape_str(), diag);
    e.grad = t == DType::F32;
  });
}

void def_tri(OpRegistry& r, OpKind k, bool lower, std::string summary) {
  const std::string name = r.info(k).name;  // not op_name: the registry is being built
  r.def(k).signature("x: tensor, diagonal: int = 0")
      .infer([name](InferCtx& c) { infer_tri(c, name); })
      .reference([lower](RefCtx& c) { ref_tri(c, lower); })
      .composite([lower](ExpandCtx& x) { return expand_tri(x, lower); })
      .examples(tri_examples).summary(std::move(summary));
}

// ---- index_select ----

void infer_index_select(InferCtx& ctx) {
  const TensorType& x = ctx.input(0);
  const TensorType& index = ctx.input(1);
  if (!is_float(x.dtype)) return ctx.fail("index_select expects a floating-point tensor, got " + x.str(), 0);
  if (x.rank() == 0) return ctx.fail("index_select needs a tensor with an axis to select along, got " + x.str(), 0);
  if (index.dtype != DType::I32 || index.rank() != 1)
    return ctx.fail("index_select: the index must be a 1-D i32 tensor, got " + index.str(), 1);
  int64_t axis = ctx.attrs.i("axis");
  if (!normalize_axis(axis, x.rank()))
    return ctx.fail_attr(fmt::format("index_select: axis {} is out of range for {} (rank {})", ctx.attrs.i("axis"),
                                     x.str(), x.rank()), "axis");
  ctx.attrs.set("axis", axis);
  TensorType t = x;
  t.shape[static_cast<size_t>(axis)] = index.shape[0];
  ctx.out = {t};
}

void ref_index_select(RefCtx& c) {
  const RefTensor& x = c.input(0);
  const RefTensor& index = c.input(1);
  const Lines l = lines_of(x.shape, c.attrs().i("axis"));
  const int64_t k = index.numel();
  for (int64_t s = 0; s < k; ++s) {
    const double id = index[s];
    if (id < 0 || id >= static_cast<double>(l.len))
      throw UserError(fmt::format("index_select: index {} is out of range for an axis of extent {}", id, l.len));
    const auto src = static_cast<int64_t>(id);
    for (int64_t o = 0; o < l.outer; ++o)
      for (int64_t i = 0; i < l.inner; ++i) c.out[0][(o * k + s) * l.inner + i] = x[(o * l.len + src) * l.inner + i];
  }
}

// The selected axis first, the rest flattened: a table [N, R] whose rows embedding picks.
Value expand_index_select(ExpandCtx& x) {
  const Value in = x.input(0);
  const Shape& s = x.type(in).shape;
  const int64_t axis = x.attrs.i("axis");
  const auto rank = static_cast<int64_t>(s.size());
  Ints perm{axis}, back(static_cast<size_t>(rank));
  Shape moved{s[static_cast<size_t>(axis)]};
  Dim rest(1);
  for (int64_t d = 0; d < rank; ++d)
    if (d != axis) perm.push_back(d), moved.push_back(s[static_cast<size_t>(d)]), rest = rest * s[static_cast<size_t>(d)];
  for (int64_t k = 0; k < rank; ++k) back[static_cast<size_t>(perm[static_cast<size_t>(k)])] = k;
  const Value first = axis == 0 ? in : x.op(OpKind::Permute, {in}, {{"dims", perm}});
  const Value table = x.op(OpKind::Reshape, {first}, {{"shape", Shape{moved[0], rest}}});
  const Value rows = x.op(OpKind::Embedding, {x.input(1), table});
  moved[0] = x.type(x.input(1)).shape[0];
  const Value picked = x.op(OpKind::Reshape, {rows}, {{"shape", moved}});
  return axis == 0 ? picked : x.op(OpKind::Permute, {picked}, {{"dims", back}});
}

// Indices with repeats (their gradients add up) and in any order, on every axis.
std::vector<OpExample> index_select_examples(ExampleRng& rng) {
  return examples::calls(6, [&](int, OpExample& e) {
    const std::vector<int64_t> s = examples::shape(rng, 1, 4, 1, 5);
    const auto rank = static_cast<int64_t>(s.size());
    const int64_t axis = examples::pick(rng, -rank, rank - 1);
    const int64_t n = s[static_cast<size_t>(axis < 0 ? axis + rank : axis)];
    const int64_t k = examples::pick(rng, 1, 6);
    e.inputs = {examples::values(rng, DType::F32, s, Domain{-2, 2}), examples::ids(rng, {k}, n)};
    e.attrs.set("axis", axis);
    e.label = fmt::format("{} axis {}, {} indices", RefTensor(DType::F32, s).shape_str(), axis, k);
  });
}

}  // namespace

void register_index_composites(OpRegistry& r) {
  def_arg(r, OpKind::Argmax, true,
          "i32 positions of the maximum along an axis (as torch.argmax): ties give the first, a NaN counts as the "
          "maximum");
  def_arg(r, OpKind::Argmin, false,
          "i32 positions of the minimum along an axis (as torch.argmin): ties give the first, a NaN counts as the "
          "minimum");
  def_tri(r, OpKind::Tril, true,
          "the lower triangle of the last two axes (x[..., i, j] where j - i <= diagonal), zeros above, as torch.tril");
  def_tri(r, OpKind::Triu, false,
          "the upper triangle of the last two axes (x[..., i, j] where j - i >= diagonal), zeros below, as torch.triu");
  r.def(OpKind::IndexSelect).signature("x: tensor, axis: int, index: tensor")
      .infer(infer_index_select).reference(ref_index_select).composite(expand_index_select)
      .examples(index_select_examples)
      .summary("the slices of x along an axis at the i32 positions of a 1-D index, in its order (repeats "
               "allowed), as torch.index_select; a position outside the axis is refused, as embedding refuses an id");
}

}  // namespace modelc
