// Composite shape and selection ops: squeeze, unsqueeze and flatten (reshapes), stack
// (reshapes and a concat), clamp and masked_fill (where). Their references, written apart
// from the expansions, are what tests/conformance checks the expansions against.
#include <algorithm>

#include <fmt/format.h>

#include "compiler/ir/op_examples.h"
#include "compiler/ir/op_registry.h"

namespace modelc {
namespace {

// The reshape every one of squeeze, unsqueeze and flatten expands to.
Value expand_reshape(ExpandCtx& x) { return x.op(OpKind::Reshape, {x.input(0)}, {{"shape", x.out.shape}}); }
void ref_copy(RefCtx& c) { c.out[0].data = c.input(0).data; }

bool axis_in(int64_t& axis, int rank, InferCtx& ctx, std::string_view name, std::string_view attr, const TensorType& x) {
  const int64_t given = axis;
  if (normalize_axis(axis, rank)) return true;
  ctx.fail_attr(fmt::format("{}: {} {} is out of range for {} (rank {})", name, attr, given, x.str(), x.rank()),
                std::string(attr));
  return false;
}

// squeeze: the given axes (each of extent 1), or every axis of extent 1.
void infer_squeeze(InferCtx& ctx) {
  const TensorType& x = ctx.input(0);
  std::vector<bool> drop(static_cast<size_t>(x.rank()), false);
  const Ints& given = ctx.attrs.ints("axes");
  for (int64_t a : given) {
    int64_t axis = a;
    if (!axis_in(axis, x.rank(), ctx, "squeeze", "axes", x)) return;
    if (x.shape[static_cast<size_t>(axis)] != Dim(1))
      return ctx.fail_attr(fmt::format("squeeze: axis {} of {} has extent {}, not 1", a, x.str(),
                                       x.shape[static_cast<size_t>(axis)].str()), "axes");
    drop[static_cast<size_t>(axis)] = true;
  }
  TensorType t{x.dtype, {}};
  for (size_t d = 0; d < x.shape.size(); ++d)
    if (!(given.empty() ? x.shape[d] == Dim(1) : drop[d])) t.shape.push_back(x.shape[d]);
  ctx.out = {t};
}

void infer_unsqueeze(InferCtx& ctx) {
  const TensorType& x = ctx.input(0);
  int64_t axis = ctx.attrs.i("axis");
  if (!axis_in(axis, x.rank() + 1, ctx, "unsqueeze", "axis", x)) return;
  TensorType t = x;
  t.shape.insert(t.shape.begin() + axis, Dim(1));
  ctx.attrs.set("axis", axis);
  ctx.out = {t};
}

// flatten: axes start..end (inclusive) become one; a rank-0 tensor becomes [1].
void infer_flatten(InferCtx& ctx) {
  const TensorType& x = ctx.input(0);
  if (x.rank() == 0) {
    ctx.out = {TensorType{x.dtype, {Dim(1)}}};
    return;
  }
  int64_t start = ctx.attrs.i("start"), end = ctx.attrs.i("end");
  if (!axis_in(start, x.rank(), ctx, "flatten", "start", x) || !axis_in(end, x.rank(), ctx, "flatten", "end", x)) return;
  if (end < start)
    return ctx.fail_attr(fmt::format("flatten: end {} comes before start {} in {}", ctx.attrs.i("end"),
                                     ctx.attrs.i("start"), x.str()), "end");
  TensorType t{x.dtype, {}};
  Dim merged(1);
  for (int64_t d = 0; d < x.rank(); ++d) {
    const Dim& e = x.shape[static_cast<size_t>(d)];
    if (d < start || d > end) t.shape.push_back(e);
    else merged = merged * e;
    if (d == end) t.shape.push_back(merged);
  }
  ctx.out = {t};
}

// stack: tensors of one type joined along a new axis.
void infer_stack(InferCtx& ctx) {
  if (ctx.in.empty()) return ctx.fail("stack needs at least one tensor");
  const TensorType& x = ctx.input(0);
  for (int i = 1; i < static_cast<int>(ctx.in.size()); ++i)
    if (!(ctx.input(i) == x))
      return ctx.fail(fmt::format("stack needs tensors of one type: {} and {}", x.str(), ctx.input(i).str()), i);
  int64_t axis = ctx.attrs.i("axis");
  if (!axis_in(axis, x.rank() + 1, ctx, "stack", "axis", x)) return;
  TensorType t = x;
  t.shape.insert(t.shape.begin() + axis, Dim(static_cast<int64_t>(ctx.in.size())));
  ctx.attrs.set("axis", axis);
  ctx.out = {t};
}

Value expand_stack(ExpandCtx& x) {
  const auto axis = x.attrs.i("axis");
  std::vector<Value> parts;
  for (const Value& v : x.in) {
    Shape s = x.type(v).shape;
    s.insert(s.begin() + axis, Dim(1));
    parts.push_back(x.op(OpKind::Reshape, {v}, {{"shape", s}}));
  }
  return x.op(OpKind::Concat, parts, {{"axis", axis}});
}

void ref_stack(RefCtx& c) {
  const auto axis = static_cast<size_t>(c.attrs().i("axis"));
  const std::vector<int64_t>& s = c.input(0).shape;
  int64_t outer = 1, inner = 1;
  for (size_t d = 0; d < axis; ++d) outer *= s[d];
  for (size_t d = axis; d < s.size(); ++d) inner *= s[d];
  const auto n = static_cast<int64_t>(c.in.size());
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t k = 0; k < n; ++k)
      for (int64_t i = 0; i < inner; ++i) c.out[0][(o * n + k) * inner + i] = (*c.in[static_cast<size_t>(k)])[o * inner + i];
}

// clamp: min and max are tensors (or numbers) of x's dtype that broadcast to its shape.
void infer_clamp(InferCtx& ctx) {
  const TensorType& x = ctx.input(0);
  if (!is_float(x.dtype) && x.dtype != DType::I32)
    return ctx.fail(fmt::format("clamp expects a floating-point or i32 tensor, got {}", x.str()), 0);
  if (!ctx.has_input(1) && !ctx.has_input(2)) return ctx.fail("clamp needs min, max or both");
  for (int i = 1; i <= 2; ++i) {
    if (!ctx.has_input(i)) continue;
    const TensorType& b = ctx.input(i);
    if (b.dtype != x.dtype || broadcast_shapes(b.shape, x.shape) != x.shape)
      return ctx.fail(fmt::format("clamp: the {} bound {} must have the dtype of {} and broadcast to its shape",
                                  i == 1 ? "min" : "max", b.str(), x.str()), i);
  }
  ctx.out = {x};
}

// x below min: min; then above max: max (so min wins where min > max, as torch.clamp);
// NaN stays NaN.
Value expand_clamp(ExpandCtx& x) {
  Value v = x.input(0);
  if (x.has_input(1)) v = x.op(OpKind::Where, {x.op(OpKind::Lt, {v, x.input(1)}), x.input(1), v});
  if (x.has_input(2)) v = x.op(OpKind::Where, {x.op(OpKind::Gt, {v, x.input(2)}), x.input(2), v});
  return v;
}

void ref_clamp(RefCtx& c) {
  const RefTensor& x = c.input(0);
  for (int64_t i = 0; i < x.numel(); ++i) {
    double v = x[i];
    if (c.in[1]) v = std::max(v, (*c.in[1])[broadcast_index(x.shape, c.in[1]->shape, i)]);
    if (c.in[2]) v = std::min(v, (*c.in[2])[broadcast_index(x.shape, c.in[2]->shape, i)]);
    c.out[0][i] = std::isnan(x[i]) ? x[i] : v;
  }
}

void infer_masked_fill(InferCtx& ctx) {
  const TensorType& x = ctx.input(0);
  const TensorType& m = ctx.input(1);
  if (m.dtype != DType::Bool) return ctx.fail(fmt::format("masked_fill: the mask must be bool, got {}", m.str()), 1);
  if (broadcast_shapes(m.shape, x.shape) != x.shape)
    return ctx.fail(fmt::format("masked_fill: the mask {} does not broadcast to {}", m.str(), x.str()), 1);
  ctx.out = {x};
}

Value expand_masked_fill(ExpandCtx& x) {
  return x.op(OpKind::Where, {x.input(1), x.number(x.attrs.f("value"), x.out.dtype), x.input(0)});
}

void ref_masked_fill(RefCtx& c) {
  const RefTensor& x = c.input(0);
  for (int64_t i = 0; i < x.numel(); ++i)
    c.out[0][i] = c.input(1)[broadcast_index(x.shape, c.input(1).shape, i)] != 0 ? c.attrs().f("value") : x[i];
}

// ---- test domains ----

std::vector<int64_t> with_ones(ExampleRng& rng, std::vector<int64_t> s) {
  for (int64_t& d : s)
    if (examples::pick(rng, 0, 2) == 0) d = 1;
  return s;
}

std::vector<OpExample> shape_examples(ExampleRng& rng, OpKind k) {
  return examples::calls(6, [&](int rep, OpExample& e) {
    std::vector<int64_t> s = with_ones(rng, examples::shape(rng, k == OpKind::Flatten && rep == 0 ? 0 : 1, 4));
    const auto rank = static_cast<int64_t>(s.size());
    e.inputs = {examples::values(rng, DType::F32, s, Domain{-3, 3})};
    std::string what;
    if (k == OpKind::Squeeze) {
      Ints axes;
      for (int64_t d = 0; d < rank; ++d)
        if (s[static_cast<size_t>(d)] == 1 && rep % 2) axes.push_back(examples::pick(rng, 0, 1) ? d : d - rank);
      e.attrs.set("axes", axes);
      what = "axes " + attr_str(axes);
    } else if (k == OpKind::Unsqueeze) {
      const int64_t axis = examples::pick(rng, -rank - 1, rank);
      e.attrs.set("axis", axis);
      what = fmt::format("axis {}", axis);
    } else if (rank > 0) {
      const int64_t a = examples::pick(rng, 0, rank - 1), b = examples::pick(rng, a, rank - 1);
      e.attrs.set("start", a);
      e.attrs.set("end", rep % 2 ? b - rank : b);
      what = fmt::format("start {}, end {}", a, b);
    }
    e.label = fmt::format("{} {}", RefTensor(DType::F32, s).shape_str(), what);
  });
}

std::vector<OpExample> stack_examples(ExampleRng& rng) {
  return examples::calls(5, [&](int, OpExample& e) {
    const std::vector<int64_t> s = examples::shape(rng, 0, 3);
    const int64_t n = examples::pick(rng, 1, 4), rank = static_cast<int64_t>(s.size());
    for (int64_t k = 0; k < n; ++k) e.inputs.push_back(examples::values(rng, DType::F32, s, Domain{-3, 3}));
    const int64_t axis = examples::pick(rng, -rank - 1, rank);
    e.attrs.set("axis", axis);
    e.label = fmt::format("{} x {}, axis {}", n, RefTensor(DType::F32, s).shape_str(), axis);
  });
}

std::vector<OpExample> clamp_examples(ExampleRng& rng) {
  return examples::calls(6, [&](int rep, OpExample& e) {
    const std::vector<int64_t> s = examples::shape(rng, 0, 3);
    const DType t = rep == 5 ? DType::I32 : DType::F32;
    e.inputs = {examples::values(rng, t, s, Domain{-3, 3})};
    const bool lo = rep % 3 != 2, hi = rep % 3 != 1;
    // Bounds on a grid apart from the inputs' values would be ties (kinks); bounds are
    // [-1.05, -0.95] and [0.95, 1.05].
    e.inputs.push_back(lo ? std::optional(examples::values(rng, t, examples::broadcastable_to(rng, s),
                                                           t == DType::I32 ? Domain{-1, -1} : Domain{-1.05, -0.95}))
                          : std::nullopt);
    e.inputs.push_back(hi ? std::optional(examples::values(rng, t, examples::broadcastable_to(rng, s),
                                                           t == DType::I32 ? Domain{1, 1} : Domain{0.95, 1.05}))
                          : std::nullopt);
    e.label = fmt::format("{}{}{}{}", dtype_name(t), RefTensor(t, s).shape_str(), lo ? ", min" : "", hi ? ", max" : "");
    e.grad = t == DType::F32;
  });
}

std::vector<OpExample> masked_fill_examples(ExampleRng& rng) {
  return examples::calls(5, [&](int rep, OpExample& e) {
    const std::vector<int64_t> s = examples::shape(rng, 0, 3);
    e.inputs = {examples::values(rng, DType::F32, s, Domain{-3, 3}),
                examples::values(rng, DType::Bool, examples::broadcastable_to(rng, s))};
    const double v = rep == 0 ? -1e9 : std::uniform_real_distribution<double>(-2, 2)(rng);
    e.attrs.set("value", v);
    e.label = fmt::format("{}, value {:.3g}", RefTensor(DType::F32, s).shape_str(), v);
    e.grad = rep != 0;  // a loss of 1e9 leaves central differences no digits
  });
}

void def_reshaping(OpRegistry& r, OpKind k, std::string sig, InferFn infer, std::string summary) {
  r.def(k).signature(sig).infer(std::move(infer)).reference(ref_copy).composite(expand_reshape)
      .examples([k](ExampleRng& rng) { return shape_examples(rng, k); }).summary(std::move(summary));
}

}  // namespace

void register_shape_composites(OpRegistry& r) {
  def_reshaping(r, OpKind::Squeeze, "x: tensor, axes: ints = []", infer_squeeze,
                "removes the given axes, each of extent 1 (none given: every axis of extent 1)");
  def_reshaping(r, OpKind::Unsqueeze, "x: tensor, axis: int", infer_unsqueeze,
                "inserts an axis of extent 1 at position axis (-1: a new last axis)");
  def_reshaping(r, OpKind::Flatten, "x: tensor, start: int = 0, end: int = -1", infer_flatten,
                "merges axes start..end (inclusive) into one, as torch.flatten (nn.Flatten is start = 1)");
  r.def(OpKind::Stack).signature("xs: tensors, axis: int = 0").infer(infer_stack).reference(ref_stack)
      .composite(expand_stack).examples(stack_examples)
      .summary("joins tensors of one type along a new axis: [a, b] of [N] -> [2, N]");
  r.def(OpKind::Clamp).signature("x: tensor, min: tensor? = none, max: tensor? = none").infer(infer_clamp)
      .reference(ref_clamp).composite(expand_clamp).examples(clamp_examples)
      .summary("x limited to [min, max] (either may be left out; numbers or tensors that broadcast); NaN stays NaN; "
               "the gradient passes where x is inside, the bounds' where they apply");
  r.def(OpKind::MaskedFill).signature("x: tensor, mask: tensor, value: float").infer(infer_masked_fill)
      .reference(ref_masked_fill).composite(expand_masked_fill).examples(masked_fill_examples)
      .summary("value where the bool mask (broadcasting to x) is true, else x");
}

}  // namespace modelc
