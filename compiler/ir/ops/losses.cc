// The losses of torch.nn.functional, as composite ops (OpInfo::expand): each is built from
// elementwise ops and a reduction where it is called, so it fuses and differentiates as its
// parts do, and its reference below, written apart, is what the expansion is checked
// against (tests/conformance). cross_entropy and nll_loss, the class-label losses, are in
// compiler/ir/ops/losses_class.cc.
//
// The input and the target must have one shape: PyTorch broadcasts a target [B] against an
// input [B, 1] with a warning, and the resulting [B, B] loss is almost always a bug.
// reduction: "mean" (over every element, the default), "sum", or "none" (the loss of each
// element, the input's shape); kl_div also takes "batchmean" (the sum over the first dim's
// size, the mathematically correct KL divergence, which PyTorch recommends).
#include <cmath>
#include <limits>

#include <fmt/format.h>

#include "compiler/ir/op_examples.h"
#include "compiler/ir/op_registry.h"

namespace modelc {
namespace {

// A loss's element at input x and target t, in double.
// w: the weight there (1 without one); pw: the pos_weight there (null without one).
using LossFn = double (*)(double x, double t, const Attrs& a, double w, const double* pw);

bool valid_reduction(const std::string& r, bool batchmean) {
  return r == "mean" || r == "sum" || r == "none" || (batchmean && r == "batchmean");
}

// input, target of one float type and shape; optional weights (inputs 2, 3) of that type
// that broadcast to it.
void infer_loss(InferCtx& ctx, std::string_view name, bool batchmean) {
  const TensorType& x = ctx.input(0);
  const TensorType& t = ctx.input(1);
  if (!is_float(x.dtype)) return ctx.fail(fmt::format("{} expects a floating-point input, got {}", name, x.str()), 0);
  if (t.dtype != x.dtype)
    return ctx.fail(fmt::format("{}: the target is {}, the input {}: they must have one dtype", name, t.str(), x.str()),
                    1);
  if (t.shape != x.shape)
    return ctx.fail(fmt::format("{}: the target {} does not have the input's shape {} (PyTorch would broadcast them, "
                                "with a warning, into a loss over every pair; reshape one to the other)",
                                name, t.str(), x.str()), 1);
  for (int i = 2; i < static_cast<int>(ctx.in.size()); ++i) {
    if (!ctx.has_input(i)) continue;
    const TensorType& w = ctx.input(i);
    std::string why;
    if (w.dtype != x.dtype || broadcast_shapes(w.shape, x.shape, &why) != x.shape)
      return ctx.fail(fmt::format("{}: the weight {} must have the input's dtype and broadcast to its shape {}", name,
                                  w.str(), x.str()), i);
  }
  const std::string& r = ctx.attrs.s("reduction");
  if (!valid_reduction(r, batchmean))
    return ctx.fail_attr(fmt::format("{}: reduction \"{}\" is not one of \"mean\", \"sum\", \"none\"{}", name, r,
                                     batchmean ? ", \"batchmean\"" : ""), "reduction");
  if (batchmean && r == "batchmean" && x.rank() == 0)
    return ctx.fail_attr(fmt::format("{}: reduction \"batchmean\" needs an input with a batch dim, got {}", name, x.str()),
                         "reduction");
  ctx.out = {r == "none" ? x : TensorType{x.dtype, {}}};
}

// The elementwise loss, then the reduction, in double.
void ref_loss(RefCtx& c, LossFn f) {
  const RefTensor& x = c.input(0);
  const RefTensor& t = c.input(1);
  const RefTensor* w = c.in.size() > 2 ? c.in[2] : nullptr;
  const RefTensor* pw = c.in.size() > 3 ? c.in[3] : nullptr;
  const std::string& r = c.attrs().s("reduction");
  const bool each = r == "none";
  double total = 0;
  for (int64_t i = 0; i < x.numel(); ++i) {
    const double wi = w ? (*w)[broadcast_index(x.shape, w->shape, i)] : 1.0;
    const double pi = pw ? (*pw)[broadcast_index(x.shape, pw->shape, i)] : 0.0;
    const double v = f(x[i], t[i], c.attrs(), wi, pw ? &pi : nullptr);
    if (each) c.out[0][i] = v;
    total += v;
  }
  if (each) return;
  if (r == "mean") total /= static_cast<double>(x.numel());  // 0/0 = NaN when empty, as PyTorch
  if (r == "batchmean") total /= static_cast<double>(x.shape[0]);
  c.out[0][0] = total;
}

// The expansion's reduction of the elementwise loss `v`.
Value reduce(ExpandCtx& x, Value v) {
  const std::string& r = x.attrs.s("reduction");
  if (r == "none") return v;  // the elementwise loss, already a node of the expansion
  if (r == "sum") return x.op(OpKind::Sum, {v});
  if (r == "mean") return x.op(OpKind::Mean, {v});
  // batchmean: the sum over the batch size, which may be symbolic: the mean over the batch
  // axis of the sums of the others.
  const int rank = x.type(v).rank();
  Ints rest;
  for (int d = 1; d < rank; ++d) rest.push_back(d);
  const Value rows = rest.empty() ? v : x.op(OpKind::Sum, {v}, {{"axes", rest}});
  return x.op(OpKind::Mean, {rows});
}

Value diff(ExpandCtx& x) { return x.op(OpKind::Sub, {x.input(0), x.input(1)}); }
Value num(ExpandCtx& x, double v) { return x.number(v, x.out.dtype); }

Value expand_mse(ExpandCtx& x) {
  const Value d = diff(x);
  return reduce(x, x.op(OpKind::Mul, {d, d}));
}

Value expand_l1(ExpandCtx& x) { return reduce(x, x.op(OpKind::Abs, {diff(x)})); }

// |d| < beta: d^2 / (2 beta), else |d| - beta / 2 (l1 for beta 0); huber is delta times it.
Value smooth_l1(ExpandCtx& x, double beta, double scale) {
  const Value d = diff(x), ad = x.op(OpKind::Abs, {d});
  if (beta == 0) return x.op(OpKind::Mul, {ad, num(x, scale)});
  const Value quad = x.op(OpKind::Mul, {x.op(OpKind::Mul, {d, d}), num(x, scale * 0.5 / beta)});
  const Value lin = x.op(OpKind::Mul, {x.op(OpKind::Sub, {ad, num(x, 0.5 * beta)}), num(x, scale)});
  return x.op(OpKind::Where, {x.op(OpKind::Lt, {ad, num(x, beta)}), quad, lin});
}
Value expand_smooth_l1(ExpandCtx& x) { return reduce(x, smooth_l1(x, x.attrs.f("beta"), 1)); }
Value expand_huber(ExpandCtx& x) {
  const double delta = x.attrs.f("delta");
  return reduce(x, smooth_l1(x, delta, delta));
}

Value weighted(ExpandCtx& x, Value v) { return x.has_input(2) ? x.op(OpKind::Mul, {v, x.input(2)}) : v; }

// -(t log x + (1 - t) log(1 - x)), each log at least -100 (as PyTorch, so that x = 0 or 1
// gives a large finite loss rather than infinity).
Value expand_bce(ExpandCtx& x) {
  auto clamped_log = [&](Value v) { return x.op(OpKind::Maximum, {x.op(OpKind::Log, {v}), num(x, -100)}); };
  const Value t = x.input(1);
  const Value one_minus_t = x.op(OpKind::Sub, {num(x, 1), t});
  const Value a = x.op(OpKind::Mul, {t, clamped_log(x.input(0))});
  const Value b = x.op(OpKind::Mul, {one_minus_t, clamped_log(x.op(OpKind::Sub, {num(x, 1), x.input(0)}))});
  return reduce(x, weighted(x, x.op(OpKind::Neg, {x.op(OpKind::Add, {a, b})})));
}

// (1 - t) x + (1 + (p - 1) t) softplus(-x): smooth everywhere (its gradient sigmoid(x) - t
// is exact at x = 0 too) and without overflow for any x.
Value expand_bce_logits(ExpandCtx& x) {
  const Value z = x.input(0), t = x.input(1);
  const Value sp = x.op(OpKind::Softplus, {x.op(OpKind::Neg, {z})});
  Value coeff = num(x, 1);
  if (x.has_input(3))
    coeff = x.op(OpKind::Add, {coeff, x.op(OpKind::Mul, {x.op(OpKind::Sub, {x.input(3), num(x, 1)}), t})});
  const Value lin = x.op(OpKind::Mul, {x.op(OpKind::Sub, {num(x, 1), t}), z});
  return reduce(x, weighted(x, x.op(OpKind::Add, {lin, x.op(OpKind::Mul, {coeff, sp})})));
}

// PyTorch's xlogy(t, t) - t x: t log t is 0 where t = 0 (the log of 1 there, so that
// neither the value nor the gradient is NaN); log_target: e^t (t - x).
Value expand_kl(ExpandCtx& x) {
  const Value in = x.input(0), t = x.input(1);
  if (x.attrs.b("log_target"))
    return reduce(x, x.op(OpKind::Mul, {x.op(OpKind::Exp, {t}), x.op(OpKind::Sub, {t, in})}));
  const Value safe = x.op(OpKind::Where, {x.op(OpKind::Eq, {t, num(x, 0)}), num(x, 1), t});
  const Value tlogt = x.op(OpKind::Mul, {t, x.op(OpKind::Log, {safe})});
  return reduce(x, x.op(OpKind::Sub, {tlogt, x.op(OpKind::Mul, {t, in})}));
}

// The references, in double.
double ref_mse(double x, double t, const Attrs&, double, const double*) { return (x - t) * (x - t); }
double ref_l1(double x, double t, const Attrs&, double, const double*) { return std::fabs(x - t); }
double ref_smooth_l1_at(double d, double beta) {
  d = std::fabs(d);
  if (std::isnan(d)) return d;
  return d < beta ? 0.5 * d * d / beta : d - 0.5 * beta;
}
double ref_smooth_l1(double x, double t, const Attrs& a, double, const double*) { return ref_smooth_l1_at(x - t, a.f("beta")); }
double ref_huber(double x, double t, const Attrs& a, double, const double*) {
  return a.f("delta") * ref_smooth_l1_at(x - t, a.f("delta"));
}
double ref_bce(double x, double t, const Attrs&, double w, const double*) {
  auto lg = [](double v) { return std::isnan(v) ? v : std::max(std::log(v), -100.0); };
  return -w * (t * lg(x) + (1 - t) * lg(1 - x));
}
// Without pos_weight the coefficient is 1, not 1 + 0 t (NaN for an infinite t).
double ref_bce_logits(double x, double t, const Attrs&, double w, const double* p) {
  // log(1 + e^-x) written to stay finite for large |x|.
  const double sp = -x > 20 ? -x : std::log1p(std::exp(-x));
  return w * ((1 - t) * x + (p ? 1 + (*p - 1) * t : 1.0) * sp);
}
double ref_kl(double x, double t, const Attrs& a, double, const double*) {
  if (a.b("log_target")) return std::exp(t) * (t - x);
  const double xlogy = t == 0 ? 0.0 : t * std::log(t);  // NaN for a NaN or negative t
  return xlogy - t * x;
}

// Calls on shapes of rank 0 to 3 in every reduction, inputs and targets from the domains.
ExampleFn loss_examples(Domain input, Domain target, std::vector<std::pair<std::string, double>> floats,
                        bool batchmean = false, int weights = 0) {
  return [=](ExampleRng& rng) {
    std::vector<OpExample> out;
    std::vector<std::string> reductions = {"mean", "sum", "none"};
    if (batchmean) reductions.push_back("batchmean");
    for (size_t rep = 0; rep < reductions.size() + 2; ++rep) {
      const std::string& r = reductions[rep % reductions.size()];
      const std::vector<int64_t> s = examples::shape(rng, r == "batchmean" ? 1 : 0, 3);
      OpExample e;
      e.inputs = {examples::values(rng, DType::F32, s, input), examples::values(rng, DType::F32, s, target)};
      for (int k = 0; k < weights; ++k) {
        if (examples::pick(rng, 0, 1)) e.inputs.push_back(examples::values(rng, DType::F32, examples::broadcastable_to(rng, s), Domain{0.2, 2}));
        else e.inputs.push_back(std::nullopt);
      }
      e.attrs.set("reduction", r);
      std::string label = fmt::format("{} {}", RefTensor(DType::F32, s).shape_str(), r);
      for (const auto& [name, hi] : floats) {
        const double v = rep == 0 ? hi : std::uniform_real_distribution<double>(0.2, hi)(rng);
        e.attrs.set(name, v);
        label += fmt::format(", {} {:.3g}", name, v);
      }
      e.label = label;
      out.push_back(std::move(e));
    }
    return out;
  };
}

void def_loss(OpRegistry& r, OpKind k, std::string sig, LossFn ref, ExpandFn expand, ExampleFn ex, std::string summary,
              bool batchmean = false) {
  const std::string name = r.info(k).name;  // not op_name: the registry is being built
  r.def(k)
      .signature(sig)
      .infer([name, batchmean](InferCtx& ctx) { infer_loss(ctx, name, batchmean); })
      .reference([ref](RefCtx& c) { ref_loss(c, ref); })
      .composite(std::move(expand))
      .examples(std::move(ex))
      .summary(std::move(summary));
}

// ---- cosine_embedding_loss: 1 - cos(x1, x2) where y = 1, max(0, cos - margin) where y = -1 ----

// x1, x2 [..., D] of one float type, y [...] of that type or i32; [...] for "none".
void infer_cosine_embedding(InferCtx& ctx) {
  const TensorType& a = ctx.input(0);
  const TensorType& b = ctx.input(1);
  const TensorType& y = ctx.input(2);
  if (!is_float(a.dtype) || a.rank() == 0)
    return ctx.fail("cosine_embedding_loss expects float vectors [..., D] (the last axis is the vector), got " + a.str(), 0);
  if (b != a) return ctx.fail(fmt::format("cosine_embedding_loss: input2 {} must have input1's type {}", b.str(), a.str()), 1);
  const Shape pairs(a.shape.begin(), a.shape.end() - 1);
  if ((y.dtype != a.dtype && y.dtype != DType::I32) || y.shape != pairs)
    return ctx.fail(fmt::format("cosine_embedding_loss: the target must be {} (1 or -1 per pair; or i32), got {}",
                                TensorType{a.dtype, pairs}.str(), y.str()), 2);
  const std::string& r = ctx.attrs.s("reduction");
  if (!valid_reduction(r, false))
    return ctx.fail_attr(fmt::format("cosine_embedding_loss: reduction \"{}\" is not one of \"mean\", \"sum\", \"none\"", r),
                         "reduction");
  ctx.out = {TensorType{a.dtype, r == "none" ? pairs : Shape{}}};
}

// PyTorch's: the squared norms each plus 1e-12 (so that a zero vector gives cos 0, not NaN).
constexpr double kCosEps = 1e-12;

Value expand_cosine_embedding(ExpandCtx& x) {
  const int64_t last = static_cast<int64_t>(x.type(x.input(0)).rank()) - 1;
  auto dot = [&](Value a, Value b) { return x.op(OpKind::Sum, {x.op(OpKind::Mul, {a, b})}, {{"axes", Ints{last}}}); };
  const Value a = x.input(0), b = x.input(1);
  const Value na = x.op(OpKind::Add, {dot(a, a), num(x, kCosEps)}), nb = x.op(OpKind::Add, {dot(b, b), num(x, kCosEps)});
  const Value cos = x.op(OpKind::Div, {dot(a, b), x.op(OpKind::Sqrt, {x.op(OpKind::Mul, {na, nb})})});
  Value y = x.input(2);
  if (x.type(y).dtype != x.out.dtype) y = x.op(OpKind::Cast, {y}, {{"dtype", x.out.dtype}});
  const Value zero = num(x, 0);
  const Value pos = x.op(OpKind::Where, {x.op(OpKind::Eq, {y, num(x, 1)}), x.op(OpKind::Sub, {num(x, 1), cos}), zero});
  const Value hinge = x.op(OpKind::Maximum, {x.op(OpKind::Sub, {cos, num(x, x.attrs.f("margin"))}), zero});
  const Value neg = x.op(OpKind::Where, {x.op(OpKind::Eq, {y, num(x, -1)}), hinge, zero});
  return reduce(x, x.op(OpKind::Add, {pos, neg}));
}

void ref_cosine_embedding(RefCtx& c) {
  const RefTensor& a = c.input(0);
  const RefTensor& b = c.input(1);
  const RefTensor& y = c.input(2);
  const int64_t D = a.shape.back(), pairs = y.numel();
  const std::string& r = c.attrs().s("reduction");
  double total = 0;
  for (int64_t i = 0; i < pairs; ++i) {
    double ab = 0, aa = kCosEps, bb = kCosEps;
    for (int64_t k = 0; k < D; ++k) {
      ab += a[i * D + k] * b[i * D + k];
      aa += a[i * D + k] * a[i * D + k];
      bb += b[i * D + k] * b[i * D + k];
    }
    const double cos = ab / std::sqrt(aa * bb);
    const double h = cos - c.attrs().f("margin");
    const double hinge = std::isnan(h) || h > 0 ? h : 0.0;  // as torch's clamp_min: NaN stays NaN
    const double v = y[i] == 1 ? 1 - cos : y[i] == -1 ? hinge : 0.0;
    if (r == "none") c.out[0][i] = v;
    total += v;
  }
  if (r != "none") c.out[0][0] = r == "mean" ? total / static_cast<double>(pairs) : total;
}

std::vector<OpExample> cosine_embedding_examples(ExampleRng& rng) {
  const char* reductions[] = {"mean", "sum", "none"};
  return examples::calls(6, [&](int rep, OpExample& e) {
    std::vector<int64_t> s = examples::shape(rng, 1, 3);
    std::vector<int64_t> pairs(s.begin(), s.end() - 1);
    RefTensor y = examples::values(rng, DType::F32, pairs, Domain{0, 1, 1});
    for (double& v : y.data) v = v > 0 ? 1 : -1;
    if (rep == 5) y = examples::values(rng, DType::I32, pairs, Domain{-1, 1, 2});
    e.inputs = {examples::values(rng, DType::F32, s, Domain{-2, 2}), examples::values(rng, DType::F32, s, Domain{-2, 2}), y};
    e.attrs.set("reduction", std::string(reductions[rep % 3]));
    e.attrs.set("margin", rep < 2 ? 0.0 : 0.1 * static_cast<double>(examples::pick(rng, -5, 5)));
    e.label = fmt::format("{} {}, margin {:.1f}{}", RefTensor(DType::F32, s).shape_str(), reductions[rep % 3],
                          e.attrs.f("margin"), rep == 5 ? ", i32 target" : "");
  });
}

}  // namespace

void register_loss_ops(OpRegistry& r) {
  const Domain any{-3, 3}, prob{0.02, 0.98}, unit{0, 1};
  def_loss(r, OpKind::MseLoss, "input: tensor, target: tensor, reduction: str = \"mean\"", ref_mse, expand_mse,
           loss_examples(any, any, {}), "(input - target)^2, reduced (reduction: \"mean\", \"sum\" or \"none\")");
  def_loss(r, OpKind::L1Loss, "input: tensor, target: tensor, reduction: str = \"mean\"", ref_l1, expand_l1,
           loss_examples(any, any, {}), "|input - target|, reduced; its gradient where they are equal is 0");
  def_loss(r, OpKind::SmoothL1Loss, "input: tensor, target: tensor, beta: float = 1.0, reduction: str = \"mean\"",
           ref_smooth_l1, expand_smooth_l1, loss_examples(any, any, {{"beta", 2.0}}),
           "0.5 d^2 / beta where |d| < beta, else |d| - 0.5 beta (d = input - target; beta 0: l1), reduced");
  def_loss(r, OpKind::HuberLoss, "input: tensor, target: tensor, delta: float = 1.0, reduction: str = \"mean\"",
           ref_huber, expand_huber, loss_examples(any, any, {{"delta", 2.0}}),
           "0.5 d^2 where |d| < delta, else delta (|d| - 0.5 delta) (d = input - target), reduced");
  def_loss(r, OpKind::BceLoss, "input: tensor, target: tensor, weight: tensor? = none, reduction: str = \"mean\"",
           ref_bce, expand_bce, loss_examples(prob, unit, {}, false, 1),
           "-w (t log x + (1 - t) log(1 - x)) for probabilities x, each log at least -100 (as PyTorch), reduced");
  def_loss(r, OpKind::BceWithLogits,
           "input: tensor, target: tensor, weight: tensor? = none, pos_weight: tensor? = none, reduction: str = \"mean\"",
           ref_bce_logits, expand_bce_logits, loss_examples(Domain{-6, 6}, unit, {}, false, 2),
           "bce_loss(sigmoid(input), target) computed stably from logits; pos_weight scales the positive term, reduced");
  def_loss(r, OpKind::KlDiv, "input: tensor, target: tensor, reduction: str = \"mean\", log_target: bool = false",
           ref_kl, expand_kl, loss_examples(Domain{-3, 0}, Domain{0, 1}, {}, true),
           "target (log target - input) for log-probabilities input (log_target: target is log-probabilities too); "
           "t log t is 0 where t is 0; reduction also \"batchmean\" (the KL divergence: the sum over the batch size)",
           true);
  r.def(OpKind::CosineEmbeddingLoss)
      .signature("input1: tensor, input2: tensor, target: tensor, margin: float = 0.0, reduction: str = \"mean\"")
      .infer(infer_cosine_embedding).reference(ref_cosine_embedding).composite(expand_cosine_embedding)
      .examples(cosine_embedding_examples)
      .summary("1 - cos(input1, input2) where target is 1, max(0, cos - margin) where it is -1, 0 elsewhere; cos over "
               "the last axis with PyTorch's 1e-12 on each squared norm; reduced");
}

}  // namespace modelc
