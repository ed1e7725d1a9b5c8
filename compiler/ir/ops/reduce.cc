// Reductions: sum, mean and max over a set of axes.
//
// The shape rule rewrites the attribute "axes" into its canonical form (sorted,
// non-negative, unique, and every axis when the call gave none), so that passes and
// backends read one form and never re-normalise. The reference accumulates in double.
#include <algorithm>
#include <cmath>
#include <limits>

#include <fmt/format.h>

#include "compiler/ir/op_registry.h"

namespace modelc {
namespace {

enum class Reduce { Sum, Mean, Max };

void infer_reduce(InferCtx& ctx, std::string_view name, bool int_ok) {
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

  double init = kind == Reduce::Max ? -std::numeric_limits<double>::infinity() : 0.0;
  std::fill(out.data.begin(), out.data.end(), init);
  std::vector<int64_t> idx(static_cast<size_t>(rank), 0);
  int64_t o = 0;
  for (int64_t i = 0; i < x.numel(); ++i) {
    double v = x[i];
    double& acc = out[o];
    if (kind != Reduce::Max) acc += v;
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

void def_reduce(OpRegistry& r, OpKind k, std::string name, Reduce kind, bool int_ok,
                std::string summary) {
  r.def(k)
      .signature("x: tensor, axes: ints = [], keepdims: bool = false")
      .fusion(FusionKind::Reduction)
      .infer([name, int_ok](InferCtx& ctx) { infer_reduce(ctx, name, int_ok); })
      .reference([kind](RefCtx& c) { ref_reduce(c, kind); })
      .summary(std::move(summary));
}

}  // namespace

void register_reduce_ops(OpRegistry& r) {
  def_reduce(r, OpKind::Sum, "sum", Reduce::Sum, true, "sum over axes (all when none are given)");
  def_reduce(r, OpKind::Mean, "mean", Reduce::Mean, false, "mean over axes (all when none are given)");
  def_reduce(r, OpKind::Max, "max", Reduce::Max, false,
             "maximum over axes (all when none are given); NaN propagates");
  // Sums of many low-precision values lose their small terms: autocast keeps them in f32.
  r.def(OpKind::Sum).autocast(AutocastPolicy::F32);
  r.def(OpKind::Mean).autocast(AutocastPolicy::F32);
}

}  // namespace modelc
