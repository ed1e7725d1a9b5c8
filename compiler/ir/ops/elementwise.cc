// Elementwise ops: the records of compiler/ir/ops/elementwise.def (unary math, binary
// arithmetic and comparisons with numpy broadcasting), and gelu, cast and where.
//
// The reference computes in double and never rounds (only cast does): it is the oracle,
// and backends are compared against it with a tolerance suited to their dtype.
#include <cmath>
#include <limits>
#include <numbers>

#include <fmt/format.h>

#include "compiler/ir/grads/grad_util.h"
#include "compiler/ir/op_examples.h"
#include "compiler/ir/op_registry.h"

namespace modelc {
namespace {

// --- dtype classes --------------------------------------------------------------------

// Which element types an op takes.
enum class Accepts { Float, FloatOrInt, Any };

bool accepts(Accepts a, DType t) {
  switch (a) {
    case Accepts::Float: return is_float(t);
    case Accepts::FloatOrInt: return is_float(t) || t == DType::I32;
    case Accepts::Any: return true;
  }
  return false;
}

// "a floating-point tensor" / "floating-point or i32 tensors", for messages.
std::string expected_text(Accepts a, bool plural) {
  std::string kind = a == Accepts::Float ? "floating-point" : "floating-point or i32";
  return plural ? kind + " tensors" : "a " + kind + " tensor";
}

// --- broadcasting ---------------------------------------------------------------------

// Calls f(out_index, offsets) for every element of `out`, where offsets[k] is the flat
// index of the element of ins[k] that numpy broadcasting pairs with it. Inputs align at
// the right; a dimension of extent 1 (or a missing leading one) repeats.
template <class F>
void broadcast_each(const RefTensor& out, const std::vector<const RefTensor*>& ins, F&& f) {
  const int rank = out.rank();
  const size_t n = ins.size();
  // steps[k][d]: how far input k's offset moves when output dim d advances by one.
  std::vector<std::vector<int64_t>> steps(n, std::vector<int64_t>(static_cast<size_t>(rank), 0));
  for (size_t k = 0; k < n; ++k) {
    std::vector<int64_t> st = ins[k]->strides();
    int lead = rank - ins[k]->rank();
    for (int d = 0; d < ins[k]->rank(); ++d)
      if (ins[k]->shape[static_cast<size_t>(d)] != 1) steps[k][static_cast<size_t>(lead + d)] = st[static_cast<size_t>(d)];
  }
  std::vector<int64_t> idx(static_cast<size_t>(rank), 0), off(n, 0);
  for (int64_t i = 0; i < out.numel(); ++i) {
    f(i, off);
    // Advance the multi-index like an odometer, keeping every input's offset in step.
    for (int d = rank - 1; d >= 0; --d) {
      size_t du = static_cast<size_t>(d);
      ++idx[du];
      for (size_t k = 0; k < n; ++k) off[k] += steps[k][du];
      if (idx[du] < out.shape[du]) break;
      for (size_t k = 0; k < n; ++k) off[k] -= steps[k][du] * out.shape[du];
      idx[du] = 0;
    }
  }
}

// Broadcasts a and b for op `name`, failing the call with a message that names both.
std::optional<Shape> broadcast_or_fail(InferCtx& ctx, std::string_view name, const TensorType& a,
                                       const TensorType& b) {
  std::string why;
  auto s = broadcast_shapes(a.shape, b.shape, &why);
  if (!s) ctx.fail(fmt::format("cannot broadcast {} and {} in {} ({})", a.str(), b.str(), name, why));
  return s;
}

// --- registration helpers -------------------------------------------------------------

// The reference of a pointwise op: `fn` mapped over the broadcast inputs.
void pointwise_reference(RefCtx& c) {
  const PointwiseFn fn = op_info(c.node.op).pointwise;
  RefTensor& out = c.out[0];
  std::vector<double> at(c.in.size());
  broadcast_each(out, c.in, [&](int64_t i, const std::vector<int64_t>& off) {
    for (size_t k = 0; k < at.size(); ++k) at[k] = (*c.in[k])[off[k]];
    out[i] = fn(at.data(), c.attrs());
  });
}

enum class Result { Same, Bool };

void def_unary(OpRegistry& r, OpKind k, std::string name, const char* signature, Accepts acc, AutocastPolicy ac,
               const char* math, const char* grad, PointwiseFn fn, Domain domain, std::string summary) {
  r.def(k)
      .signature(signature)
      .fusion(FusionKind::Elementwise)
      .math(math)
      .pointwise(fn)
      .grad_exprs({grad})
      .autocast(ac)
      .domains({domain})
      .infer([name, acc](InferCtx& ctx) {
        const TensorType& x = ctx.input(0);
        if (!accepts(acc, x.dtype))
          return ctx.fail(fmt::format("{} expects {}, got {}", name, expected_text(acc, false), x.str()), 0);
        ctx.out = {x};
      })
      .reference(pointwise_reference)
      .summary(std::move(summary));
}

// A binary op with broadcasting. `acc` is what a and b (which must agree) may be; a Bool
// result makes the output bool (comparisons) instead of the inputs' dtype.
void def_binary(OpRegistry& r, OpKind k, std::string name, Accepts acc, Result result, AutocastPolicy ac,
                const char* math, const char* grad_a, const char* grad_b, PointwiseFn fn, Domain da, Domain db,
                std::string summary) {
  const bool to_bool = result == Result::Bool;
  r.def(k)
      .signature("a: tensor, b: tensor")
      .fusion(FusionKind::Broadcast)
      .math(math)
      .pointwise(fn)
      .grad_exprs({grad_a, grad_b})
      .autocast(ac)
      .domains({da, db})
      .infer([name, acc, to_bool](InferCtx& ctx) {
        const TensorType& a = ctx.input(0);
        const TensorType& b = ctx.input(1);
        // No implicit promotion: a mixed-precision model states its casts.
        if (a.dtype != b.dtype)
          return ctx.fail(fmt::format("dtype mismatch in {}: {} and {}", name, a.str(), b.str()));
        if (!accepts(acc, a.dtype))
          return ctx.fail(fmt::format("{} expects {}, got {}", name, expected_text(acc, true), a.str()), 0);
        auto s = broadcast_or_fail(ctx, name, a, b);
        if (!s) return;
        ctx.out = {TensorType{to_bool ? DType::Bool : a.dtype, std::move(*s)}};
      })
      .reference(pointwise_reference)
      .summary(std::move(summary));
}

double s_gelu_erf(double x) { return 0.5 * x * (1.0 + std::erf(x * std::numbers::sqrt2 / 2)); }
double s_gelu_tanh(double x) {
  const double k = std::sqrt(2.0 / std::numbers::pi);
  return 0.5 * x * (1.0 + std::tanh(k * (x + 0.044715 * x * x * x)));
}

// Calls of gelu in both forms.
std::vector<OpExample> gelu_examples(ExampleRng& rng) {
  std::vector<OpExample> out = examples::default_examples(op_info(OpKind::Gelu), rng);
  for (size_t i = 0, n = out.size(); i < n; ++i) {
    OpExample e = out[i];
    e.attrs.set("approximate", std::string("tanh"));
    e.label += ", tanh";
    out.push_back(std::move(e));
  }
  return out;
}

// Casts between every pair of dtypes, from values that round in each (halves, large ones).
std::vector<OpExample> cast_examples(ExampleRng& rng) {
  std::vector<OpExample> out;
  for (DType from : {DType::F32, DType::F16, DType::BF16, DType::I32, DType::Bool})
    for (DType to : {DType::F32, DType::F16, DType::BF16, DType::I32, DType::Bool}) {
      OpExample e;
      e.label = fmt::format("{} to {}", dtype_name(from), dtype_name(to));
      e.inputs = {examples::values(rng, from, examples::shape(rng, 0, 3), Domain{-300, 300})};
      e.attrs.set("dtype", to);
      e.grad = false;
      out.push_back(e);
      // The gradient where the cast to f32 rounds finely: it is linear between roundings
      // (f32's step is below 6e-8 in [-1, 1]), so a step of 1e-2 leaves an error of about
      // 6e-8 / 1e-2 of the slope.
      if (from == DType::F32 && to == DType::F32) {
        e.label += ", its gradient";
        e.inputs = {examples::values(rng, from, examples::shape(rng, 0, 3), Domain{-1, 1})};
        e.grad = true;
        e.grad_step = 1e-2;
        e.grad_tol = 1e-4;
        out.push_back(std::move(e));
      }
    }
  return out;
}

// where(cond, a, b) with the three broadcasting in every combination.
// Two values of one shape (train_or_eval's operands never broadcast).
std::vector<OpExample> mode_select_examples(ExampleRng& rng) {
  return examples::calls(3, [&rng](int, OpExample& e) {
    const std::vector<int64_t> s = examples::shape(rng, 0, 3);
    e.label = "f32";
    e.inputs = {examples::values(rng, DType::F32, s), examples::values(rng, DType::F32, s)};
    e.grad = true;
  });
}

std::vector<OpExample> where_examples(ExampleRng& rng) {
  std::vector<OpExample> out;
  for (int rep = 0; rep < 4; ++rep) {
    const std::vector<int64_t> full = examples::shape(rng, 0, 3);
    std::vector<int64_t> s[3] = {examples::broadcastable_to(rng, full), examples::broadcastable_to(rng, full),
                                 examples::broadcastable_to(rng, full)};
    s[rep % 3] = full;
    const DType t = rep == 3 ? DType::I32 : DType::F32;
    OpExample e;
    e.label = dtype_name(t);
    e.inputs = {examples::values(rng, DType::Bool, s[0]), examples::values(rng, t, s[1]), examples::values(rng, t, s[2])};
    e.grad = t == DType::F32;
    out.push_back(std::move(e));
  }
  return out;
}

}  // namespace

// Long by design: records, one statement each.
void register_elementwise_ops(OpRegistry& r) {
  using enum Accepts;
  using enum Result;
  constexpr AutocastPolicy Follow = AutocastPolicy::Follow, F32 = AutocastPolicy::F32;
#define ON(...) Domain{__VA_ARGS__}
#define POINTWISE(...)                                                     \
  [](const double* in_, const Attrs& attrs_) -> double {                  \
    [[maybe_unused]] auto attr = [&](std::string_view n) { return attrs_.f(n); }; \
    __VA_ARGS__                                                           \
  }
#define UNARY(E, NAME, SIG, ACC, AC, MATH, GRAD, REF, DOM, SUM) \
  def_unary(r, OpKind::E, NAME, SIG, ACC, AC, MATH, GRAD, POINTWISE(const double x = in_[0]; return (REF);), DOM, SUM);
#define BINARY(E, NAME, ACC, RES, AC, MATH, GA, GB, REF, DA, DB, SUM)                                        \
  def_binary(r, OpKind::E, NAME, ACC, RES, AC, MATH, GA, GB, POINTWISE(const double a = in_[0], b = in_[1]; \
                                                                       return (REF);), DA, DB, SUM);
#include "compiler/ir/ops/elementwise.def"
#undef UNARY
#undef BINARY
#undef POINTWISE
#undef ON

  // gelu's scalar function depends on an attribute (the erf or the tanh form).
  r.def(OpKind::Gelu)
      .signature("x: tensor, approximate: str = \"none\"")
      .fusion(FusionKind::Elementwise)
      .infer([](InferCtx& ctx) {
        const TensorType& x = ctx.input(0);
        if (!is_float(x.dtype))
          return ctx.fail(fmt::format("gelu expects a floating-point tensor, got {}", x.str()), 0);
        const std::string& approx = ctx.attrs.s("approximate");
        if (approx != "none" && approx != "tanh")
          return ctx.fail_attr(fmt::format("gelu approximate must be \"none\" or \"tanh\", got \"{}\"", approx),
                               "approximate");
        ctx.out = {x};
      })
      .scalar([](const Attrs& a) -> std::string {
        if (a.has("approximate") && a.s("approximate") == "tanh")
          return "0.5 * x * (1 + tanh(0.7978845608028654 * (x + 0.044715 * x * x * x)))";  // sqrt(2/pi)
        return "0.5 * x * (1 + erf(x * 0.7071067811865476))";  // sqrt(2)/2
      })
      .pointwise([](const double* in, const Attrs& a) {
        return a.s("approximate") == "tanh" ? s_gelu_tanh(in[0]) : s_gelu_erf(in[0]);
      })
      .reference(pointwise_reference)
      .grad(grads::gelu)
      .domains({Domain{-4, 4}})
      .examples(gelu_examples)
      .summary("x * Phi(x), the Gaussian error linear unit (approximate: \"none\" = erf form, \"tanh\" = "
               "0.5x(1 + tanh(sqrt(2/pi)(x + 0.044715x^3))))");

  r.def(OpKind::Cast)
      .signature("x: tensor, dtype: dtype")
      .fusion(FusionKind::Elementwise)
      .infer([](InferCtx& ctx) {
        ctx.out = {TensorType{ctx.attrs.dtype("dtype"), ctx.input(0).shape}};
      })
      .reference([](RefCtx& c) {
        // The one elementwise op whose reference rounds: rounding is its meaning.
        const RefTensor& x = c.input(0);
        DType t = c.out[0].dtype;
        for (int64_t i = 0; i < x.numel(); ++i) c.out[0][i] = round_to_dtype(x[i], t);
      })
      .grad(grads::cast)
      .examples(cast_examples)
      .summary("converts to another dtype (round to nearest even; to i32 truncates toward zero)");

  r.def(OpKind::Where)
      .signature("cond: tensor, a: tensor, b: tensor")
      .fusion(FusionKind::Broadcast)
      .infer([](InferCtx& ctx) {
        const TensorType& cond = ctx.input(0);
        const TensorType& a = ctx.input(1);
        const TensorType& b = ctx.input(2);
        if (cond.dtype != DType::Bool)
          return ctx.fail(fmt::format("where expects a bool condition, got {}", cond.str()), 0);
        if (a.dtype != b.dtype)
          return ctx.fail(fmt::format("dtype mismatch in where: {} and {}", a.str(), b.str()));
        // Three shapes broadcast together exactly when every pair does (per dimension, at
        // most one extent other than 1); checking pairs lets the message name two inputs.
        auto ab = broadcast_or_fail(ctx, "where", a, b);
        if (!ab || !broadcast_or_fail(ctx, "where", cond, a) || !broadcast_or_fail(ctx, "where", cond, b)) return;
        ctx.out = {TensorType{a.dtype, *broadcast_shapes(cond.shape, *ab)}};
      })
      .math("select(c, a, b)")
      .pointwise([](const double* in, const Attrs&) { return in[0] != 0 ? in[1] : in[2]; })
      .reference(pointwise_reference)
      .grad_exprs({"", "select(c, g, 0)", "select(c, 0, g)"})
      .examples(where_examples)
      .summary("cond ? a : b elementwise (cond is bool), broadcasting all three");

  // The value of a name after `if training { ... } else { ... }`: `a` in train mode, `b` in
  // eval mode. Mode specialisation (passes/mode.h) replaces it by one of its inputs before a
  // function is lowered; the interpreter follows its `training` option, and as a kernel it
  // is train mode's.
  r.def(OpKind::ModeSelect)
      .internal()
      .signature("a: tensor, b: tensor")
      .fusion(FusionKind::Elementwise)
      .infer([](InferCtx& ctx) {
        const TensorType& a = ctx.input(0);
        const TensorType& b = ctx.input(1);
        if (a.dtype != b.dtype || a.shape != b.shape)
          return ctx.fail(fmt::format("train_or_eval: the train mode's {} and the eval mode's {} differ", a.str(), b.str()));
        ctx.out = {a};
      })
      .math("a")
      .pointwise([](const double* in, const Attrs&) { return in[0]; })
      .reference([](RefCtx& c) { c.out[0].data = (c.options.training ? c.input(0) : c.input(1)).data; })
      .grad_exprs({"g", "0 * g"})
      .examples(mode_select_examples)
      .summary("a in train mode, b in eval mode (the two branches of `if training`)");
}

}  // namespace modelc
