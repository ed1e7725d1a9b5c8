// Composite ops other than the losses (compiler/ir/ops/losses.cc): reductions built from
// sum, mean and max (min, var, std, logsumexp), shape changes that are reshapes (squeeze,
// unsqueeze, flatten) or concatenations (stack), and selections (clamp, masked_fill). Each
// record has its own shape rule and a reference written apart from its expansion
// (OpInfo::expand), which tests/conformance checks the expansion against.
#include <algorithm>
#include <cmath>
#include <limits>

#include <fmt/format.h>

#include "compiler/ir/op_examples.h"
#include "compiler/ir/op_registry.h"

namespace modelc {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

// For each element of x, the flat index of its output element when `axes` (canonical) are
// reduced, and the number of elements each output element reduces.
std::vector<int64_t> groups_of(const RefTensor& x, const Ints& axes, int64_t& count) {
  std::vector<bool> reduced(x.shape.size(), false);
  for (int64_t a : axes) reduced[static_cast<size_t>(a)] = true;
  std::vector<int64_t> out(static_cast<size_t>(x.numel()));
  const std::vector<int64_t> st = x.strides();
  count = 1;
  for (size_t d = 0; d < x.shape.size(); ++d)
    if (reduced[d]) count *= x.shape[d];
  for (int64_t i = 0; i < x.numel(); ++i) {
    int64_t o = 0;
    for (size_t d = 0; d < x.shape.size(); ++d)
      if (!reduced[d]) o = o * x.shape[d] + (i / st[d]) % x.shape[d];
    out[static_cast<size_t>(i)] = o;
  }
  return out;
}

// The number of elements a reduction over `axes` of x reduces (nullopt when symbolic).
std::optional<int64_t> reduced_count(const TensorType& x, const Ints& axes) {
  int64_t n = 1;
  for (int64_t a : axes) {
    const Dim& d = x.shape.at(static_cast<size_t>(a));
    if (!d.is_const()) return std::nullopt;
    n *= d.const_value();
  }
  return n;
}

// ---- min, var, std, logsumexp ----

void ref_min(RefCtx& c) {
  int64_t count = 0;
  const auto group = groups_of(c.input(0), c.attrs().ints("axes"), count);
  std::fill(c.out[0].data.begin(), c.out[0].data.end(), kInf);
  for (int64_t i = 0; i < c.input(0).numel(); ++i) {
    double& acc = c.out[0][group[static_cast<size_t>(i)]];
    const double v = c.input(0)[i];
    if (std::isnan(v) || v < acc) acc = std::isnan(acc) ? acc : v;
  }
}

Value expand_min(ExpandCtx& x) {
  Attrs a = x.attrs;
  const Value m = x.op(OpKind::Max, {x.op(OpKind::Neg, {x.input(0)})}, std::move(a));
  return x.op(OpKind::Neg, {m});
}

void infer_var(InferCtx& ctx, std::string_view name) {
  infer_reduction(ctx, name, false);
  if (ctx.failed()) return;
  const int64_t correction = ctx.attrs.i("correction");
  if (correction < 0) return ctx.fail_attr(fmt::format("{}: correction must be >= 0, got {}", name, correction), "correction");
}

// sum((x - mean)^2) / max(N - correction, 0): 0/0 = NaN for a single element with
// correction 1, as PyTorch.
void ref_var(RefCtx& c, bool root) {
  const RefTensor& x = c.input(0);
  int64_t count = 0;
  const auto group = groups_of(x, c.attrs().ints("axes"), count);
  std::vector<double> mean(static_cast<size_t>(c.out[0].numel()), 0.0), sq(mean.size(), 0.0);
  for (int64_t i = 0; i < x.numel(); ++i) mean[static_cast<size_t>(group[static_cast<size_t>(i)])] += x[i];
  for (double& m : mean) m /= static_cast<double>(count);
  for (int64_t i = 0; i < x.numel(); ++i) {
    const double d = x[i] - mean[static_cast<size_t>(group[static_cast<size_t>(i)])];
    sq[static_cast<size_t>(group[static_cast<size_t>(i)])] += d * d;
  }
  const double divisor = std::max<double>(static_cast<double>(count - c.attrs().i("correction")), 0.0);
  for (size_t o = 0; o < sq.size(); ++o) {
    const double v = sq[o] / divisor;
    c.out[0][static_cast<int64_t>(o)] = root ? std::sqrt(v) : v;
  }
}

Value expand_var(ExpandCtx& x, bool root) {
  const Value in = x.input(0);
  const Ints& axes = x.attrs.ints("axes");
  const Value m = x.op(OpKind::Mean, {in}, {{"axes", axes}, {"keepdims", true}});
  const Value d = x.op(OpKind::Sub, {in, m});
  const Value s = x.op(OpKind::Sum, {x.op(OpKind::Mul, {d, d})}, {{"axes", axes}, {"keepdims", x.attrs.b("keepdims")}});
  const int64_t correction = x.attrs.i("correction");
  Value v;
  if (const std::optional<int64_t> n = reduced_count(x.type(in), axes)) {
    const int64_t divisor = std::max<int64_t>(*n - correction, 0);
    v = x.op(OpKind::Mul, {s, x.number(divisor > 0 ? 1.0 / static_cast<double>(divisor) : kInf, x.out.dtype)});
  } else {
    // A symbolic N (the batch): the sum of ones over the axes, known when the program runs.
    const Value ones = x.op(OpKind::BroadcastTo, {x.number(1, x.out.dtype)}, {{"shape", x.type(in).shape}});
    const Value count = x.op(OpKind::Sum, {ones}, {{"axes", axes}, {"keepdims", x.attrs.b("keepdims")}});
    const Value divisor = x.op(OpKind::Maximum, {x.op(OpKind::Sub, {count, x.number(static_cast<double>(correction), x.out.dtype)}),
                                                 x.number(0, x.out.dtype)});
    v = x.op(OpKind::Div, {s, divisor});
  }
  return root ? x.op(OpKind::Sqrt, {v}) : v;
}

// max + log(sum(exp(x - max))), with the max taken as 0 where it is infinite (all -inf: the
// result is -inf; a +inf: +inf) or NaN (NaN propagates through the sum).
void ref_logsumexp(RefCtx& c) {
  const RefTensor& x = c.input(0);
  int64_t count = 0;
  const auto group = groups_of(x, c.attrs().ints("axes"), count);
  std::vector<double> m(static_cast<size_t>(c.out[0].numel()), -kInf), s(m.size(), 0.0);
  for (int64_t i = 0; i < x.numel(); ++i) {
    double& acc = m[static_cast<size_t>(group[static_cast<size_t>(i)])];
    if (std::isnan(x[i]) || x[i] > acc) acc = std::isnan(acc) ? acc : x[i];
  }
  for (double& v : m)
    if (!std::isfinite(v)) v = 0;
  for (int64_t i = 0; i < x.numel(); ++i) {
    const auto o = static_cast<size_t>(group[static_cast<size_t>(i)]);
    s[o] += std::exp(x[i] - m[o]);
  }
  for (size_t o = 0; o < m.size(); ++o) c.out[0][static_cast<int64_t>(o)] = m[o] + std::log(s[o]);
}

Value expand_logsumexp(ExpandCtx& x) {
  const Value in = x.input(0);
  const Ints& axes = x.attrs.ints("axes");
  const DType t = x.out.dtype;
  const Value m = x.op(OpKind::Max, {in}, {{"axes", axes}, {"keepdims", true}});
  const Value finite = x.op(OpKind::Lt, {x.op(OpKind::Abs, {m}), x.number(kInf, t)});
  const Value shift = x.op(OpKind::Where, {finite, m, x.number(0, t)});
  const Value e = x.op(OpKind::Exp, {x.op(OpKind::Sub, {in, shift})});
  const Value s = x.op(OpKind::Sum, {e}, {{"axes", axes}, {"keepdims", x.attrs.b("keepdims")}});
  const Value back = x.attrs.b("keepdims") ? shift : x.op(OpKind::Reshape, {shift}, {{"shape", x.out.shape}});
  return x.op(OpKind::Add, {x.op(OpKind::Log, {s}), back});
}

// Reductions over random subsets of axes, with and without keepdims; distinct values (a
// tie is a kink of max's and min's gradients).
ExampleFn reduction_examples(bool correction) {
  return [correction](ExampleRng& rng) {
    return examples::calls(6, [&](int rep, OpExample& e) {
      // var and std: at least two elements (std's gradient at a zero variance is 0 / 0).
      const std::vector<int64_t> s = examples::shape(rng, rep == 0 && !correction ? 0 : 1, 4, correction ? 2 : 1, 5);
      Ints axes;
      for (int64_t d = 0; d < static_cast<int64_t>(s.size()); ++d)
        if (examples::pick(rng, 0, 1)) axes.push_back(d);
      const bool keep = examples::pick(rng, 0, 1);
      e.inputs = {examples::values(rng, DType::F32, s, Domain{-3, 3})};
      e.attrs.set("axes", axes);
      e.attrs.set("keepdims", keep);
      e.label = fmt::format("{}, axes {}{}", RefTensor(DType::F32, s).shape_str(), attr_str(axes), keep ? ", keepdims" : "");
      if (correction) {
        const int64_t k = rep % 3 == 2 ? 0 : 1;
        e.attrs.set("correction", k);
        e.label += fmt::format(", correction {}", k);
      }
    });
  };
}

void def_reduction(OpRegistry& r, OpKind k, std::string sig, InferFn infer, RefFn ref, ExpandFn expand, bool correction,
                   std::string summary) {
  const std::string name = r.info(k).name;  // not op_name: the registry is being built
  r.def(k).signature(sig).infer(infer ? std::move(infer) : [name](InferCtx& ctx) { infer_reduction(ctx, name, false); })
      .reference(std::move(ref)).composite(std::move(expand)).examples(reduction_examples(correction))
      .summary(std::move(summary));
}

}  // namespace

void register_shape_composites(OpRegistry& r);  // compiler/ir/ops/composite_shape.cc
void register_nn_composites(OpRegistry& r);     // compiler/ir/ops/composite_nn.cc
void register_index_composites(OpRegistry& r);  // compiler/ir/ops/composite_index.cc
void register_conv_composites(OpRegistry& r);   // compiler/ir/ops/composite_conv.cc
void register_gather_composites(OpRegistry& r); // compiler/ir/ops/composite_gather.cc
void register_topk_composite(OpRegistry& r);    // compiler/ir/ops/composite_topk.cc

void register_composite_ops(OpRegistry& r) {
  const std::string axes = "x: tensor, axes: ints = [], keepdims: bool = false";
  def_reduction(r, OpKind::Min, axes, nullptr, ref_min, expand_min, false,
                "the minimum over axes (all when none are given); NaN propagates; ties share the gradient");
  def_reduction(r, OpKind::Var, axes + ", correction: int = 1", [](InferCtx& c) { infer_var(c, "var"); },
                [](RefCtx& c) { ref_var(c, false); }, [](ExpandCtx& x) { return expand_var(x, false); }, true,
                "the variance over axes: sum((x - mean)^2) / (N - correction) (correction 1: unbiased, as torch.var)");
  def_reduction(r, OpKind::Std, axes + ", correction: int = 1", [](InferCtx& c) { infer_var(c, "std"); },
                [](RefCtx& c) { ref_var(c, true); }, [](ExpandCtx& x) { return expand_var(x, true); }, true,
                "the standard deviation over axes: sqrt(var(x, axes, correction))");
  def_reduction(r, OpKind::Logsumexp, axes, nullptr, ref_logsumexp, expand_logsumexp, false,
                "log(sum(exp(x))) over axes, without overflow (all -inf gives -inf)");
  register_shape_composites(r);
  register_nn_composites(r);
  register_index_composites(r);
  register_conv_composites(r);
  register_gather_composites(r);
  register_topk_composite(r);
}

}  // namespace modelc
