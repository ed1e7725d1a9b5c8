// topk: the k largest (or smallest) values along an axis and their i32 positions, as
// torch.topk (sorted): two results, `values, indices = topk(x, k)`.
//
// Built from k rounds of a masked arg-max: each round takes the first position holding the
// best value among those not yet taken, so ties come out in the order of their positions
// (torch leaves the order of ties unspecified). A NaN counts as larger than every number,
// as in torch: topk puts NaNs first and topk(largest = false) last. Each value is picked
// with `where`, so its gradient reaches x at its position only (torch's). The expansion
// grows with k (about fifteen ops a round, on lines of the axis's extent N), so k is at
// most 64 and the axis's extent must be known when the model is compiled.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include "compiler/ir/op_examples.h"
#include "compiler/ir/op_registry.h"

namespace modelc {
namespace {

constexpr int64_t kMaxK = 64;
constexpr double kInf = std::numeric_limits<double>::infinity();

void infer_topk(InferCtx& ctx) {
  const TensorType& x = ctx.input(0);
  if (!is_float(x.dtype) || x.rank() == 0)
    return ctx.fail("topk expects a float tensor with an axis, got " + x.str(), 0);
  int64_t axis = ctx.attrs.i("axis");
  if (!normalize_axis(axis, x.rank()))
    return ctx.fail_attr(fmt::format("topk: axis {} is out of range for {} (rank {})", ctx.attrs.i("axis"), x.str(),
                                     x.rank()), "axis");
  ctx.attrs.set("axis", axis);
  const std::optional<int64_t> n = x.shape[static_cast<size_t>(axis)].as_const();
  if (!n) return ctx.fail_attr(fmt::format("topk: the extent of axis {} of {} must be known when the model is compiled", axis, x.str()), "axis");
  const int64_t k = ctx.attrs.i("k");
  if (k < 1 || k > *n || k > kMaxK)
    return ctx.fail_attr(fmt::format("topk: k must be in [1, {}] (the axis's extent, at most {}), got {}", std::min(*n, kMaxK),
                                     kMaxK, k), "k");
  TensorType v = x;
  v.shape[static_cast<size_t>(axis)] = Dim(k);
  TensorType i = v;
  i.dtype = DType::I32;
  ctx.out = {v, i};
}

// The order topk takes: NaN beyond every number, ties by position.
bool before(double a, int64_t ia, double b, int64_t ib, bool largest) {
  const bool na = std::isnan(a), nb = std::isnan(b);
  if (na || nb) return na && nb ? ia < ib : largest ? na : nb;
  if (a != b) return largest ? a > b : a < b;
  return ia < ib;
}

void ref_topk(RefCtx& c) {
  const RefTensor& x = c.input(0);
  const auto axis = static_cast<size_t>(c.attrs().i("axis"));
  const int64_t k = c.attrs().i("k");
  const bool largest = c.attrs().b("largest");
  int64_t outer = 1, inner = 1;
  for (size_t d = 0; d < x.shape.size(); ++d) (d < axis ? outer : inner) *= d == axis ? 1 : x.shape[d];
  const int64_t n = x.shape[axis];
  std::vector<int64_t> order(static_cast<size_t>(n));
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t q = 0; q < inner; ++q) {
      const auto at = [&](int64_t s) { return x[(o * n + s) * inner + q]; };
      for (int64_t s = 0; s < n; ++s) order[static_cast<size_t>(s)] = s;
      // a total order (ties broken by position), so any sort gives the one answer
      std::sort(order.begin(), order.end(), [&](int64_t a, int64_t b) { return before(at(a), a, at(b), b, largest); });
      for (int64_t j = 0; j < k; ++j) {
        const int64_t out = (o * k + j) * inner + q, s = order[static_cast<size_t>(j)];
        c.out[0][out] = at(s);
        c.out[1][out] = static_cast<double>(s);
      }
    }
}

// One round: the first position, among those not taken, of a NaN (largest) or of the best
// number, or of a NaN once no number is left (smallest); positions are f32 columns.
Value expand_topk(ExpandCtx& x) {
  const Value in = x.input(0);
  const int64_t axis = x.attrs.i("axis"), k = x.attrs.i("k");
  const bool largest = x.attrs.b("largest");
  const Shape& s = x.type(in).shape;
  const int64_t n = *s[static_cast<size_t>(axis)].as_const();
  const auto f = [&](double v) { return x.number(v, DType::F32); };
  const DType t = x.type(in).dtype;
  Shape ps(s.size(), Dim(1));
  ps[static_cast<size_t>(axis)] = Dim(n);
  const Value ones = x.op(OpKind::BroadcastTo, {f(1)}, {{"shape", Shape{Dim(n)}}});
  const Value run = x.op(OpKind::Cumsum, {ones}, {{"axis", int64_t{0}}});
  const Value pos = x.op(OpKind::Reshape, {x.op(OpKind::Sub, {run, f(1)})}, {{"shape", ps}});
  const Value nan = x.op(OpKind::Ne, {in, in});
  const Value fill = x.number(largest ? -kInf : kInf, t);
  // A NaN's key sorts before (largest) or after (smallest) every number's position.
  const Value nan_key = x.op(OpKind::Add, {pos, f(largest ? -static_cast<double>(n) : static_cast<double>(n))});
  const Value numbers = x.op(OpKind::Where, {nan, fill, in});
  Value taken;  // f32, 1 where taken
  std::vector<Value> values, indices;
  const auto reduce = [&](OpKind op, Value v) { return x.op(op, {v}, {{"axes", Ints{axis}}, {"keepdims", true}}); };
  for (int64_t j = 0; j < k; ++j) {
    const Value free = j == 0 ? Value{} : x.op(OpKind::Lt, {taken, f(0.5)});
    const Value clean = j == 0 ? numbers : x.op(OpKind::Where, {free, numbers, fill});
    const Value best = reduce(largest ? OpKind::Max : OpKind::Min, clean);
    Value key = x.op(OpKind::Where, {x.op(OpKind::Eq, {clean, best}), pos, f(kInf)});
    key = x.op(OpKind::Where, {nan, nan_key, key});
    if (j > 0) key = x.op(OpKind::Where, {free, key, f(kInf)});
    const Value first = reduce(OpKind::Min, key);
    // Back from a NaN's key to its position.
    const Value shifted = x.op(largest ? OpKind::Lt : OpKind::Ge, {first, f(largest ? 0 : static_cast<double>(n))});
    const Value at = x.op(OpKind::Where, {shifted, x.op(OpKind::Sub, {first, f(largest ? -static_cast<double>(n) : static_cast<double>(n))}), first});
    const Value hit = x.op(OpKind::Eq, {pos, at});
    values.push_back(reduce(OpKind::Sum, x.op(OpKind::Where, {hit, in, x.number(0, t)})));
    indices.push_back(x.op(OpKind::Cast, {at}, {{"dtype", DType::I32}}));
    const Value mark = x.op(OpKind::Cast, {hit}, {{"dtype", DType::F32}});
    taken = j == 0 ? mark : x.op(OpKind::Add, {taken, mark});
  }
  const auto joined = [&](std::vector<Value>& v) { return v.size() == 1 ? v[0] : x.op(OpKind::Concat, std::move(v), {{"axis", axis}}); };
  const Value idx = joined(indices);
  x.more = {idx};
  return joined(values);
}

// Values on a grid (ties), with NaN and infinities in some lines, on every axis.
std::vector<OpExample> topk_examples(ExampleRng& rng) {
  return examples::calls(6, [&](int rep, OpExample& e) {
    const std::vector<int64_t> s = examples::shape(rng, 1, 3, 1, 6);
    const auto rank = static_cast<int64_t>(s.size());
    const int64_t axis = examples::pick(rng, -rank, rank - 1);
    const int64_t n = s[static_cast<size_t>(axis < 0 ? axis + rank : axis)];
    e.inputs = {examples::values(rng, DType::F32, s, Domain{-1, 1, rep % 2 ? 0.5 : 0})};
    e.attrs.set("axis", axis);
    e.attrs.set("k", examples::pick(rng, 1, n));
    e.attrs.set("largest", rep < 4);
    e.label = fmt::format("{} k {} axis {}{}", RefTensor(DType::F32, s).shape_str(), e.attrs.i("k"), axis,
                          rep < 4 ? "" : ", smallest");
    e.grad = rep % 2 == 0;  // ties make the picked position jump under a finite difference
  });
}

}  // namespace

void register_topk_composite(OpRegistry& r) {
  r.def(OpKind::Topk).signature("x: tensor, k: int, axis: int = -1, largest: bool = true")
      .infer(infer_topk).reference(ref_topk).composite(expand_topk).examples(topk_examples)
      .summary("the k largest (largest = false: smallest) values along an axis, sorted, and their i32 positions, "
               "as torch.topk: `values, indices = topk(x, k)`; ties in position order, NaN above every number; k "
               "at most 64 and the axis's extent known at compile time");
}

}  // namespace modelc
