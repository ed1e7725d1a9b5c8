// Composite normalisations and similarities: group_norm and rms_norm (torch.nn.functional's,
// with optional affine weights) and cosine_similarity, built from other ops where they are
// called and checked against the references below (tests/conformance (g)).
#include <algorithm>
#include <cmath>

#include <fmt/format.h>

#include "compiler/ir/op_examples.h"
#include "compiler/ir/op_registry.h"

namespace modelc {
namespace {

// ---- group_norm: x [N, C, ...], C split into `groups`; each group of each example is
// normalised to mean 0 and variance 1 (biased), then scaled and shifted per channel.

void infer_group_norm(InferCtx& ctx) {
  const TensorType& x = ctx.input(0);
  if (!is_float(x.dtype) || x.rank() < 2)
    return ctx.fail(fmt::format("group_norm expects a float tensor [N, C, ...], got {}", x.str()), 0);
  const int64_t g = ctx.attrs.i("groups");
  const Dim& c = x.shape[1];
  if (g < 1 || !c.is_const() || c.const_value() % g)
    return ctx.fail_attr(fmt::format("group_norm: {} groups do not divide the {} channels of {}", g, c.str(), x.str()),
                         "groups");
  for (int i = 1; i <= 2; ++i)
    if (ctx.has_input(i) && !(ctx.input(i) == TensorType{x.dtype, {c}}))
      return ctx.fail(fmt::format("group_norm: the {} must be {}[{}], got {}", i == 1 ? "weight" : "bias",
                                  dtype_name(x.dtype), c.str(), ctx.input(i).str()), i);
  if (ctx.attrs.f("eps") <= 0) return ctx.fail_attr("group_norm: eps must be positive", "eps");
  ctx.out = {x};
}

// The per-channel vector [C] reshaped to broadcast over x [N, C, ...]: [C, 1, ...].
Value per_channel(ExpandCtx& x, Value v) {
  Shape s = {x.out.shape[1]};
  for (size_t k = 2; k < x.out.shape.size(); ++k) s.push_back(Dim(1));
  return x.op(OpKind::Reshape, {v}, {{"shape", s}});
}

Value expand_group_norm(ExpandCtx& x) {
  const Shape& s = x.out.shape;
  const int64_t g = x.attrs.i("groups");
  Dim rest = Dim(s[1].const_value() / g);
  for (size_t k = 2; k < s.size(); ++k) rest = rest * s[k];
  const Value grouped = x.op(OpKind::Reshape, {x.input(0)}, {{"shape", Shape{s[0], Dim(g), rest}}});
  const Value n = x.op(OpKind::LayerNorm, {grouped, Value{}, Value{}}, {{"eps", x.attrs.f("eps")}});
  Value y = x.op(OpKind::Reshape, {n}, {{"shape", s}});
  if (x.has_input(1)) y = x.op(OpKind::Mul, {y, per_channel(x, x.input(1))});
  if (x.has_input(2)) y = x.op(OpKind::Add, {y, per_channel(x, x.input(2))});
  return y;
}

void ref_group_norm(RefCtx& c) {
  const RefTensor& x = c.input(0);
  const int64_t n = x.shape[0], ch = x.shape[1], g = c.attrs().i("groups");
  const int64_t inner = x.numel() / std::max<int64_t>(1, n * ch), per = ch / g * inner;
  const double eps = c.attrs().f("eps");
  for (int64_t b = 0; b < n; ++b)
    for (int64_t k = 0; k < g; ++k) {
      const int64_t at = (b * g + k) * per;
      double mean = 0, var = 0;
      for (int64_t i = 0; i < per; ++i) mean += x[at + i] / static_cast<double>(per);
      for (int64_t i = 0; i < per; ++i) var += (x[at + i] - mean) * (x[at + i] - mean) / static_cast<double>(per);
      for (int64_t i = 0; i < per; ++i) {
        const int64_t channel = (k * per + i) / inner;
        double v = (x[at + i] - mean) / std::sqrt(var + eps);
        if (c.in[1]) v *= (*c.in[1])[channel];
        if (c.in[2]) v += (*c.in[2])[channel];
        c.out[0][at + i] = v;
      }
    }
}

// ---- rms_norm over the last axis: x / sqrt(mean(x^2) + eps) * weight

void infer_rms_norm(InferCtx& ctx) {
  const TensorType& x = ctx.input(0);
  if (!is_float(x.dtype) || x.rank() < 1)
    return ctx.fail(fmt::format("rms_norm expects a float tensor with an axis, got {}", x.str()), 0);
  if (ctx.has_input(1) && !(ctx.input(1) == TensorType{x.dtype, {x.shape.back()}}))
    return ctx.fail(fmt::format("rms_norm: the weight must be {}[{}], got {}", dtype_name(x.dtype), x.shape.back().str(),
                                ctx.input(1).str()), 1);
  if (ctx.attrs.f("eps") <= 0) return ctx.fail_attr("rms_norm: eps must be positive", "eps");
  ctx.out = {x};
}

Value expand_rms_norm(ExpandCtx& x) {
  const Value in = x.input(0);
  const Value ms = x.op(OpKind::Mean, {x.op(OpKind::Mul, {in, in})}, {{"axes", Ints{-1}}, {"keepdims", true}});
  const Value r = x.op(OpKind::Rsqrt, {x.op(OpKind::Add, {ms, x.number(x.attrs.f("eps"), x.out.dtype)})});
  const Value y = x.op(OpKind::Mul, {in, r});
  return x.has_input(1) ? x.op(OpKind::Mul, {y, x.input(1)}) : y;
}

void ref_rms_norm(RefCtx& c) {
  const RefTensor& x = c.input(0);
  const int64_t len = x.shape.back(), rows = x.numel() / std::max<int64_t>(1, len);
  for (int64_t r = 0; r < rows; ++r) {
    double ms = 0;
    for (int64_t i = 0; i < len; ++i) ms += x[r * len + i] * x[r * len + i] / static_cast<double>(len);
    for (int64_t i = 0; i < len; ++i)
      c.out[0][r * len + i] = x[r * len + i] / std::sqrt(ms + c.attrs().f("eps")) * (c.in[1] ? (*c.in[1])[i] : 1.0);
  }
}

// ---- cosine_similarity along an axis: a.b / (max(|a|, eps) max(|b|, eps)), as PyTorch

void infer_cosine(InferCtx& ctx) {
  const TensorType& a = ctx.input(0);
  const TensorType& b = ctx.input(1);
  if (!is_float(a.dtype) || !(a == b))
    return ctx.fail(fmt::format("cosine_similarity needs two float tensors of one type, got {} and {}", a.str(), b.str()), 1);
  if (a.rank() < 1) return ctx.fail(fmt::format("cosine_similarity needs tensors with an axis, got {}", a.str()), 0);
  int64_t axis = ctx.attrs.i("axis");
  if (!normalize_axis(axis, a.rank()))
    return ctx.fail_attr(fmt::format("cosine_similarity: axis {} is out of range for {}", ctx.attrs.i("axis"), a.str()), "axis");
  ctx.attrs.set("axis", axis);
  TensorType t = a;
  t.shape.erase(t.shape.begin() + axis);
  ctx.out = {t};
}

Value expand_cosine(ExpandCtx& x) {
  const Ints axes = {x.attrs.i("axis")};
  const Value a = x.input(0), b = x.input(1);
  auto norm = [&](Value v) {
    const Value n = x.op(OpKind::Sqrt, {x.op(OpKind::Sum, {x.op(OpKind::Mul, {v, v})}, {{"axes", axes}})});
    return x.op(OpKind::Maximum, {n, x.number(x.attrs.f("eps"), x.out.dtype)});
  };
  const Value dot = x.op(OpKind::Sum, {x.op(OpKind::Mul, {a, b})}, {{"axes", axes}});
  return x.op(OpKind::Div, {dot, x.op(OpKind::Mul, {norm(a), norm(b)})});
}

void ref_cosine(RefCtx& c) {
  const RefTensor& a = c.input(0);
  const RefTensor& b = c.input(1);
  const auto axis = static_cast<size_t>(c.attrs().i("axis"));
  int64_t inner = 1;
  for (size_t k = axis + 1; k < a.shape.size(); ++k) inner *= a.shape[k];
  const int64_t len = a.shape[axis], outer = a.numel() / std::max<int64_t>(1, len * inner);
  const double eps = c.attrs().f("eps");
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t i = 0; i < inner; ++i) {
      double ab = 0, aa = 0, bb = 0;
      for (int64_t k = 0; k < len; ++k) {
        const int64_t at = (o * len + k) * inner + i;
        ab += a[at] * b[at];
        aa += a[at] * a[at];
        bb += b[at] * b[at];
      }
      c.out[0][o * inner + i] = ab / (std::max(std::sqrt(aa), eps) * std::max(std::sqrt(bb), eps));
    }
}

std::vector<OpExample> norm_examples(ExampleRng& rng, OpKind k) {
  return examples::calls(5, [&](int rep, OpExample& e) {
    const bool affine = rep % 2 == 0;
    if (k == OpKind::GroupNorm) {
      const int64_t g = examples::pick(rng, 1, 3), ch = g * examples::pick(rng, 1, 2);
      std::vector<int64_t> s = {examples::pick(rng, 1, 2), ch};
      for (int64_t d = examples::pick(rng, 0, 2); d > 0; --d) s.push_back(examples::pick(rng, 2, 3));
      e.inputs = {examples::values(rng, DType::F32, s, Domain{-3, 3})};
      e.inputs.push_back(affine ? std::optional(examples::values(rng, DType::F32, {ch}, Domain{0.5, 2})) : std::nullopt);
      e.inputs.push_back(affine ? std::optional(examples::values(rng, DType::F32, {ch}, Domain{-1, 1})) : std::nullopt);
      e.attrs.set("groups", g);
      e.label = fmt::format("{} groups {}{}", RefTensor(DType::F32, s).shape_str(), g, affine ? ", affine" : "");
    } else {
      const std::vector<int64_t> s = examples::shape(rng, 1, 3, 2, 5);
      e.inputs = {examples::values(rng, DType::F32, s, Domain{-3, 3})};
      if (k == OpKind::RmsNorm) {
        e.inputs.push_back(affine ? std::optional(examples::values(rng, DType::F32, {s.back()}, Domain{0.5, 2}))
                                  : std::nullopt);
      } else {
        e.inputs.push_back(examples::values(rng, DType::F32, s, Domain{-3, 3}));
        const auto rank = static_cast<int64_t>(s.size());
        e.attrs.set("axis", examples::pick(rng, -rank, rank - 1));
      }
      e.label = fmt::format("{}{}", RefTensor(DType::F32, s).shape_str(), affine ? ", weight" : "");
    }
  });
}

}  // namespace

void register_norm_composites(OpRegistry& r) {
  auto ex = [](OpKind k) { return [k](ExampleRng& rng) { return norm_examples(rng, k); }; };
  r.def(OpKind::GroupNorm).signature("x: tensor, groups: int, weight: tensor? = none, bias: tensor? = none, eps: float = 1e-5")
      .infer(infer_group_norm).reference(ref_group_norm).composite(expand_group_norm).examples(ex(OpKind::GroupNorm))
      .summary("torch.nn.functional.group_norm: the channels of x [N, C, ...] in groups, each group of each example "
               "normalised (biased variance), then weight and bias per channel");
  r.def(OpKind::RmsNorm).signature("x: tensor, weight: tensor? = none, eps: float = 1e-6").infer(infer_rms_norm)
      .reference(ref_rms_norm).composite(expand_rms_norm).examples(ex(OpKind::RmsNorm))
      .summary("x / sqrt(mean(x^2) + eps) over the last axis, times weight [C] (RMSNorm; PyTorch's eps default is "
               "the dtype's epsilon, 1e-6 here as in LLaMA)");
  r.def(OpKind::CosineSimilarity).signature("a: tensor, b: tensor, axis: int = -1, eps: float = 1e-8").infer(infer_cosine)
      .reference(ref_cosine).composite(expand_cosine).examples(ex(OpKind::CosineSimilarity))
      .summary("a.b / (max(|a|, eps) max(|b|, eps)) along an axis, as torch.nn.functional.cosine_similarity");
}

}  // namespace modelc
