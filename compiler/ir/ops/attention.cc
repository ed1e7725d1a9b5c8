// Fused attention: scaled_dot_product_attention(q, k, v, causal, dropout, scale), as
// torch.nn.functional.scaled_dot_product_attention, and the two library ops it is made of:
//   sdpa(q, k, v)       -> out [..., T, E] and stats [..., T, 2] (each query row's running
//                          maximum m and sum l of exp(score - m): all the backward keeps);
//   sdpa_grad(q, k, v, dout, stats, delta) -> dq, dk, dv.
// The kernels (kernels/sdpa.cc, bodies in kernels/cuda/bodies_sdpa.h) are memory-efficient as
// FlashAttention is: an online softmax over blocks of keys, no [T, S] matrix stored forward or
// backward, so the training step's memory grows with T, not T^2 (tests/ir/test_attention.cc
// checks the plan). q is [..., T, D], k [..., S, D], v [..., S, E] with equal leading dims.
// Scores are q . k * scale (scale 0, the default: 1 / sqrt(D)); causal is torch's is_causal
// (query t sees keys s <= t); dropout zeroes probabilities with the dropout op's Philox
// draws (index (row * S + s) of the call's site) in training and is off in eval
// (passes/mode.cc). The kernels run in f32: the composite casts other float types.
#include <fmt/format.h>

#include <cmath>
#include <limits>

#include "compiler/ir/grads/grad_util.h"
#include "compiler/ir/op_examples.h"
#include "compiler/ir/op_registry.h"
#include "runtime/base/kernel_limits.h"
#include "runtime/base/philox.h"

namespace modelc {
namespace {

// Checks q [..., T, D], k [..., S, D], v [..., S, E] of `op` (float, one dtype, rank >= 2,
// equal leading dims, D and E at most kSdpaMaxHead where known).
bool check_qkv(InferCtx& c, const char* op, bool f32_only) {
  const TensorType& q = c.input(0);
  const char* names[] = {"q", "k", "v"};
  for (int i = 0; i < 3; ++i) {
    const TensorType& t = c.input(i);
    if (!is_float(t.dtype) || t.rank() < 2 || (f32_only && t.dtype != DType::F32)) {
      c.fail(fmt::format("{}: {} must be a {} tensor [..., {}, {}], got {}", op, names[i], f32_only ? "f32" : "float",
                         i == 0 ? "T" : "S", i == 2 ? "E" : "D", t.str()), i);
      return false;
    }
    if (t.dtype != q.dtype || t.rank() != q.rank() ||
        !std::equal(q.shape.begin(), q.shape.end() - 2, t.shape.begin())) {
      c.fail(fmt::format("{}: q, k and v must have one dtype and the same leading dims, got q {}, k {}, v {}", op,
                         q.str(), c.input(1).str(), c.input(2).str()), i);
      return false;
    }
  }
  const TensorType& k = c.input(1);
  const TensorType& v = c.input(2);
  if (k.shape.back() != q.shape.back()) {
    c.fail(fmt::format("{}: q {} and k {} must have the same head size (last dim)", op, q.str(), k.str()), 1);
    return false;
  }
  if (v.shape[v.rank() - 2] != k.shape[k.rank() - 2]) {
    c.fail(fmt::format("{}: k {} and v {} must have the same number of keys (dim -2)", op, k.str(), v.str()), 2);
    return false;
  }
  for (int i : {0, 2}) {
    const std::optional<int64_t> d = c.input(i).shape.back().as_const();
    if (d && *d > kSdpaMaxHead) {
      c.fail(fmt::format("{}: head size {} of {} is over the kernels' {}", op, *d, c.input(i).str(), kSdpaMaxHead), i);
      return false;
    }
  }
  const double p = c.attrs.f("dropout");
  if (!(p >= 0 && p < 1)) {
    c.fail_attr(fmt::format("{}: dropout must be in [0, 1), got {}", op, p), "dropout");
    return false;
  }
  return true;
}

TensorType result_type(const InferCtx& c, DType t) {
  TensorType out = c.input(0);
  out.dtype = t;
  out.shape.back() = c.input(2).shape.back();
  return out;
}

void infer_attention(InferCtx& c) {
  if (!check_qkv(c, "scaled_dot_product_attention", false)) return;
  if (c.attrs.f("scale") == 0) {
    const std::optional<int64_t> d = c.input(0).shape.back().as_const();
    if (!d)
      return c.fail_attr(fmt::format("scaled_dot_product_attention: the head size of q {} is not known when the model is "
                                     "compiled: give scale", c.input(0).str()), "scale");
    c.attrs.set("scale", 1.0 / std::sqrt(static_cast<double>(*d)));
  }
  c.out = {result_type(c, c.input(0).dtype)};
}

void infer_sdpa(InferCtx& c) {
  if (!check_qkv(c, "sdpa", true)) return;
  TensorType stats = c.input(0);
  stats.shape.back() = Dim(2);
  c.out = {result_type(c, DType::F32), stats};
}

void infer_sdpa_grad(InferCtx& c) {
  if (!check_qkv(c, "sdpa_grad", true)) return;
  const TensorType& q = c.input(0);
  TensorType want = result_type(c, DType::F32), stats = q, delta = q;
  stats.shape.back() = Dim(2);
  delta.shape.pop_back();
  const TensorType* expect[] = {&want, &stats, &delta};
  const char* names[] = {"dout", "stats", "delta"};
  for (int i = 0; i < 3; ++i)
    if (c.input(3 + i) != *expect[i])
      return c.fail(fmt::format("sdpa_grad: {} must be {} for q {}, got {}", names[i], expect[i]->str(), q.str(),
                                c.input(3 + i).str()), 3 + i);
  c.out = {q, c.input(1), c.input(2)};
}

// --- references (double) ------------------------------------------------------------------

struct Geo {
  int64_t bh = 1, T, S, D, E;
  explicit Geo(const RefCtx& c) {
    const auto& q = c.input(0).shape;
    for (size_t d = 0; d + 2 < q.size(); ++d) bh *= q[d];
    T = q[q.size() - 2], D = q.back(), S = c.input(1).shape[q.size() - 2], E = c.input(2).shape.back();
  }
  int64_t keys(const RefCtx& c, int64_t t) const { return c.attrs().b("causal") ? std::min(t + 1, S) : S; }
};

// What probability (row, s) is multiplied by: 0 or 1 / (1 - p) under dropout, else 1.
double keep(const RefCtx& c, const Geo& g, int64_t row, int64_t s) {
  const double p = c.options.training ? c.attrs().f("dropout") : 0.0;
  if (p <= 0) return 1;
  const auto key = static_cast<uint64_t>(c.attrs().has("key") ? c.attrs().i("key") : 0);
  const float u = dropout_uniform_with(dropout_key(c.options.seed, key), c.options.step, static_cast<uint64_t>(row * g.S + s));
  return u >= p ? 1 / (1 - p) : 0;
}

double score(const RefCtx& c, const Geo& g, int64_t row, int64_t bh, int64_t s) {
  const RefTensor& q = c.input(0);
  const RefTensor& k = c.input(1);
  double acc = 0;
  for (int64_t d = 0; d < g.D; ++d) acc += q[row * g.D + d] * k[(bh * g.S + s) * g.D + d];
  return acc * c.attrs().f("scale");
}

// out (and, when given, stats) of the forward pass.
void ref_forward(const RefCtx& c, RefTensor& out, RefTensor* stats) {
  const Geo g(c);
  const RefTensor& v = c.input(2);
  std::vector<double> sc;
  for (int64_t row = 0; row < g.bh * g.T; ++row) {
    const int64_t bh = row / g.T, keys = g.keys(c, row % g.T);
    sc.assign(static_cast<size_t>(keys), 0);
    double m = -std::numeric_limits<double>::infinity(), l = 0;
    for (int64_t s = 0; s < keys; ++s) {
      const double x = sc[static_cast<size_t>(s)] = score(c, g, row, bh, s);
      m = std::isnan(m) || std::isnan(x) ? m + x : std::max(m, x);  // NaN propagates
    }
    for (double x : sc) l += std::exp(x - m);
    for (int64_t e = 0; e < g.E; ++e) {
      double acc = 0;
      for (int64_t s = 0; s < keys; ++s)
        acc += std::exp(sc[static_cast<size_t>(s)] - m) / l * keep(c, g, row, s) * v[(bh * g.S + s) * g.E + e];
      out[row * g.E + e] = acc;
    }
    if (stats) (*stats)[2 * row] = m, (*stats)[2 * row + 1] = l;
  }
}

void ref_sdpa_grad(RefCtx& c) {
  const Geo g(c);
  const RefTensor &q = c.input(0), &k = c.input(1), &v = c.input(2), &dout = c.input(3), &st = c.input(4),
                  &delta = c.input(5);
  RefTensor &dq = c.out[0], &dk = c.out[1], &dv = c.out[2];
  for (RefTensor* t : {&dq, &dk, &dv})
    for (int64_t i = 0; i < t->numel(); ++i) (*t)[i] = 0;
  const double scale = c.attrs().f("scale");
  for (int64_t row = 0; row < g.bh * g.T; ++row) {
    const int64_t bh = row / g.T, keys = g.keys(c, row % g.T);
    for (int64_t s = 0; s < keys; ++s) {
      const int64_t kr = bh * g.S + s;
      const double p = std::exp(score(c, g, row, bh, s) - st[2 * row]) / st[2 * row + 1], kp = keep(c, g, row, s);
      double dp = 0;
      for (int64_t e = 0; e < g.E; ++e) dp += dout[row * g.E + e] * v[kr * g.E + e];
      const double ds = p * (dp * kp - delta[row]);
      for (int64_t d = 0; d < g.D; ++d) {
        dq[row * g.D + d] += ds * k[kr * g.D + d] * scale;
        dk[kr * g.D + d] += ds * q[row * g.D + d] * scale;
      }
      for (int64_t e = 0; e < g.E; ++e) dv[kr * g.E + e] += p * kp * dout[row * g.E + e];
    }
  }
}

// --- expansion and gradient -------------------------------------------------------------------

Attrs kernel_attrs(const Attrs& from) {
  Attrs a;
  for (const char* n : {"causal", "dropout", "scale", "key"})
    if (from.has(n)) a.set(n, *from.find(n));
  return a;
}

Value expand_attention(ExpandCtx& x) {
  const DType t = x.type(x.input(0)).dtype;
  auto f32 = [&](Value v) { return t == DType::F32 ? v : x.op(OpKind::Cast, {v}, {{"dtype", DType::F32}}); };
  const Value out = x.op(OpKind::Sdpa, {f32(x.input(0)), f32(x.input(1)), f32(x.input(2))}, kernel_attrs(x.attrs));
  return t == DType::F32 ? out : x.op(OpKind::Cast, {out}, {{"dtype", t}});
}

// The stats output carries no gradient (only the backward reads it). delta[t] =
// dout[t] . out[t] is computed here, one fused reduction, so sdpa_grad's kv half need not.
void grad_sdpa(GradCtx& c) {
  if (!c.out_grads.at(0).valid()) {
    c.in_grads = {Value{}, Value{}, Value{}};
    return;
  }
  const Value dout = c.out_grads[0], out = c.output(0);
  Attrs sum;
  sum.set("axes", Ints{static_cast<int64_t>(c.type(out).rank()) - 1});
  const Value delta = c.emit(OpKind::Sum, {c.emit(OpKind::Mul, {dout, out})}, std::move(sum));
  const Value dq = c.emit(OpKind::SdpaGrad, {c.input(0), c.input(1), c.input(2), dout, c.output(1), delta},
                          kernel_attrs(c.node.attrs));
  c.in_grads = {dq, Value{dq.node, 1}, Value{dq.node, 2}};
}

// --- cost and test domains --------------------------------------------------------------------

// 2 (D + E) FLOPs per (query, key) pair and pass, every pair counted (causal or not).
Dim pair_flops(const Graph& g, const Node& n, int64_t passes) {
  const Shape& q = g.type(n.inputs.at(0)).shape;
  const Shape& v = g.type(n.inputs.at(2)).shape;
  Dim rows(1);  // bh * T
  for (size_t d = 0; d + 1 < q.size(); ++d) rows = rows * q[d];
  return Dim(2 * passes) * rows * v[v.size() - 2] * (q.back() + v.back());
}

std::vector<OpExample> attention_examples(ExampleRng& rng, bool internal_grad) {
  using examples::pick;
  return examples::calls(6, [&](int rep, OpExample& e) {
    const bool heads = rep % 2 == 1;
    const int64_t B = pick(rng, 1, 2), H = heads ? pick(rng, 1, 2) : 1, T = pick(rng, 1, 5);
    const int64_t S = rep == 4 ? 40 : pick(rng, 1, 6), D = pick(rng, 1, 4), E = pick(rng, 1, 4);
    auto shape = [&](int64_t rows, int64_t cols) {
      return heads ? std::vector<int64_t>{B, H, rows, cols} : std::vector<int64_t>{B, rows, cols};
    };
    e.inputs = {examples::values(rng, DType::F32, shape(T, D), Domain{-1, 1}),
                examples::values(rng, DType::F32, shape(S, D), Domain{-1, 1}),
                examples::values(rng, DType::F32, shape(S, E), Domain{-1, 1})};
    const bool causal = rep % 3 != 0;
    const double dropout = rep == 2 || rep == 5 ? 0.3 : 0.0;
    e.attrs.set("causal", causal);
    e.attrs.set("dropout", dropout);
    e.attrs.set("scale", rep == 3 ? 0.7 : 1.0 / std::sqrt(static_cast<double>(D)));
    e.attrs.set("key", pick(rng, 0, 1 << 30));
    if (internal_grad) {
      std::vector<int64_t> st = shape(T, 2), dl = shape(T, 1);
      dl.pop_back();
      e.inputs.push_back(examples::values(rng, DType::F32, shape(T, E), Domain{-1, 1}));
      RefTensor stats = examples::values(rng, DType::F32, st, Domain{0.5, 2});  // m, l: any positive l
      e.inputs.push_back(std::move(stats));
      e.inputs.push_back(examples::values(rng, DType::F32, dl, Domain{-1, 1}));
    }
    e.label = fmt::format("q {} k {} v {}{}{}", e.inputs[0]->shape_str(), e.inputs[1]->shape_str(),
                          e.inputs[2]->shape_str(), causal ? " causal" : "", dropout > 0 ? " dropout 0.3" : "");
  });
}

}  // namespace

void register_attention_ops(OpRegistry& r) {
  const char* sig = "q: tensor, k: tensor, v: tensor, causal: bool = false, dropout: float = 0, scale: float = 0";
  r.def(OpKind::ScaledDotProductAttention).signature(sig).keyed().infer(infer_attention)
      .reference([](RefCtx& c) { ref_forward(c, c.out[0], nullptr); }).composite(expand_attention)
      .examples([](ExampleRng& rng) { return attention_examples(rng, false); })
      .summary("softmax(q k^T * scale) v for q [..., T, D], k [..., S, D], v [..., S, E] (as torch's "
               "scaled_dot_product_attention): scale 0 means 1/sqrt(D), causal lets query t see keys s <= t, dropout "
               "drops probabilities in training (Philox); one fused, memory-efficient kernel forward and backward "
               "(no T x S matrix is stored), in f32");
  r.def(OpKind::Sdpa).internal().signature(sig).keyed().eval_attr("dropout", 0.0).fusion(FusionKind::Opaque).library().infer(infer_sdpa)
      .reference([](RefCtx& c) { ref_forward(c, c.out[0], &c.out[1]); }).grad(grad_sdpa)
      .flops([](const Graph& g, const Node& n) { return pair_flops(g, n, 1); })
      .autocast(AutocastPolicy::F32).nonfinite(NonFinite::Superset)
      .examples([](ExampleRng& rng) {
        auto ex = attention_examples(rng, false);
        for (OpExample& e : ex) e.grad = false;  // the composite's check covers it (stats carry no gradient)
        return ex;
      })
      .summary("scaled_dot_product_attention's kernel: out [..., T, E] and each query row's softmax statistics "
               "[..., T, 2] (the maximum score m and the sum l of exp(score - m))");
  r.def(OpKind::SdpaGrad).internal().no_grad("a gradient op (gradients are first-order)")
      .signature(std::string("q: tensor, k: tensor, v: tensor, dout: tensor, stats: tensor, delta: tensor, ") +
                 "causal: bool = false, dropout: float = 0, scale: float = 0")
      .keyed().fusion(FusionKind::Opaque).library().infer(infer_sdpa_grad).reference(ref_sdpa_grad)
      .flops([](const Graph& g, const Node& n) { return pair_flops(g, n, 2); })
      .autocast(AutocastPolicy::F32).nonfinite(NonFinite::Superset)
      .examples([](ExampleRng& rng) { return attention_examples(rng, true); })
      .summary("sdpa's gradient dq, dk, dv, recomputing each probability exp(score - m) / l from the forward's "
               "statistics; delta = sum(dout * out, -1)");
}

}  // namespace modelc
