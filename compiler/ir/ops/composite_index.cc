// Composite index ops: argmax and argmin (the first position of the maximum or minimum along
// an axis, as torch.argmax / torch.argmin). They are built from max, eq, where and a column
// of positions (a cumsum of ones), so they fuse and run on every backend as their parts do;
// their references, written apart from the expansions, are what tests/conformance checks
// the expansions against.
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

}  // namespace

void register_index_composites(OpRegistry& r) {
  def_arg(r, OpKind::Argmax, true,
          "i32 positions of the maximum along an axis (as torch.argmax): ties give the first, a NaN counts as the "
          "maximum");
  def_arg(r, OpKind::Argmin, false,
          "i32 positions of the minimum along an axis (as torch.argmin): ties give the first, a NaN counts as the "
          "minimum");
}

}  // namespace modelc
