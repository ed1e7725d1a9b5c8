// Reductions: sum, mean, max and prod over a set of axes, and cumsum (a scan along one axis).
//
// The shape rule rewrites the attribute "axes" into its canonical form (sorted,
// non-negative, unique, and every axis when the call gave none), so that passes and
// backends read one form and never re-normalise. The reference accumulates in double.
#include <algorithm>
#include <cmath>
#include <limits>

#include <fmt/format.h>

#include "compiler/ir/grads/grad_util.h"
#include "compiler/ir/op_examples.h"
#include "compiler/ir/op_registry.h"

namespace modelc {
namespace {

enum class Reduce { Sum, Mean, Max, Prod };

}  // namespace

void infer_reduction(InferCtx& ctx, std::string_view name, bool int_ok) {
  const TensorType& x = ctx.input(0);
  if (!is_float(x.dtype) && !(int_ok && x.dtype == DType::I32))
    return ctx.fail(fmt::format("{} expects a floating-point{} tensor, got {}", name,
                                int_ok ? " or i32" : "", x.str()), 0);
  const Ints& given = ctx.attrs.ints("axes");
  std::vector<bool> reduced(static_cast<size_t>(x.rank()), given.empty());
  for (int64_t a : given) {
    int64_t axis = a;
    if (!normalize_axis(axis, x.rank()))
      return ctx.fail_attr(fmt::format("axis {} is out of range for {} (rank {})", a, x.str(), x.rank()), "axes");
    // A repeated axis is almost always a typo for another one; refuse rather than merge.
    if (reduced[static_cast<size_t>(axis)])
      return ctx.fail_attr(fmt::format("axis {} appears twice in axes {} for {}", axis,
                                       attr_str(given), x.str()), "axes");
    reduced[static_cast<size_t>(axis)] = true;
  }
  bool keepdims = ctx.attrs.b("keepdims");
  Ints axes;
  Shape out;
  for (int d = 0; d < x.rank(); ++d) {
    if (reduced[static_cast<size_t>(d)]) {
      axes.push_back(d);
      if (keepdims) out.push_back(Dim(1));
    } else {
      out.push_back(x.shape[static_cast<size_t>(d)]);
    }
  }
  ctx.attrs.set("axes", std::move(axes));
  ctx.out = {TensorType{x.dtype, std::move(out)}};
}

namespace {

void ref_reduce(RefCtx& c, Reduce kind) {
  const RefTensor& x = c.input(0);
  RefTensor& out = c.out[0];
  const Ints& axes = c.attrs().ints("axes");  // canonical: sorted, unique, non-negative
  const int rank = x.rank();
  std::vector<bool> reduced(static_cast<size_t>(rank), false);
  for (int64_t a : axes) reduced[static_cast<size_t>(a)] = true;

  // The output stride of each input dimension (0 for a reduced one), whether or not
  // keepdims left a 1 in its place.
  std::vector<int64_t> ostep(static_cast<size_t>(rank), 0);
  int64_t count = 1;
  {
    int64_t s = 1;
    for (int d = rank - 1; d >= 0; --d) {
      size_t du = static_cast<size_t>(d);
      if (reduced[du]) { count *= x.shape[du]; continue; }
      ostep[du] = s;
      s *= x.shape[du];
    }
  }

  double init = kind == Reduce::Max ? -std::numeric_limits<double>::infinity() : kind == Reduce::Prod ? 1.0 : 0.0;
  std::fill(out.data.begin(), out.data.end(), init);
  std::vector<int64_t> idx(static_cast<size_t>(rank), 0);
  int64_t o = 0;
  for (int64_t i = 0; i < x.numel(); ++i) {
    double v = x[i];
    double& acc = out[o];
    if (kind == Reduce::Prod) acc *= v;
    else if (kind != Reduce::Max) acc += v;
    else if (std::isnan(v) || v > acc) acc = std::isnan(acc) ? acc : v;  // NaN sticks
    for (int d = rank - 1; d >= 0; --d) {
      size_t du = static_cast<size_t>(d);
      ++idx[du];
      o += ostep[du];
      if (idx[du] < x.shape[du]) break;
      o -= ostep[du] * x.shape[du];
      idx[du] = 0;
    }
  }
  // An empty reduction gives 0/0 = NaN for mean, as numpy does.
  if (kind == Reduce::Mean)
    for (double& v : out.data) v /= static_cast<double>(count);
}

// Reductions over every subset of axes (none given: all), with and without keepdims, on
// shapes of rank 0 to 4; i32 too where the op takes it. max's inputs are distinct (a tie is
// a kink of its gradient). With `zeros`, the first two calls also hold one and two exact
// zeros in their first reduced group (prod's gradient there is no quotient y / x).
std::vector<OpExample> reduce_examples(ExampleRng& rng, bool int_ok, bool zeros = false) {
  std::vector<OpExample> out;
  for (int rep = 0; rep < 6; ++rep) {
    OpExample e;
    const std::vector<int64_t> s = examples::shape(rng, rep == 0 ? 0 : 1, 4);
    Ints axes;
    for (int64_t d = 0; d < static_cast<int64_t>(s.size()); ++d)
      if (examples::pick(rng, 0, 1)) axes.push_back(examples::pick(rng, 0, 1) ? d : d - static_cast<int64_t>(s.size()));
    const bool keep = examples::pick(rng, 0, 1);
    const DType t = int_ok && rep == 5 ? DType::I32 : DType::F32;
    // prod: magnitudes about 1 (products of hundreds of terms stay in range), either sign.
    e.inputs = {examples::values(rng, t, s, zeros ? Domain{0.5, 1.5, 0, true} : Domain{-3, 3})};
    e.attrs.set("axes", axes);
    e.attrs.set("keepdims", keep);
    e.label = fmt::format("{}{}, axes {}{}", dtype_name(t), RefTensor(t, s).shape_str(), attr_str(axes), keep ? ", keepdims" : "");
    if (zeros && rep < 2) {
      // Every axis reduced: the zeros land in one group whatever the shape.
      e.attrs.set("axes", Ints{});
      RefTensor& x = *e.inputs[0];
      x.data.front() = 0.0;
      if (rep == 1) x.data.back() = 0.0;
      e.label += fmt::format(", every axis, {} zero(s)", std::count(x.data.begin(), x.data.end(), 0.0));
    }
    e.grad = t == DType::F32;
    out.push_back(std::move(e));
  }
  return out;
}

void def_reduce(OpRegistry& r, OpKind k, std::string name, Reduce kind, bool int_ok, GradFn grad,
                std::string summary) {
  const bool zeros = kind == Reduce::Prod;
  r.def(k)
      .signature("x: tensor, axes: ints = [], keepdims: bool = false")
      .fusion(FusionKind::Reduction)
      .infer([name, int_ok](InferCtx& ctx) { infer_reduction(ctx, name, int_ok); })
      .reference([kind](RefCtx& c) { ref_reduce(c, kind); })
      .grad(std::move(grad))
      .examples([int_ok, zeros](ExampleRng& rng) { return reduce_examples(rng, int_ok, zeros); })
      .summary(std::move(summary));
}

// cumsum: x's type, axis canonicalised (non-negative).
void infer_cumsum(InferCtx& ctx) {
  const TensorType& x = ctx.input(0);
  if (!is_float(x.dtype)) return ctx.fail(fmt::format("cumsum expects a floating-point tensor, got {}", x.str()), 0);
  if (x.rank() == 0) return ctx.fail(fmt::format("cumsum needs a tensor with an axis, got {}", x.str()), 0);
  int64_t axis = ctx.attrs.i("axis");
  if (!normalize_axis(axis, x.rank()))
    return ctx.fail_attr(fmt::format("axis {} is out of range for {} (rank {})", ctx.attrs.i("axis"), x.str(), x.rank()),
                         "axis");
  ctx.attrs.set("axis", axis);
  ctx.out = {x};
}

// Running sums along the axis in double, from the start (or, reversed, from the end).
void ref_cumsum(RefCtx& c) {
  const RefTensor& x = c.input(0);
  RefTensor& out = c.out[0];
  const auto axis = static_cast<size_t>(c.attrs().i("axis"));
  const bool reverse = c.attrs().b("reverse");
  int64_t outer = 1, inner = 1;
  for (size_t d = 0; d < axis; ++d) outer *= x.shape[d];
  for (size_t d = axis + 1; d < x.shape.size(); ++d) inner *= x.shape[d];
  const int64_t len = x.shape[axis];
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t k = 0; k < inner; ++k) {
      double acc = 0;
      for (int64_t s = 0; s < len; ++s) {
        const int64_t at = (o * len + (reverse ? len - 1 - s : s)) * inner + k;
        acc += x[at];
        out[at] = acc;
      }
    }
}

// The gradient of a running sum is the running sum the other way: d out[j] / d x[i] is 1
// exactly where j is at or after i (reversed: before).
void cumsum_grad(GradCtx& c) {
  Attrs a = c.node.attrs;
  a.set("reverse", !c.node.attrs.b("reverse"));
  c.in_grads = {c.emit(OpKind::Cumsum, {grads::out_grad(c)}, std::move(a))};
}

std::vector<OpExample> cumsum_examples(ExampleRng& rng) {
  std::vector<OpExample> out;
  for (int rep = 0; rep < 6; ++rep) {
    OpExample e;
    const std::vector<int64_t> s = examples::shape(rng, 1, 4, 1, 6);
    const auto rank = static_cast<int64_t>(s.size());
    const int64_t axis = examples::pick(rng, -rank, rank - 1);
    const bool reverse = rep % 2;
    e.inputs = {examples::values(rng, DType::F32, s, Domain{-2, 2})};
    e.attrs.set("axis", axis);
    e.attrs.set("reverse", reverse);
    e.label = fmt::format("{} axis {}{}", RefTensor(DType::F32, s).shape_str(), axis, reverse ? ", reversed" : "");
    out.push_back(std::move(e));
  }
  return out;
}

}  // namespace

void register_reduce_ops(OpRegistry& r) {
  def_reduce(r, OpKind::Sum, "sum", Reduce::Sum, true, grads::sum, "the sum over axes (all when none are given)");
  def_reduce(r, OpKind::Mean, "mean", Reduce::Mean, false, grads::mean, "the mean over axes (all when none are given)");
  def_reduce(r, OpKind::Max, "max", Reduce::Max, false, grads::max,
             "the maximum over axes (all when none are given); NaN propagates; ties share the gradient");
  def_reduce(r, OpKind::Prod, "prod", Reduce::Prod, false, grads::prod,
             "the product over axes (all when none are given), multiplied in f64; its gradient is exact where x "
             "holds zeros (the product of the other elements, not y / x)");
  r.def(OpKind::Prod).autocast(AutocastPolicy::F32);
  // Sums of many low-precision values lose their small terms: autocast keeps them in f32.
  r.def(OpKind::Sum).autocast(AutocastPolicy::F32);
  r.def(OpKind::Mean).autocast(AutocastPolicy::F32);
  r.def(OpKind::Cumsum).signature("x: tensor, axis: int = -1, reverse: bool = false").fusion(FusionKind::Opaque)
      .library().infer(infer_cumsum).reference(ref_cumsum).grad(cumsum_grad).autocast(AutocastPolicy::F32)
      .examples(cumsum_examples)
      .summary("running sums along an axis: out[..., i, ...] = sum of x[..., j, ...] for j <= i (reverse: j >= i), "
               "added in order in f32");
}

}  // namespace modelc
