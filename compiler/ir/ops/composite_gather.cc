// Gathering and scattering along an axis, and ranges: gather and scatter_add (as
// torch.gather and torch.Tensor.scatter_add), arange (as torch.arange), and the internal
// check of their indices (axis_index_check).
//
// gather and scatter_add are masked sums: the index is compared with every position of the
// indexed axis (an [..., K, N, ...] mask), and the values are picked with `where` (not
// multiplied by the mask, so that a NaN or an infinity elsewhere on the line does not leak
// into a picked value) and summed along the axis the picked values leave. They fuse, run on
// every backend, and differentiate through where, sum and the slices. The cost is K x N per
// line (K indices on an axis of extent N): the axis to index along must be known when the
// model is compiled, and is meant to be a class, feature or channel axis, not a long one.
// Indices outside [0, N) are refused by axis_index_check (by the reference, and by the
// runtime when the index is a model input: compiler/lowered/index_bounds.h).
#include <fmt/format.h>

#include <cmath>

#include "compiler/ir/op_examples.h"
#include "compiler/ir/op_registry.h"

namespace modelc {
namespace {

// ---- axis_index_check ----

void infer_axis_index_check(InferCtx& ctx) {
  const TensorType& t = ctx.input(0);
  if (t.dtype != DType::I32) return ctx.fail("axis_index_check expects i32 indices, got " + t.str(), 0);
  if (ctx.attrs.i("limit") < 1)
    return ctx.fail_attr(fmt::format("axis_index_check: limit {} is not positive", ctx.attrs.i("limit")), "limit");
  ctx.out = {t};
}

void ref_axis_index_check(RefCtx& c) {
  const RefTensor& t = c.input(0);
  const int64_t limit = c.attrs().i("limit");
  for (int64_t i = 0; i < t.numel(); ++i)
    if (t[i] < 0 || t[i] >= static_cast<double>(limit))
      throw UserError(fmt::format("{}: index {} is out of range for an axis of extent {}", c.attrs().s("of"), t[i], limit));
  c.out[0].data = t.data;
}

std::vector<OpExample> axis_index_check_examples(ExampleRng& rng) {
  return examples::calls(3, [&](int, OpExample& e) {
    const int64_t limit = examples::pick(rng, 1, 6);
    e.inputs = {examples::ids(rng, examples::shape(rng, 0, 3), limit)};
    e.attrs.set("limit", limit);
    e.attrs.set("of", std::string("gather"));
    e.label = fmt::format("limit {}", limit);
    e.grad = false;
  });
}

// ---- shared by gather and scatter_add ----

// The shape with a 1 inserted before axis `at`.
Shape with_one(Shape s, int64_t at) {
  s.insert(s.begin() + at, Dim(1));
  return s;
}

// The checked index, and the [..., K, N, ...] mask index == position (N at axis a + 1).
Value index_mask(ExpandCtx& x, Value index, int64_t a, int64_t extent, std::string_view op) {
  const Value idx = x.op(OpKind::AxisIndexCheck, {index}, {{"limit", extent}, {"of", std::string(op)}});
  const Shape& is = x.type(idx).shape;
  const Value ones = x.op(OpKind::BroadcastTo, {x.number(1, DType::F32)}, {{"shape", Shape{Dim(extent)}}});
  const Value run = x.op(OpKind::Cumsum, {ones}, {{"axis", int64_t{0}}});
  const Value pos = x.op(OpKind::Cast, {x.op(OpKind::Sub, {run, x.number(1, DType::F32)})}, {{"dtype", DType::I32}});
  Shape ps(is.size() + 1, Dim(1));
  ps[static_cast<size_t>(a) + 1] = Dim(extent);
  const Value col = x.op(OpKind::Reshape, {pos}, {{"shape", ps}});
  const Value iu = x.op(OpKind::Reshape, {idx}, {{"shape", with_one(is, a + 1)}});
  return x.op(OpKind::Eq, {iu, col});
}

// v cut down to `to` along every axis where it is longer (the part the index covers).
Value cut_to(ExpandCtx& x, Value v, const Shape& to) {
  for (size_t d = 0; d < to.size(); ++d)
    if (x.type(v).shape[d] != to[d])
      v = x.op(OpKind::Slice, {v}, {{"axis", static_cast<int64_t>(d)}, {"start", int64_t{0}}, {"end", *to[d].as_const()}});
  return v;
}

// Checks index (i32, x's rank, within `bound` on every axis but `axis`, or on all with
// with all_axes) and no larger than `bound`, which `bound_what` names.
bool check_index(InferCtx& ctx, std::string_view op, const TensorType& x, const TensorType& index, int index_input,
                 const TensorType& bound, const char* bound_what, bool all_axes) {
  if (index.dtype != DType::I32 || index.rank() != x.rank())
    return ctx.fail(fmt::format("{}: the index must be an i32 tensor of the rank of {} ({}), got {}", op, x.str(),
                                x.rank(), index.str()), index_input), false;
  const int64_t axis = ctx.attrs.i("axis");
  for (int d = 0; d < x.rank(); ++d) {
    if (d == axis && !all_axes) continue;
    const Dim& i = index.shape[static_cast<size_t>(d)];
    const Dim& b = bound.shape[static_cast<size_t>(d)];
    const auto iv = i.as_const(), bv = b.as_const();
    if (i == b || (iv && bv && *iv <= *bv)) continue;
    return ctx.fail(fmt::format("{}: index {} is larger than {} {} along axis {}", op, index.str(), bound_what,
                                bound.str(), d), index_input), false;
  }
  return true;
}

bool gather_axis(InferCtx& ctx, std::string_view op, const TensorType& x) {
  if (!is_float(x.dtype) || x.rank() == 0)
    return ctx.fail(fmt::format("{} expects a float tensor with an axis, got {}", op, x.str()), 0), false;
  int64_t axis = ctx.attrs.i("axis");
  if (!normalize_axis(axis, x.rank()))
    return ctx.fail_attr(fmt::format("{}: axis {} is out of range for {} (rank {})", op, ctx.attrs.i("axis"), x.str(),
                                     x.rank()), "axis"), false;
  ctx.attrs.set("axis", axis);
  if (!x.shape[static_cast<size_t>(axis)].as_const())
    return ctx.fail_attr(fmt::format("{}: the extent of axis {} of {} must be known when the model is compiled", op,
                                     axis, x.str()), "axis"), false;
  return true;
}

// Calls f(e, at) for every element e of `index` with the position `at` it names in a
// tensor of shape `of`: e's coordinates, but the index's value along `axis` (a value
// outside the axis is the user's error).
template <typename F>
void index_walk(const RefTensor& index, const std::vector<int64_t>& of, int64_t axis, std::string_view op, F f) {
  const int64_t n = of[static_cast<size_t>(axis)];
  for (int64_t e = 0; e < index.numel(); ++e) {
    int64_t rest = e, flat = 0, stride = 1;
    for (size_t d = of.size(); d-- > 0;) {
      const int64_t coord = rest % index.shape[d];
      rest /= index.shape[d];
      int64_t c = coord;
      if (static_cast<int64_t>(d) == axis) {
        const double v = index[e];
        if (v < 0 || v >= static_cast<double>(n))
          throw UserError(fmt::format("{}: index {} is out of range for an axis of extent {}", op, v, n));
        c = static_cast<int64_t>(v);
      }
      flat += c * stride;
      stride *= of[d];
    }
    f(e, flat);
  }
}

// ---- gather ----

void infer_gather(InferCtx& ctx) {
  const TensorType& x = ctx.input(0);
  if (!gather_axis(ctx, "gather", x)) return;
  if (!check_index(ctx, "gather", x, ctx.input(1), 1, x, "the input", false)) return;
  ctx.out = {TensorType{x.dtype, ctx.input(1).shape}};
}

void ref_gather(RefCtx& c) {
  const RefTensor& x = c.input(0);
  index_walk(c.input(1), x.shape, c.attrs().i("axis"), "gather", [&](int64_t e, int64_t from) { c.out[0][e] = x[from]; });
}

Value expand_gather(ExpandCtx& x) {
  const int64_t a = x.attrs.i("axis");
  const Shape& is = x.type(x.input(1)).shape;
  Shape cut = x.type(x.input(0)).shape;
  const int64_t n = *cut[static_cast<size_t>(a)].as_const();
  for (size_t d = 0; d < cut.size(); ++d)
    if (static_cast<int64_t>(d) != a) cut[d] = is[d];
  const Value xs = cut_to(x, x.input(0), cut);
  const Value mask = index_mask(x, x.input(1), a, n, "gather");
  const Value xu = x.op(OpKind::Reshape, {xs}, {{"shape", with_one(cut, a)}});
  const Value picked = x.op(OpKind::Where, {mask, xu, x.number(0, x.type(xs).dtype)});
  return x.op(OpKind::Sum, {picked}, {{"axes", Ints{a + 1}}});
}

// Indices with repeats, on every axis, and an index smaller than x on the other axes.
std::vector<OpExample> gather_examples(ExampleRng& rng) {
  return examples::calls(6, [&](int rep, OpExample& e) {
    const std::vector<int64_t> s = examples::shape(rng, 1, 3, 1, 5);
    const auto rank = static_cast<int64_t>(s.size());
    const int64_t axis = examples::pick(rng, -rank, rank - 1), a = axis < 0 ? axis + rank : axis;
    std::vector<int64_t> is = s;
    for (size_t d = 0; d < is.size(); ++d)
      is[d] = static_cast<int64_t>(d) == a ? examples::pick(rng, 1, 6) : rep % 2 ? examples::pick(rng, 1, s[d]) : s[d];
    e.inputs = {examples::values(rng, DType::F32, s, Domain{-2, 2}), examples::ids(rng, is, s[static_cast<size_t>(a)])};
    e.attrs.set("axis", axis);
    e.label = fmt::format("{} axis {}, index {}", RefTensor(DType::F32, s).shape_str(), axis, e.inputs[1]->shape_str());
  });
}

// ---- scatter_add ----

void infer_scatter_add(InferCtx& ctx) {
  const TensorType& x = ctx.input(0);
  const TensorType& src = ctx.input(2);
  if (!gather_axis(ctx, "scatter_add", x)) return;
  if (src.dtype != x.dtype || src.rank() != x.rank())
    return ctx.fail(fmt::format("scatter_add: src must be a {} tensor of rank {}, got {}", dtype_name(x.dtype), x.rank(),
                                src.str()), 2);
  if (!check_index(ctx, "scatter_add", x, ctx.input(1), 1, x, "the input", false) ||
      !check_index(ctx, "scatter_add", x, ctx.input(1), 1, src, "src", true))
    return;
  ctx.out = {x};
}

void ref_scatter_add(RefCtx& c) {
  const RefTensor& src = c.input(2);
  const RefTensor& index = c.input(1);
  c.out[0].data = c.input(0).data;
  index_walk(index, c.input(0).shape, c.attrs().i("axis"), "scatter_add", [&](int64_t e, int64_t to) {
    int64_t rest = e, from = 0, stride = 1;  // element e of the index, in src's layout
    for (size_t d = index.shape.size(); d-- > 0;) {
      from += (rest % index.shape[d]) * stride;
      rest /= index.shape[d];
      stride *= src.shape[d];
    }
    c.out[0][to] += src[from];
  });
}

Value expand_scatter_add(ExpandCtx& x) {
  const int64_t a = x.attrs.i("axis");
  const Shape& is = x.type(x.input(1)).shape;
  const Shape& xs = x.type(x.input(0)).shape;
  const int64_t n = *xs[static_cast<size_t>(a)].as_const();
  const Value src = cut_to(x, x.input(2), is);
  const Value mask = index_mask(x, x.input(1), a, n, "scatter_add");
  const Value su = x.op(OpKind::Reshape, {src}, {{"shape", with_one(is, a + 1)}});
  const Value parts = x.op(OpKind::Where, {mask, su, x.number(0, x.type(src).dtype)});
  Value summed = x.op(OpKind::Sum, {parts}, {{"axes", Ints{a}}});
  Ints pads;  // torch's order: (before, after) from the last axis back
  bool any = false;
  for (size_t d = xs.size(); d-- > 0;) {
    const int64_t more = static_cast<int64_t>(d) == a || xs[d] == is[d] ? 0 : *xs[d].as_const() - *is[d].as_const();
    pads.push_back(0);
    pads.push_back(more);
    any = any || more > 0;
  }
  if (any) summed = x.op(OpKind::Pad, {summed}, {{"pads", pads}});
  return x.op(OpKind::Add, {x.input(0), summed});
}

std::vector<OpExample> scatter_add_examples(ExampleRng& rng) {
  return examples::calls(6, [&](int rep, OpExample& e) {
    const std::vector<int64_t> s = examples::shape(rng, 1, 3, 1, 5);
    const auto rank = static_cast<int64_t>(s.size());
    const int64_t axis = examples::pick(rng, -rank, rank - 1), a = axis < 0 ? axis + rank : axis;
    std::vector<int64_t> is = s, ss;
    for (size_t d = 0; d < is.size(); ++d)
      is[d] = static_cast<int64_t>(d) == a ? examples::pick(rng, 1, 6) : rep % 2 ? examples::pick(rng, 1, s[d]) : s[d];
    for (size_t d = 0; d < is.size(); ++d) ss.push_back(is[d] + (rep % 3 == 2 ? examples::pick(rng, 0, 2) : 0));
    e.inputs = {examples::values(rng, DType::F32, s, Domain{-2, 2}), examples::ids(rng, is, s[static_cast<size_t>(a)]),
                examples::values(rng, DType::F32, ss, Domain{-2, 2})};
    e.attrs.set("axis", axis);
    e.label = fmt::format("{} axis {}, index {}, src {}", RefTensor(DType::F32, s).shape_str(), axis,
                          e.inputs[1]->shape_str(), e.inputs[2]->shape_str());
  });
}

// ---- arange ----

int64_t arange_count(double start, double end, double step) { return static_cast<int64_t>(std::ceil((end - start) / step)); }

void infer_arange(InferCtx& ctx) {
  const double end = ctx.attrs.f("end"), start = ctx.attrs.f("start"), step = ctx.attrs.f("step");
  for (const char* k : {"end", "start", "step"}) ctx.attrs.set(k, ctx.attrs.f(k));
  if (!std::isfinite(start) || !std::isfinite(end) || !std::isfinite(step) || step == 0)
    return ctx.fail_attr(fmt::format("arange: start {}, end {} and step {} must be finite and step non-zero", start, end,
                                     step), "step");
  const int64_t n = arange_count(start, end, step);
  if (n < 1)
    return ctx.fail_attr(fmt::format("arange: no values from start {} up to end {} with step {} (the first argument "
                                     "is the end: arange(end, start = 0, step = 1))", start, end, step), "end");
  if (n > (int64_t{1} << 24))
    return ctx.fail_attr(fmt::format("arange: {} values are more than the 2^24 it counts exactly", n), "end");
  const DType t = ctx.attrs.dtype("dtype");
  if (t != DType::F32 && t != DType::I32)
    return ctx.fail_attr(fmt::format("arange: dtype must be f32 or i32, got {}", dtype_name(t)), "dtype");
  if (t == DType::I32 && (start != std::floor(start) || step != std::floor(step)))
    return ctx.fail_attr(fmt::format("arange: an i32 range needs an integer start and step, got {} and {}", start, step),
                         "dtype");
  ctx.out = {TensorType{t, {Dim(n)}}};
}

void ref_arange(RefCtx& c) {
  const double start = c.attrs().f("start"), step = c.attrs().f("step");
  for (int64_t i = 0; i < c.out[0].numel(); ++i) c.out[0][i] = start + step * static_cast<double>(i);
}

// start + step * i in f32 (i counted by a running sum of ones, exact below 2^24).
Value expand_arange(ExpandCtx& x) {
  const Value ones = x.op(OpKind::BroadcastTo, {x.number(1, DType::F32)}, {{"shape", x.out.shape}});
  const Value i = x.op(OpKind::Sub, {x.op(OpKind::Cumsum, {ones}, {{"axis", int64_t{0}}}), x.number(1, DType::F32)});
  const Value v = x.op(OpKind::Add, {x.op(OpKind::Mul, {i, x.number(x.attrs.f("step"), DType::F32)}),
                                     x.number(x.attrs.f("start"), DType::F32)});
  return x.out.dtype == DType::F32 ? v : x.op(OpKind::Cast, {v}, {{"dtype", DType::I32}});
}

std::vector<OpExample> arange_examples(ExampleRng& rng) {
  return examples::calls(5, [&](int rep, OpExample& e) {
    const double start = rep == 0 ? 0 : static_cast<double>(examples::pick(rng, -5, 5));
    const double step = rep == 3 ? -2 : rep == 4 ? 0.5 : static_cast<double>(examples::pick(rng, 1, 3));
    const double end = start + step * static_cast<double>(examples::pick(rng, 1, 7)) - step * 0.5;
    e.attrs.set("end", end);
    e.attrs.set("start", start);
    e.attrs.set("step", step);
    e.attrs.set("dtype", rep == 2 ? DType::I32 : DType::F32);
    e.label = fmt::format("start {} end {} step {}{}", start, end, step, rep == 2 ? " i32" : "");
    e.grad = false;
  });
}

}  // namespace

void register_gather_composites(OpRegistry& r) {
  r.def(OpKind::AxisIndexCheck).internal().signature("ids: tensor, limit: int, of: str")
      .fusion(FusionKind::Elementwise).infer(infer_axis_index_check).reference(ref_axis_index_check).math("x")
      .pointwise([](const double* in, const Attrs&) { return in[0]; })  // the values; the range check is the reference's
      .no_grad("its values are integer positions").examples(axis_index_check_examples)
      .index_operand({0, -1, 0, "limit", "positions along the axis it indexes", "", "of"})
      .summary("i32 positions unchanged, each in [0, limit): the check behind gather's and scatter_add's index");
  r.def(OpKind::Gather).signature("x: tensor, axis: int, index: tensor")
      .infer(infer_gather).reference(ref_gather).composite(expand_gather).examples(gather_examples)
      .summary("out[i][j][k] = x[i][index[i][j][k]][k] for axis 1 (as torch.gather): the index has x's rank and is no "
               "larger on the other axes; the indexed axis must be known at compile time (a masked sum, K x N per line)");
  r.def(OpKind::ScatterAdd).signature("x: tensor, axis: int, index: tensor, src: tensor")
      .infer(infer_scatter_add).reference(ref_scatter_add).composite(expand_scatter_add).examples(scatter_add_examples)
      .summary("x with src added at the index's positions along an axis (as torch.Tensor.scatter_add: out[i][index[i]"
               "[j][k]][k] += src[i][j][k] for axis 1; repeats add up); the indexed axis must be known at compile time");
  r.def(OpKind::Arange).signature("end: float, start: float = 0.0, step: float = 1.0, dtype: dtype = f32")
      .infer(infer_arange).reference(ref_arange).composite(expand_arange).examples(arange_examples)
      .summary("the values start, start + step, ... before end, f32 (or i32), as torch.arange(start, end, step); "
               "arange(T) is 0..T-1 (its first argument is the end)");
}

}  // namespace modelc
