// Metrics to report in training and eval (any scalar output is reported by name, and may be
// the metric of early_stopping or plateau): accuracy, top_k_accuracy and mae, as composites.
//   accuracy(logits [..., C], labels i32 [...])  the share of positions whose first maximum
//                                                logit (argmax: a NaN counts as the maximum)
//                                                is the label, as (logits.argmax(-1) == labels)
//                                                .float().mean(); a label outside [0, C) is a miss
//   top_k_accuracy(logits, labels, k = 5)        the share of positions whose label is among
//                                                the k best: fewer than k classes score strictly
//                                                higher than it (ties count in its favour; a
//                                                label outside [0, C) is a miss); C must be known
//   mae(pred, target)                            the mean absolute error, l1_loss's mean
// accuracy and top_k_accuracy give f32 and have no gradient (argmax and comparisons have none).
#include <fmt/format.h>

#include <cmath>

#include "compiler/ir/op_examples.h"
#include "compiler/ir/op_registry.h"

namespace modelc {
namespace {

bool check_labels(InferCtx& c, const char* op) {
  const TensorType& x = c.input(0);
  const TensorType& y = c.input(1);
  if (!is_float(x.dtype) || x.rank() == 0) {
    c.fail(fmt::format("{}: logits must be a float tensor [..., classes], got {}", op, x.str()), 0);
    return false;
  }
  if (y.dtype != DType::I32 || y.rank() != x.rank() - 1 || !std::equal(y.shape.begin(), y.shape.end(), x.shape.begin())) {
    c.fail(fmt::format("{}: labels must be i32{} for logits {}, got {}", op,
                       shape_str(Shape(x.shape.begin(), x.shape.end() - 1)), x.str(), y.str()), 1);
    return false;
  }
  c.out = {TensorType{DType::F32, {}}};
  return true;
}

void infer_accuracy(InferCtx& c) { check_labels(c, "accuracy"); }

void infer_top_k(InferCtx& c) {
  if (!check_labels(c, "top_k_accuracy")) return;
  const std::optional<int64_t> classes = c.input(0).shape.back().as_const();
  if (!classes)
    return c.fail(fmt::format("top_k_accuracy: the class count of logits {} must be known when the model is compiled",
                              c.input(0).str()), 0);
  const int64_t k = c.attrs.i("k");
  if (k < 1 || k > *classes)
    return c.fail_attr(fmt::format("top_k_accuracy: k must be in [1, {}] (the classes), got {}", *classes, k), "k");
}

void infer_mae(InferCtx& c) {
  const TensorType& a = c.input(0);
  const TensorType& b = c.input(1);
  if (!is_float(a.dtype)) return c.fail("mae: pred must be a float tensor, got " + a.str(), 0);
  if (b != a) return c.fail(fmt::format("mae: target must be {} as pred is, got {}", a.str(), b.str()), 1);
  c.out = {TensorType{a.dtype, {}}};
}

// --- references ----------------------------------------------------------------------

// Calls hit(row, label) for each position and gives the mean of the hits.
template <class Hit>
void ref_hits(RefCtx& c, Hit hit) {
  const RefTensor& x = c.input(0);
  const RefTensor& y = c.input(1);
  const int64_t C = x.shape.back(), rows = C == 0 ? 0 : x.numel() / C;
  double hits = 0;
  for (int64_t r = 0; r < rows; ++r) {
    const auto label = static_cast<int64_t>(y[r]);
    hits += label >= 0 && label < C && hit(r * C, C, label) ? 1 : 0;
  }
  c.out[0][0] = hits / static_cast<double>(rows);
}

void ref_accuracy(RefCtx& c) {
  const RefTensor& x = c.input(0);
  ref_hits(c, [&](int64_t at, int64_t C, int64_t label) {
    int64_t best = 0;
    for (int64_t j = 1; j < C; ++j)
      if (!std::isnan(x[at + best]) && (std::isnan(x[at + j]) || x[at + j] > x[at + best])) best = j;
    return best == label;
  });
}

void ref_top_k(RefCtx& c) {
  const RefTensor& x = c.input(0);
  const int64_t k = c.attrs().i("k");
  ref_hits(c, [&](int64_t at, int64_t C, int64_t label) {
    int64_t above = 0;
    for (int64_t j = 0; j < C; ++j) above += x[at + j] > x[at + label];
    return above < k;
  });
}

void ref_mae(RefCtx& c) {
  const RefTensor& a = c.input(0);
  const RefTensor& b = c.input(1);
  double s = 0;
  for (int64_t i = 0; i < a.numel(); ++i) s += std::fabs(a[i] - b[i]);
  c.out[0][0] = s / static_cast<double>(a.numel());
}

// --- expansions ------------------------------------------------------------------------

Value share(ExpandCtx& x, Value hits) {
  return x.op(OpKind::Mean, {x.op(OpKind::Cast, {hits}, {{"dtype", DType::F32}})});
}

Value expand_accuracy(ExpandCtx& x) {
  const auto last = static_cast<int64_t>(x.type(x.input(0)).rank()) - 1;
  return share(x, x.op(OpKind::Eq, {x.op(OpKind::Argmax, {x.input(0)}, {{"axis", last}}), x.input(1)}));
}

Value expand_top_k(ExpandCtx& x) {
  const TensorType& t = x.type(x.input(0));
  const auto last = static_cast<int64_t>(t.rank()) - 1;
  const int64_t classes = t.shape.back().const_value();
  const Value f0 = x.number(0, DType::F32);
  const Value hot = x.op(OpKind::Eq, {x.op(OpKind::OneHot, {x.input(1)}, {{"classes", classes}}), x.number(1, DType::F32)});
  const Value logits = t.dtype == DType::F32 ? x.input(0) : x.op(OpKind::Cast, {x.input(0)}, {{"dtype", DType::F32}});
  // The label's logit, picked with where (a -inf elsewhere must not make 0 * -inf), as [..., 1].
  Shape col = t.shape;
  col.back() = Dim(1);
  const Value picked = x.op(OpKind::Reshape, {x.op(OpKind::Sum, {x.op(OpKind::Where, {hot, logits, f0})}, {{"axes", Ints{last}}})},
                            {{"shape", col}});
  auto count = [&](Value mask) {
    return x.op(OpKind::Sum, {x.op(OpKind::Cast, {mask}, {{"dtype", DType::F32}})}, {{"axes", Ints{last}}});
  };
  const Value above = count(x.op(OpKind::Gt, {logits, picked}));
  const Value in_range = x.op(OpKind::Gt, {count(hot), f0});  // a label outside [0, C) has no one-hot
  const Value top = x.op(OpKind::Lt, {above, x.number(static_cast<double>(x.attrs.i("k")), DType::F32)});
  return x.op(OpKind::Mean, {x.op(OpKind::Where, {in_range, x.op(OpKind::Cast, {top}, {{"dtype", DType::F32}}), f0})});
}

Value expand_mae(ExpandCtx& x) {
  return x.op(OpKind::Mean, {x.op(OpKind::Abs, {x.op(OpKind::Sub, {x.input(0), x.input(1)})})});
}

// Logits on a grid of halves (ties), labels in [-1, C] (a miss outside [0, C)).
std::vector<OpExample> label_examples(ExampleRng& rng, bool top_k) {
  return examples::calls(5, [&](int, OpExample& e) {
    const int64_t C = examples::pick(rng, 1, 6);
    std::vector<int64_t> s = examples::shape(rng, 1, 2, 1, 5);
    std::vector<int64_t> ls = s;
    s.push_back(C);
    e.inputs = {examples::values(rng, DType::F32, s, Domain{-1, 1, 0.5}),
                examples::values(rng, DType::I32, ls, Domain{-1, static_cast<double>(C), 1})};
    if (top_k) e.attrs.set("k", examples::pick(rng, 1, C));
    e.grad = false;
    e.label = fmt::format("logits {}{}", RefTensor(DType::F32, s).shape_str(), top_k ? fmt::format(", k {}", e.attrs.i("k")) : "");
  });
}

std::vector<OpExample> mae_examples(ExampleRng& rng) {
  return examples::calls(4, [&](int, OpExample& e) {
    const std::vector<int64_t> s = examples::shape(rng, 0, 3);
    e.inputs = {examples::values(rng, DType::F32, s, Domain{-2, 2}), examples::values(rng, DType::F32, s, Domain{-2, 2})};
    e.label = RefTensor(DType::F32, s).shape_str();
  });
}

}  // namespace

void register_metric_ops(OpRegistry& r) {
  r.def(OpKind::Accuracy).signature("logits: tensor, labels: tensor").infer(infer_accuracy).reference(ref_accuracy)
      .composite(expand_accuracy).examples([](ExampleRng& rng) { return label_examples(rng, false); })
      .summary("f32: the share of positions whose argmax over the last axis is the i32 label (a NaN logit counts as "
               "the maximum; a label outside the classes is a miss), as (logits.argmax(-1) == labels).float().mean()");
  r.def(OpKind::TopKAccuracy).signature("logits: tensor, labels: tensor, k: int = 5").infer(infer_top_k)
      .reference(ref_top_k).composite(expand_top_k).examples([](ExampleRng& rng) { return label_examples(rng, true); })
      .summary("f32: the share of positions whose label is among the k best classes: fewer than k logits are strictly "
               "above the label's (ties count for it; a label outside the classes is a miss)");
  r.def(OpKind::Mae).signature("pred: tensor, target: tensor").infer(infer_mae).reference(ref_mae).composite(expand_mae)
      .examples(mae_examples).summary("the mean absolute error mean(|pred - target|) (l1_loss's mean)");
}

}  // namespace modelc
