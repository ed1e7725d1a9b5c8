// The class-label losses of torch.nn.functional: cross_entropy and nll_loss, as composite ops
// (OpInfo::expand), with PyTorch's class `weight`, `ignore_index` (-100 by default),
// `label_smoothing`, `reduction` and, for cross_entropy, class-probability targets. The
// class axis is the last one (PyTorch's is dim 1: transpose an [N, C, d...] input first).
//
// cross_entropy with class indices, no weight, no smoothing and the mean is one kernel (the
// internal cross_entropy of compiler/ir/ops/nn.cc, which skips ignored targets); every other
// call is built from log_softmax, one_hot, where and sums over the positions, its targets
// passing through index_check. Either op is an index operand: the compiler records its
// limit and ignored value on the input the targets come from, so that data is checked when
// it is loaded (compiler/lowered/index_bounds.h); a bad target the checks cannot see (one
// computed in the model) makes the loss NaN, and the reference refuses it (a UserError).
//
// PyTorch's definitions (aten/src/ATen/native/LossNLL.cpp), per position i with target t_i,
// w_i = weight[t_i] (1 without a weight) and 0 where t_i is ignored:
//   nll_i    = -w_i logp_i[t_i]
//   smooth_i = -sum_c weight[c] logp_i[c]        (0 where ignored)
//   loss_i   = (1 - eps) nll_i + eps / C smooth_i
//   mean     = sum_i loss_i / sum_i w_i           (0/0 = NaN when every target is ignored)
// and for probability targets p (the logits' shape): loss_i = -sum_c weight[c] p'_ic logp_ic
// with p' = (1 - eps) p + eps / C, and the mean over positions.
#include <cmath>
#include <limits>

#include <fmt/format.h>

#include "compiler/ir/op_examples.h"
#include "compiler/ir/op_registry.h"

namespace modelc {
namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

// ---- index_check: the identity on i32 class labels, whose values the compiler checks ----

void infer_index_check(InferCtx& ctx) {
  const TensorType& t = ctx.input(0);
  if (t.dtype != DType::I32) return ctx.fail("index_check expects i32 indices, got " + t.str(), 0);
  if (ctx.attrs.i("limit") < 1) return ctx.fail_attr(fmt::format("index_check: limit {} is not positive", ctx.attrs.i("limit")), "limit");
  ctx.out = {t};
}

void ref_index_check(RefCtx& c) {
  const RefTensor& t = c.input(0);
  const int64_t limit = c.attrs().i("limit"), ignore = c.attrs().i("ignore_index");
  for (int64_t i = 0; i < t.numel(); ++i) check_class_target(c.attrs().s("of"), static_cast<int64_t>(t[i]), limit, ignore);
  c.out[0].data = t.data;
}

std::vector<OpExample> index_check_examples(ExampleRng& rng) {
  return examples::calls(3, [&](int rep, OpExample& e) {
    const int64_t limit = examples::pick(rng, 1, 6), ignore = rep == 0 ? 0 : -100;
    RefTensor t = examples::ids(rng, examples::shape(rng, 0, 2), limit);
    for (double& v : t.data)
      if (rep == 2 && examples::pick(rng, 0, 1)) v = static_cast<double>(ignore);
    e.label = fmt::format("limit {}, ignore_index {}", limit, ignore);
    e.inputs = {t};
    e.attrs.set("limit", limit);
    e.attrs.set("ignore_index", ignore);
    e.attrs.set("of", std::string("cross_entropy"));
    e.grad = false;
  });
}

// ---- the shape rule of both losses ----

bool index_targets(const TensorType& t) { return t.dtype == DType::I32; }

// input [..., C] (logits or log-probabilities), target i32 [...] (or, with probs, the
// input's type), weight [C]; the result f32, [...] for reduction "none".
void infer_class_loss(InferCtx& ctx, std::string_view name, bool probs) {
  const TensorType& x = ctx.input(0);
  const TensorType& t = ctx.input(1);
  if (!is_float(x.dtype)) return ctx.fail(fmt::format("{} expects floating-point scores, got {}", name, x.str()), 0);
  if (x.rank() == 0)
    return ctx.fail(fmt::format("{} needs scores with a class axis (the last), got {}", name, x.str()), 0);
  const Dim& classes = x.shape.back();
  const Shape positions(x.shape.begin(), x.shape.end() - 1);
  const bool soft = probs && t.dtype == x.dtype && t.shape == x.shape;
  if (!soft && !(index_targets(t) && t.shape == positions))
    return ctx.fail(fmt::format("{}: the targets must be i32 class indices {}{} for scores {}, got {}", name,
                                TensorType{DType::I32, positions}.str(),
                                probs ? fmt::format(" or class probabilities {}", x.str()) : "", x.str(), t.str()), 1);
  if (ctx.has_input(2)) {
    const TensorType& w = ctx.input(2);
    if (w.dtype != x.dtype || w.shape != Shape{classes})
      return ctx.fail(fmt::format("{}: the class weight must be {} (one per class), got {}", name,
                                  TensorType{x.dtype, {classes}}.str(), w.str()), 2);
  }
  const std::string& r = ctx.attrs.s("reduction");
  if (r != "mean" && r != "sum" && r != "none")
    return ctx.fail_attr(fmt::format("{}: reduction \"{}\" is not one of \"mean\", \"sum\", \"none\"", name, r), "reduction");
  const double eps = probs ? ctx.attrs.f("label_smoothing") : 0.0;
  if (!(eps >= 0 && eps <= 1))
    return ctx.fail_attr(fmt::format("{}: label_smoothing must be in [0, 1], got {}", name, attr_str(AttrValue(eps))), "label_smoothing");
  if (soft && ctx.attrs.i("ignore_index") >= 0)
    return ctx.fail_attr(fmt::format("{}: ignore_index {} applies to class-index targets only, not to probabilities "
                                     "{}", name, ctx.attrs.i("ignore_index"), t.str()), "ignore_index");
  const bool one_kernel = !soft && !ctx.has_input(2) && eps == 0 && r == "mean";
  if (!one_kernel && !classes.is_const())
    return ctx.fail(fmt::format("{}: the class count {} of {} must be a constant for a weight, label smoothing, "
                                "probability targets or reduction \"{}\"", name, classes.str(), x.str(), r), 0);
  ctx.out = {TensorType{DType::F32, r == "none" ? positions : Shape{}}};
}

// ---- the expansions ----

Value num(ExpandCtx& x, double v) { return x.number(v, DType::F32); }
Value f32(ExpandCtx& x, Value v) { return x.type(v).dtype == DType::F32 ? v : x.op(OpKind::Cast, {v}, {{"dtype", DType::F32}}); }
Value sum_last(ExpandCtx& x, Value v) {
  return x.op(OpKind::Sum, {v}, {{"axes", Ints{static_cast<int64_t>(x.type(v).rank()) - 1}}});
}

// The loss of log-probabilities `logp` [..., C] (f32) at class-index targets, reduced.
Value index_loss(ExpandCtx& x, std::string_view name, Value logp) {
  const Shape& s = x.type(logp).shape;
  const int64_t classes = s.back().const_value(), ignore = x.attrs.i("ignore_index");
  const double eps = x.attrs.has("label_smoothing") ? x.attrs.f("label_smoothing") : 0.0;
  const Value t = x.op(OpKind::IndexCheck, {x.input(1)},
                       {{"limit", classes}, {"ignore_index", ignore}, {"of", std::string(name)}});
  const Value kept = x.op(OpKind::Ne, {t, x.number(static_cast<double>(ignore), DType::I32)});
  const Value hot = x.op(OpKind::Eq, {x.op(OpKind::OneHot, {t}, {{"classes", classes}}), num(x, 1)});
  // Picked with where, not multiplied by the one-hot row: a masked logit of -inf elsewhere
  // in the row must not make 0 * -inf.
  const Value zero = num(x, 0);
  const Value picked = sum_last(x, x.op(OpKind::Where, {hot, logp, zero}));
  Value w = x.has_input(2) ? sum_last(x, x.op(OpKind::Where, {hot, f32(x, x.input(2)), zero})) : num(x, 1);
  w = x.op(OpKind::Where, {kept, w, zero});
  Value loss = x.op(OpKind::Neg, {x.op(OpKind::Mul, {picked, w})});
  if (eps > 0) {
    const Value weighted = x.has_input(2) ? x.op(OpKind::Mul, {logp, f32(x, x.input(2))}) : logp;
    const Value smooth = x.op(OpKind::Neg, {sum_last(x, weighted)});
    loss = x.op(OpKind::Add, {x.op(OpKind::Mul, {loss, num(x, 1 - eps)}),
                              x.op(OpKind::Mul, {smooth, num(x, eps / static_cast<double>(classes))})});
  }
  loss = x.op(OpKind::Where, {kept, loss, zero});
  // A target outside [0, C) that is not ignored (one the data checks could not see): the
  // whole result is NaN, as the reference refuses it.
  const Value below = f32(x, x.op(OpKind::Lt, {t, x.number(0, DType::I32)}));
  const Value above = f32(x, x.op(OpKind::Ge, {t, x.number(static_cast<double>(classes), DType::I32)}));
  const Value outside = x.op(OpKind::Where, {kept, x.op(OpKind::Add, {below, above}), zero});
  const Value poison = x.op(OpKind::Where, {x.op(OpKind::Gt, {x.op(OpKind::Sum, {outside}), zero}), num(x, kNaN), zero});
  const std::string& r = x.attrs.s("reduction");
  if (r == "none") return x.op(OpKind::Add, {loss, poison});
  Value total = x.op(OpKind::Sum, {loss});
  if (r == "mean") total = x.op(OpKind::Div, {total, x.op(OpKind::Sum, {w})});
  return x.op(OpKind::Add, {total, poison});
}

// Probability targets: -sum_c weight[c] p'_c logp_c per position, mean over positions.
Value prob_loss(ExpandCtx& x, Value logp) {
  const int64_t classes = x.type(logp).shape.back().const_value();
  const double eps = x.attrs.f("label_smoothing");
  Value p = f32(x, x.input(1));
  if (eps > 0) p = x.op(OpKind::Add, {x.op(OpKind::Mul, {p, num(x, 1 - eps)}), num(x, eps / static_cast<double>(classes))});
  Value terms = x.op(OpKind::Mul, {logp, p});
  if (x.has_input(2)) terms = x.op(OpKind::Mul, {terms, f32(x, x.input(2))});
  const Value loss = x.op(OpKind::Neg, {sum_last(x, terms)});
  const std::string& r = x.attrs.s("reduction");
  if (r == "none") return loss;
  return x.op(r == "sum" ? OpKind::Sum : OpKind::Mean, {loss});
}

Value expand_cross_entropy(ExpandCtx& x) {
  const bool soft = !index_targets(x.type(x.input(1)));
  // The one kernel, whose own index operand records the limit (and names the parameter
  // the class count comes from).
  if (!soft && !x.has_input(2) && x.attrs.f("label_smoothing") == 0 && x.attrs.s("reduction") == "mean")
    return x.op(OpKind::CrossEntropy, {x.input(0), x.input(1)}, {{"ignore_index", x.attrs.i("ignore_index")}});
  const Value logp = x.op(OpKind::LogSoftmax, {f32(x, x.input(0))});
  return soft ? prob_loss(x, logp) : index_loss(x, "cross_entropy", logp);
}

Value expand_nll(ExpandCtx& x) { return index_loss(x, "nll_loss", f32(x, x.input(0))); }

// ---- the references, in double ----

void ref_class_loss(RefCtx& c, std::string_view name, bool logits) {
  const RefTensor& x = c.input(0);
  const RefTensor& t = c.input(1);
  const RefTensor* weight = c.in.size() > 2 ? c.in[2] : nullptr;
  const int64_t C = x.shape.back(), positions = C > 0 ? x.numel() / C : 0;
  const int64_t ignore = c.attrs().i("ignore_index");
  const double eps = c.attrs().has("label_smoothing") ? c.attrs().f("label_smoothing") : 0.0;
  const bool soft = t.shape == x.shape && t.dtype != DType::I32;
  const std::string& r = c.attrs().s("reduction");
  double total = 0, den = 0;
  std::vector<double> logp(static_cast<size_t>(C));
  for (int64_t i = 0; i < positions; ++i) {
    const int64_t base = i * C;
    double m = -std::numeric_limits<double>::infinity(), s = 0;
    if (logits) {
      for (int64_t k = 0; k < C; ++k) m = std::max(m, x[base + k]);
      for (int64_t k = 0; k < C; ++k) s += std::exp(x[base + k] - m);
    }
    for (int64_t k = 0; k < C; ++k) logp[static_cast<size_t>(k)] = logits ? x[base + k] - m - std::log(s) : x[base + k];
    auto wc = [&](int64_t k) { return weight ? (*weight)[k] : 1.0; };
    double loss = 0;
    if (soft) {
      for (int64_t k = 0; k < C; ++k)
        loss -= wc(k) * ((1 - eps) * t[base + k] + eps / static_cast<double>(C)) * logp[static_cast<size_t>(k)];
      den += 1;
    } else {
      const auto ti = static_cast<int64_t>(t[i]);
      check_class_target(name, ti, C, ignore);
      if (ti != ignore) {
        loss = -wc(ti) * logp[static_cast<size_t>(ti)];
        if (eps > 0) {  // as torch: no smoothing term at all without smoothing (a NaN weight elsewhere stays out)
          double smooth = 0;
          for (int64_t k = 0; k < C; ++k) smooth -= wc(k) * logp[static_cast<size_t>(k)];
          loss = (1 - eps) * loss + eps / static_cast<double>(C) * smooth;
        }
        den += wc(ti);
      }
    }
    if (r == "none") c.out[0][i] = loss;
    total += loss;
  }
  if (r == "sum") c.out[0][0] = total;
  if (r == "mean") c.out[0][0] = total / den;  // 0/0 = NaN: every target ignored (or none)
}

// ---- examples: every reduction, with and without a weight, ignored targets, smoothing ----

ExampleFn class_loss_examples(bool logits) {
  return [logits](ExampleRng& rng) {
    const char* reductions[] = {"mean", "sum", "none"};
    return examples::calls(logits ? 12 : 8, [&](int rep, OpExample& e) {
      std::vector<int64_t> pos = examples::shape(rng, rep % 4 == 3 ? 0 : 1, 2);
      const int64_t C = examples::pick(rng, 2, 6);
      std::vector<int64_t> xs = pos;
      xs.push_back(C);
      const bool soft = logits && rep >= 9;
      const std::string r = reductions[rep % 3];
      const int64_t ignore = rep % 5 == 4 && !soft ? 0 : -100;
      const bool weighted = rep % 2 == 1;
      const double eps = logits && rep % 4 >= 2 ? 0.1 * static_cast<double>(examples::pick(rng, 1, 4)) : 0.0;
      RefTensor x = examples::values(rng, DType::F32, xs, logits ? Domain{-3, 3} : Domain{-4, -0.1});
      RefTensor t = soft ? examples::values(rng, DType::F32, xs, Domain{0, 1}) : examples::ids(rng, pos, C);
      if (!soft)
        for (double& v : t.data)
          if (examples::pick(rng, 0, 3) == 0) v = static_cast<double>(ignore);
      e.inputs = {x, t};
      if (weighted) e.inputs.push_back(examples::values(rng, DType::F32, {C}, Domain{0.2, 2}));
      else e.inputs.push_back(std::nullopt);
      e.attrs.set("reduction", r);
      e.attrs.set("ignore_index", ignore);
      if (logits) e.attrs.set("label_smoothing", eps);
      e.label = fmt::format("{} {}{}{}, ignore_index {}, smoothing {:.1f}", RefTensor(DType::F32, xs).shape_str(), r,
                            soft ? ", probabilities" : "", weighted ? ", weight" : "", ignore, eps);
    });
  };
}

}  // namespace

void check_class_target(std::string_view op, int64_t t, int64_t classes, int64_t ignore) {
  if (t != ignore && (t < 0 || t >= classes))
    throw UserError(fmt::format("{}: target {} is out of range for {} classes (and is not the ignored index {})", op, t,
                                classes, ignore));
}

void register_class_loss_ops(OpRegistry& r) {
  r.def(OpKind::IndexCheck).internal().signature("ids: tensor, limit: int, ignore_index: int = -100, of: str = \"\"")
      .fusion(FusionKind::Elementwise).infer(infer_index_check).reference(ref_index_check).math("x")
      .pointwise([](const double* in, const Attrs&) { return in[0]; })  // the values; the range check is the reference's
      .no_grad("its values are integer class indices").examples(index_check_examples)
      .index_operand({0, -1, 0, "limit", "classes (the last dim of the scores)", "ignore_index", "of"})
      .summary("i32 class indices unchanged, each in [0, limit) or ignore_index: the check behind a loss's targets");
  const std::string common = "weight: tensor? = none, ignore_index: int = -100, reduction: str = \"mean\"";
  r.def(OpKind::CrossEntropyLoss)
      .signature("logits: tensor, targets: tensor, " + common + ", label_smoothing: float = 0.0")
      .infer([](InferCtx& c) { infer_class_loss(c, "cross_entropy", true); })
      .reference([](RefCtx& c) { ref_class_loss(c, "cross_entropy", true); })
      .composite(expand_cross_entropy).examples(class_loss_examples(true))
      .index_operand({1, 0, -1, "", "classes (the last dim of the logits)", "ignore_index"})
      .summary("-log_softmax(logits)[target] per position over the last axis, as torch's cross_entropy: class weight, "
               "ignore_index (-100), label_smoothing, or class-probability targets; reduced (the mean is over the "
               "weights of the targets not ignored); f32");
  r.def(OpKind::NllLoss)
      .signature("input: tensor, target: tensor, " + common)
      .infer([](InferCtx& c) { infer_class_loss(c, "nll_loss", false); })
      .reference([](RefCtx& c) { ref_class_loss(c, "nll_loss", false); })
      .composite(expand_nll).examples(class_loss_examples(false))
      .index_operand({1, 0, -1, "", "classes (the last dim of the input)", "ignore_index"})
      .summary("-input[target] for log-probabilities over the last axis, as torch's nll_loss: class weight, "
               "ignore_index (-100); reduced (the mean is over the weights of the targets not ignored); f32");
}

}  // namespace modelc
