// Neural-network ops: softmax, log_softmax, layer_norm, embedding, cross_entropy,
// dropout and causal_mask.
//
// The shape rules take float tensors only (ids and targets are i32) and canonicalise their
// attributes (a negative axis, an integer eps or p). The references are plain double-
// precision loops written the numerically careful way (max-subtracted exponentials,
// two-pass variance) so that they can serve as the oracle for fused kernels.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <utility>

#include "compiler/ir/grads/grad_util.h"
#include "compiler/ir/op_examples.h"
#include "compiler/ir/op_registry.h"
#include "runtime/base/philox.h"

namespace modelc {

namespace {

// Fails (blaming input i) unless input i has a float dtype.
bool float_input(InferCtx& c, std::string_view op, int i) {
  if (is_float(c.input(i).dtype)) return true;
  c.fail(fmt::format("{} needs a float tensor, got {}", op, c.input(i).str()), i);
  return false;
}

// A float attribute given as an int becomes a float, so the IR shows one spelling.
double float_attr(InferCtx& c, const char* name) {
  double v = c.attrs.f(name);
  c.attrs.set(name, v);
  return v;
}

std::string float_str(double v) { return attr_str(AttrValue(v)); }

// Calls f(base, stride) for every lane of `shape` along `axis`: the `shape[axis]` elements
// base, base + stride, ... of a row-major tensor.
template <class F>
void for_each_lane(const std::vector<int64_t>& shape, size_t axis, F f) {
  int64_t outer = 1, inner = 1;
  for (size_t k = 0; k < axis; ++k) outer *= shape[k];
  for (size_t k = axis + 1; k < shape.size(); ++k) inner *= shape[k];
  int64_t n = shape[axis];
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t i = 0; i < inner; ++i) f(o * n * inner + i, inner);
}

// The max m of the n elements x[base + k*stride] and the sum of exp(x - m): the
// overflow-free pieces of a softmax. They are kept apart (not folded into one
// log-sum-exp) because exp(x - m) / s is more accurate than exp(x - (m + log s)).
// A lane of all -inf gives m = -inf and nan results, as in PyTorch.
std::pair<double, double> max_and_sum_exp(const RefTensor& x, int64_t base, int64_t stride, int64_t n) {
  double m = -std::numeric_limits<double>::infinity();
  for (int64_t k = 0; k < n; ++k) m = std::max(m, x[base + k * stride]);
  double s = 0;
  for (int64_t k = 0; k < n; ++k) s += std::exp(x[base + k * stride] - m);
  return {m, s};
}

// --- shape rules ----------------------------------------------------------------------

// softmax and log_softmax: same type, the axis normalised.
InferFn infer_softmax(const char* op) {
  return [op](InferCtx& c) {
    const TensorType& x = c.input(0);
    if (!float_input(c, op, 0)) return;
    int64_t axis = c.attrs.i("axis"), given = axis;
    if (!normalize_axis(axis, x.rank()))
      return c.fail_attr(fmt::format("{} axis {} is out of range for {}", op, given, x.str()), "axis");
    c.attrs.set("axis", axis);
    c.out = {x};
  };
}

void infer_layer_norm(InferCtx& c) {
  const TensorType& x = c.input(0);
  if (!float_input(c, "layer_norm", 0)) return;
  if (x.rank() == 0) return c.fail("layer_norm needs a tensor of rank >= 1, got " + x.str(), 0);
  // weight and bias scale and shift the normalised last axis: one value per channel, in
  // the dtype of x (a mixed-precision model casts them explicitly).
  TensorType per_channel{x.dtype, {x.shape.back()}};
  const char* names[] = {"", "weight", "bias"};
  for (int i = 1; i <= 2; ++i)
    if (c.has_input(i) && c.input(i) != per_channel)
      return c.fail(fmt::format("layer_norm {} must be {} for {}, got {}", names[i], per_channel.str(),
                                x.str(), c.input(i).str()), i);
  double eps = float_attr(c, "eps");
  if (!(eps > 0)) return c.fail_attr("layer_norm eps must be > 0, got " + float_str(eps), "eps");
  c.out = {x};
}

void infer_embedding(InferCtx& c) {
  const TensorType& ids = c.input(0);
  const TensorType& table = c.input(1);
  if (ids.dtype != DType::I32) return c.fail("embedding ids must be i32, got " + ids.str(), 0);
  if (!is_float(table.dtype) || table.rank() != 2)
    return c.fail("embedding table must be a float matrix [V,C], got " + table.str(), 1);
  TensorType t{table.dtype, ids.shape};
  t.shape.push_back(table.shape[1]);
  c.out = {t};
}

void infer_cross_entropy(InferCtx& c) {
  const TensorType& logits = c.input(0);
  const TensorType& targets = c.input(1);
  if (!float_input(c, "cross_entropy", 0)) return;
  if (logits.rank() == 0) return c.fail("cross_entropy needs logits of rank >= 1, got " + logits.str(), 0);
  // One class index per position: the logits' shape without the class axis.
  TensorType want{DType::I32, Shape(logits.shape.begin(), logits.shape.end() - 1)};
  if (targets != want)
    return c.fail(fmt::format("cross_entropy targets must be {} for logits {}, got {}", want.str(),
                              logits.str(), targets.str()), 1);
  c.out = {TensorType{DType::F32, {}}};
}

void infer_dropout(InferCtx& c) {
  if (!float_input(c, "dropout", 0)) return;
  double p = float_attr(c, "p");
  // p = 1 would drop everything and scale by 1/0.
  if (!(p >= 0 && p < 1)) return c.fail_attr("dropout p must be in [0, 1), got " + float_str(p), "p");
  c.out = {c.input(0)};
}

void infer_causal_mask(InferCtx& c) {
  const TensorType& x = c.input(0);
  if (!float_input(c, "causal_mask", 0)) return;
  if (x.rank() < 2) return c.fail("causal_mask needs a tensor [...,Tq,Tk] of rank >= 2, got " + x.str(), 0);
  c.out = {x};
}

// --- references -----------------------------------------------------------------------

void ref_softmax(RefCtx& c, bool log) {
  const RefTensor& x = c.input(0);
  RefTensor& out = c.out[0];
  auto axis = static_cast<size_t>(c.attrs().i("axis"));
  int64_t n = x.shape[axis];
  for_each_lane(x.shape, axis, [&](int64_t base, int64_t stride) {
    auto [m, s] = max_and_sum_exp(x, base, stride, n);
    for (int64_t k = 0; k < n; ++k) {
      int64_t i = base + k * stride;
      out[i] = log ? (x[i] - m) - std::log(s) : std::exp(x[i] - m) / s;
    }
  });
}

void ref_layer_norm(RefCtx& c) {
  const RefTensor& x = c.input(0);
  const RefTensor* w = c.in.at(1);
  const RefTensor* b = c.in.at(2);
  RefTensor& out = c.out[0];
  double eps = c.attrs().f("eps");
  int64_t n = x.shape.back();
  for (int64_t base = 0; base < x.numel(); base += n) {
    // Two passes: the mean first, then the biased variance about it (PyTorch's
    // definition), which does not cancel catastrophically as E[x^2] - E[x]^2 would.
    double mean = 0, var = 0;
    for (int64_t k = 0; k < n; ++k) mean += x[base + k];
    mean /= static_cast<double>(n);
    for (int64_t k = 0; k < n; ++k) var += (x[base + k] - mean) * (x[base + k] - mean);
    var /= static_cast<double>(n);
    double inv = 1 / std::sqrt(var + eps);
    for (int64_t k = 0; k < n; ++k) {
      double y = (x[base + k] - mean) * inv;
      if (w) y *= (*w)[k];
      if (b) y += (*b)[k];
      out[base + k] = y;
    }
  }
}

void ref_embedding(RefCtx& c) {
  const RefTensor& ids = c.input(0);
  const RefTensor& table = c.input(1);
  RefTensor& out = c.out[0];
  int64_t rows = table.shape[0], width = table.shape[1];
  for (int64_t i = 0; i < ids.numel(); ++i) {
    auto id = static_cast<int64_t>(ids[i]);
    // Ids are data, so a bad one is the user's error, found only now.
    if (id < 0 || id >= rows)
      throw UserError(fmt::format("embedding: index {} is out of range for a table of {} rows", id, rows));
    for (int64_t k = 0; k < width; ++k) out[i * width + k] = table[id * width + k];
  }
}

void ref_cross_entropy(RefCtx& c) {
  const RefTensor& logits = c.input(0);
  const RefTensor& targets = c.input(1);
  const int64_t classes = logits.shape.back(), ignore = c.attrs().i("ignore_index");
  double total = 0;
  int64_t counted = 0;
  for (int64_t pos = 0; pos < targets.numel(); ++pos) {
    auto t = static_cast<int64_t>(targets[pos]);
    check_class_target("cross_entropy", t, classes, ignore);
    if (t == ignore) continue;
    int64_t base = pos * classes;
    auto [m, s] = max_and_sum_exp(logits, base, 1, classes);
    total += (m - logits[base + t]) + std::log(s);
    ++counted;
  }
  // The mean over the positions not ignored; none give 0/0 = nan, as in PyTorch.
  c.out[0][0] = total / static_cast<double>(counted);
}

void ref_dropout(RefCtx& c) {
  const RefTensor& x = c.input(0);
  RefTensor& out = c.out[0];
  if (!c.options.training) {
    out.data = x.data;
    return;
  }
  double p = c.attrs().f("p");
  // The site key is set by sema (a hash of the node's scope); a graph built without it
  // still runs, as site 0.
  auto key = static_cast<uint64_t>(c.attrs().has("key") ? c.attrs().i("key") : 0);
  PhiloxKey site = dropout_key(c.options.seed, key);
  double scale = 1 / (1 - p);
  for (int64_t i = 0; i < x.numel(); ++i) {
    bool keep = dropout_uniform_with(site, c.options.step, static_cast<uint64_t>(i)) >= p;
    out[i] = keep ? x[i] * scale : 0.0;
  }
}

void ref_causal_mask(RefCtx& c) {
  const RefTensor& x = c.input(0);
  RefTensor& out = c.out[0];
  int64_t tq = x.shape[x.shape.size() - 2], tk = x.shape.back();
  // Queries are aligned to the end of the keys: with a cache of Tk - Tq earlier positions,
  // query i sits at position i + (Tk - Tq) and may see every key up to it.
  for (int64_t base = 0; base < x.numel(); base += tq * tk)
    for (int64_t i = 0; i < tq; ++i)
      for (int64_t j = 0; j < tk; ++j) {
        int64_t at = base + i * tk + j;
        out[at] = j > i + (tk - tq) ? -std::numeric_limits<double>::infinity() : x[at];
      }
}

// --- test domains ---------------------------------------------------------------------

using examples::pick;

OpExample call(std::string label, std::vector<std::optional<RefTensor>> inputs, Attrs attrs = {}) {
  OpExample e;
  e.label = std::move(label);
  e.inputs = std::move(inputs);
  e.attrs = std::move(attrs);
  return e;
}

// Along a random axis (negative spellings too) of shapes of rank 1 to 4.
std::vector<OpExample> softmax_examples(ExampleRng& rng) {
  std::vector<OpExample> out;
  for (int rep = 0; rep < 4; ++rep) {
    std::vector<int64_t> s = examples::shape(rng, 1, 4);
    const auto r = static_cast<int64_t>(s.size());
    Attrs a;
    a.set("axis", pick(rng, -r, r - 1));
    out.push_back(call(fmt::format("axis {}", a.i("axis")), {examples::values(rng, DType::F32, s, Domain{-3, 3})}, a));
  }
  return out;
}

// With and without weight and bias, the default eps and a large one.
std::vector<OpExample> layer_norm_examples(ExampleRng& rng) {
  std::vector<OpExample> out;
  for (int rep = 0; rep < 4; ++rep) {
    std::vector<int64_t> s = examples::shape(rng, 1, 3);
    s.back() = pick(rng, 2, 6);  // one element would normalise to 0 (a flat function)
    const std::vector<int64_t> c{s.back()};
    std::optional<RefTensor> w, b;
    if (rep & 1) w = examples::values(rng, DType::F32, c, Domain{0.5, 2});
    if (rep & 2) b = examples::values(rng, DType::F32, c, Domain{-1, 1});
    Attrs a;
    if (rep == 3) a.set("eps", 0.1);
    out.push_back(call(fmt::format("{}{}", w ? "weight" : "no weight", b ? ", bias" : ""),
                       {examples::values(rng, DType::F32, s, Domain{-2, 2}), w, b}, a));
  }
  return out;
}

std::vector<OpExample> embedding_examples(ExampleRng& rng) {
  std::vector<OpExample> out;
  for (int rep = 0; rep < 3; ++rep) {
    const int64_t V = pick(rng, 1, 7), C = pick(rng, 1, 5);
    out.push_back(call(fmt::format("table [{},{}]", V, C),
                       {examples::ids(rng, examples::shape(rng, 0, 3), V), examples::values(rng, DType::F32, {V, C}, Domain{-1, 1})}));
  }
  return out;
}

std::vector<OpExample> cross_entropy_examples(ExampleRng& rng) {
  std::vector<OpExample> out;
  for (int rep = 0; rep < 3; ++rep) {
    std::vector<int64_t> pos = examples::shape(rng, 0, 2);
    const int64_t C = pick(rng, 1, 7);
    std::vector<int64_t> logits = pos;
    logits.push_back(C);
    out.push_back(call(fmt::format("{} classes", C),
                       {examples::values(rng, DType::F32, logits, Domain{-3, 3}), examples::ids(rng, pos, C)}));
  }
  // Some targets ignored (the default -100, or a class: padding id 0), and all of them (NaN).
  for (int rep = 0; rep < 3; ++rep) {
    std::vector<int64_t> pos = examples::shape(rng, 1, 2);
    const int64_t C = pick(rng, 2, 6), ignore = rep == 1 ? 0 : -100;
    std::vector<int64_t> logits = pos;
    logits.push_back(C);
    RefTensor t = examples::ids(rng, pos, C);
    for (int64_t i = 0; i < t.numel(); ++i)
      if (rep == 2 || pick(rng, 0, 2) == 0) t.data[static_cast<size_t>(i)] = static_cast<double>(ignore);
    Attrs a;
    a.set("ignore_index", ignore);
    out.push_back(call(fmt::format("{} classes, ignore_index {}{}", C, ignore, rep == 2 ? ", all ignored" : ""),
                       {examples::values(rng, DType::F32, logits, Domain{-3, 3}), t}, a));
    out.back().grad = rep != 2;  // the loss is NaN (0/0); its gradient is 0, as PyTorch's (tests/ir)
  }
  return out;
}

std::vector<OpExample> dropout_examples(ExampleRng& rng) {
  std::vector<OpExample> out;
  for (double p : {0.0, 0.3, 0.9}) {
    Attrs a;
    a.set("p", p);
    a.set("key", pick(rng, 0, 1 << 30));
    out.push_back(call(fmt::format("p {}", p), {examples::values(rng, DType::F32, examples::shape(rng, 0, 3), Domain{-2, 2})}, a));
  }
  return out;
}

// Scores [..., Tq, Tk] with Tk >= Tq (a cache of earlier keys).
std::vector<OpExample> causal_mask_examples(ExampleRng& rng) {
  std::vector<OpExample> out;
  for (int rep = 0; rep < 3; ++rep) {
    std::vector<int64_t> s = examples::shape(rng, 0, 2);
    const int64_t tq = pick(rng, 1, 5);
    s.push_back(tq);
    s.push_back(tq + (rep == 0 ? 0 : pick(rng, 0, 3)));
    out.push_back(call("scores", {examples::values(rng, DType::F32, s, Domain{-2, 2})}));
  }
  return out;
}

}  // namespace

void register_nn_ops(OpRegistry& r) {
  r.def(OpKind::Softmax).signature("x: tensor, axis: int = -1").fusion(FusionKind::Row)
      .infer(infer_softmax("softmax")).reference([](RefCtx& c) { ref_softmax(c, false); })
      .autocast(AutocastPolicy::F32).grad(grads::softmax).examples(softmax_examples)
      .summary("exp(x) / sum(exp(x)) along an axis (by default the last)");
  r.def(OpKind::LogSoftmax).signature("x: tensor, axis: int = -1").fusion(FusionKind::Row)
      .infer(infer_softmax("log_softmax")).reference([](RefCtx& c) { ref_softmax(c, true); })
      .autocast(AutocastPolicy::F32).grad(grads::log_softmax).examples(softmax_examples)
      .summary("x - log(sum(exp(x))) along an axis (by default the last)");
  r.def(OpKind::LayerNorm)
      .signature("x: tensor, weight: tensor? = none, bias: tensor? = none, eps: float = 1e-5")
      .fusion(FusionKind::Row).infer(infer_layer_norm).reference(ref_layer_norm).autocast(AutocastPolicy::F32)
      .grad(grads::layer_norm).examples(layer_norm_examples)
      .summary("normalises the last axis to mean 0 and variance 1 (biased), then * weight + bias");
  r.def(OpKind::Embedding).signature("ids: tensor, table: tensor").fusion(FusionKind::Opaque).library()
      .infer(infer_embedding).reference(ref_embedding).grad(grads::embedding).examples(embedding_examples)
      .index_operand({0, 1, 0, "", "rows of the table"})
      .summary("the rows of table [V,C] picked by i32 ids: [...] -> [...,C]");
  // The one-kernel form of cross_entropy (the composite in compiler/ir/ops/losses.cc lowers
  // to it when there is no weight, no label smoothing and the mean is asked for).
  r.def(OpKind::CrossEntropy).internal().signature("logits: tensor, targets: tensor, ignore_index: int = -100")
      .fusion(FusionKind::Reduction).infer(infer_cross_entropy).reference(ref_cross_entropy)
      .autocast(AutocastPolicy::F32).grad(grads::cross_entropy).examples(cross_entropy_examples)
      .index_operand({1, 0, -1, "", "classes (the last dim of the logits)", "ignore_index"})
      .summary("the mean over the positions whose target is not ignore_index of -log_softmax(logits)[target], as "
               "an f32 scalar; targets are i32 with the shape of logits less its last axis");
  r.def(OpKind::Dropout).signature("x: tensor, p: float = 0.1").fusion(FusionKind::Elementwise).keyed().eval_identity()
      .infer(infer_dropout).reference(ref_dropout).grad(grads::dropout).examples(dropout_examples)
      .summary("in training, zeroes each element with probability p and scales the rest by 1/(1-p); the identity "
               "in evaluation; the mask comes from a counter-based RNG (Philox) keyed by the seed, the step and "
               "the op's place, so a recomputation draws the same mask");
  r.def(OpKind::CausalMask).signature("x: tensor").fusion(FusionKind::Elementwise)
      .infer(infer_causal_mask).reference(ref_causal_mask).grad(grads::causal_mask).examples(causal_mask_examples)
      .summary("sets scores [...,Tq,Tk] of keys after each query to -inf (queries aligned to the last keys)");
}

}  // namespace modelc
