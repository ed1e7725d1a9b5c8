// Elementwise ops: unary math, cast, binary arithmetic and comparisons with numpy
// broadcasting, and where.
//
// Unary and binary ops carry their scalar function in the registry (.unary / .binary) so
// that fusion and codegen can use it without knowing the op; the reference just maps it.
// The reference computes in double and never rounds (only cast does): it is the oracle,
// and backends are compared against it with a tolerance suited to their dtype.
#include <cmath>
#include <limits>
#include <numbers>

#include <fmt/format.h>

#include "compiler/ir/op_registry.h"

namespace modelc {
namespace {

// --- scalar definitions ---------------------------------------------------------------

double s_neg(double x) { return -x; }
double s_abs(double x) { return std::fabs(x); }
double s_exp(double x) { return std::exp(x); }
double s_log(double x) { return std::log(x); }
double s_sqrt(double x) { return std::sqrt(x); }
double s_rsqrt(double x) { return 1.0 / std::sqrt(x); }
double s_tanh(double x) { return std::tanh(x); }
// Two branches so that exp never overflows: for very negative x, 1/(1+exp(-x)) would
// compute exp(+large) = inf (harmless here, but the form matters for codegen's f32).
double s_sigmoid(double x) {
  if (x >= 0) return 1.0 / (1.0 + std::exp(-x));
  double e = std::exp(x);
  return e / (1.0 + e);
}
double s_relu(double x) { return x > 0 ? x : (std::isnan(x) ? x : 0.0); }
double s_silu(double x) { return x * s_sigmoid(x); }
double s_erf(double x) { return std::erf(x); }
double s_gelu_erf(double x) { return 0.5 * x * (1.0 + std::erf(x * std::numbers::sqrt2 / 2)); }
double s_gelu_tanh(double x) {
  const double k = std::sqrt(2.0 / std::numbers::pi);
  return 0.5 * x * (1.0 + std::tanh(k * (x + 0.044715 * x * x * x)));
}

double s_add(double a, double b) { return a + b; }
double s_sub(double a, double b) { return a - b; }
double s_mul(double a, double b) { return a * b; }
double s_div(double a, double b) { return a / b; }
double s_pow(double a, double b) { return std::pow(a, b); }
// NaN propagates (as in PyTorch's maximum/minimum), unlike std::fmax which drops it: a NaN
// in training must not be silently hidden by a clamp.
double s_maximum(double a, double b) {
  if (std::isnan(a) || std::isnan(b)) return std::numeric_limits<double>::quiet_NaN();
  return a > b ? a : b;
}
double s_minimum(double a, double b) {
  if (std::isnan(a) || std::isnan(b)) return std::numeric_limits<double>::quiet_NaN();
  return a < b ? a : b;
}
double s_lt(double a, double b) { return a < b ? 1.0 : 0.0; }
double s_le(double a, double b) { return a <= b ? 1.0 : 0.0; }
double s_gt(double a, double b) { return a > b ? 1.0 : 0.0; }
double s_ge(double a, double b) { return a >= b ? 1.0 : 0.0; }
double s_eq(double a, double b) { return a == b ? 1.0 : 0.0; }
double s_ne(double a, double b) { return a != b ? 1.0 : 0.0; }

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

void def_unary(OpRegistry& r, OpKind k, std::string name, UnaryFn fn, Accepts acc,
               std::string summary) {
  r.def(k)
      .signature("x: tensor")
      .fusion(FusionKind::Elementwise)
      .unary(fn)
      .infer([name, acc](InferCtx& ctx) {
        const TensorType& x = ctx.input(0);
        if (!accepts(acc, x.dtype))
          return ctx.fail(fmt::format("{} expects {}, got {}", name, expected_text(acc, false), x.str()), 0);
        ctx.out = {x};
      })
      .reference([fn](RefCtx& c) {
        const RefTensor& x = c.input(0);
        for (int64_t i = 0; i < x.numel(); ++i) c.out[0][i] = fn(x[i]);
      })
      .summary(std::move(summary));
}

// A binary op with broadcasting. `acc` is what a and b (which must agree) may be;
// `to_bool` makes the output bool (comparisons) instead of the inputs' dtype.
void def_binary(OpRegistry& r, OpKind k, std::string name, BinaryFn fn, Accepts acc, bool to_bool,
                std::string summary) {
  r.def(k)
      .signature("a: tensor, b: tensor")
      .fusion(FusionKind::Broadcast)
      .binary(fn)
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
      .reference([fn](RefCtx& c) {
        const RefTensor& a = c.input(0);
        const RefTensor& b = c.input(1);
        RefTensor& out = c.out[0];
        broadcast_each(out, {&a, &b}, [&](int64_t i, const std::vector<int64_t>& off) {
          out[i] = fn(a[off[0]], b[off[1]]);
        });
      })
      .summary(std::move(summary));
}

}  // namespace

void register_elementwise_ops(OpRegistry& r) {
  const Accepts F = Accepts::Float, FI = Accepts::FloatOrInt;
  def_unary(r, OpKind::Neg, "neg", s_neg, FI, "-x");
  def_unary(r, OpKind::Abs, "abs", s_abs, FI, "|x|");
  def_unary(r, OpKind::Exp, "exp", s_exp, F, "e^x");
  def_unary(r, OpKind::Log, "log", s_log, F, "natural logarithm");
  def_unary(r, OpKind::Sqrt, "sqrt", s_sqrt, F, "square root");
  def_unary(r, OpKind::Rsqrt, "rsqrt", s_rsqrt, F, "1 / sqrt(x)");
  def_unary(r, OpKind::Tanh, "tanh", s_tanh, F, "hyperbolic tangent");
  def_unary(r, OpKind::Sigmoid, "sigmoid", s_sigmoid, F, "1 / (1 + e^-x)");
  def_unary(r, OpKind::Relu, "relu", s_relu, F, "max(x, 0)");
  def_unary(r, OpKind::Silu, "silu", s_silu, F, "x * sigmoid(x)");
  def_unary(r, OpKind::Erf, "erf", s_erf, F, "the error function 2/sqrt(pi) * integral of e^(-t^2) from 0 to x");

  // gelu's scalar function depends on an attribute, which a single UnaryFn cannot
  // express; .unary stays unset so that no pass applies the erf form to a tanh-form node.
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
      .reference([](RefCtx& c) {
        UnaryFn fn = c.attrs().s("approximate") == "tanh" ? s_gelu_tanh : s_gelu_erf;
        const RefTensor& x = c.input(0);
        for (int64_t i = 0; i < x.numel(); ++i) c.out[0][i] = fn(x[i]);
      })
      .summary("Gaussian error linear unit (approximate: \"none\" = erf form, \"tanh\")");

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
      .summary("converts to another dtype (round to nearest even; to i32 truncates)");

  def_binary(r, OpKind::Add, "add", s_add, FI, false, "a + b, broadcasting");
  def_binary(r, OpKind::Sub, "sub", s_sub, FI, false, "a - b, broadcasting");
  def_binary(r, OpKind::Mul, "mul", s_mul, FI, false, "a * b, broadcasting");
  // Integer division and integer powers have semantics (rounding, negative exponents) the
  // language does not define; they are refused rather than guessed.
  def_binary(r, OpKind::Div, "div", s_div, F, false, "a / b, broadcasting");
  def_binary(r, OpKind::Pow, "pow", s_pow, F, false, "a ^ b, broadcasting");
  // Autocast runs these in f32 (as PyTorch's autocast does): their range and accuracy
  // suffer most in a 16-bit type.
  for (OpKind k : {OpKind::Exp, OpKind::Log, OpKind::Pow}) r.def(k).autocast(AutocastPolicy::F32);
  def_binary(r, OpKind::Maximum, "maximum", s_maximum, FI, false, "elementwise max(a, b), NaN propagates");
  def_binary(r, OpKind::Minimum, "minimum", s_minimum, FI, false, "elementwise min(a, b), NaN propagates");
  // Ordering is not defined on bool; equality is (masks compare with masks).
  def_binary(r, OpKind::Lt, "lt", s_lt, FI, true, "a < b as bool, broadcasting");
  def_binary(r, OpKind::Le, "le", s_le, FI, true, "a <= b as bool, broadcasting");
  def_binary(r, OpKind::Gt, "gt", s_gt, FI, true, "a > b as bool, broadcasting");
  def_binary(r, OpKind::Ge, "ge", s_ge, FI, true, "a >= b as bool, broadcasting");
  def_binary(r, OpKind::Eq, "eq", s_eq, Accepts::Any, true, "a == b as bool, broadcasting");
  def_binary(r, OpKind::Ne, "ne", s_ne, Accepts::Any, true, "a != b as bool, broadcasting");

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
      .reference([](RefCtx& c) {
        const RefTensor& cond = c.input(0);
        const RefTensor& a = c.input(1);
        const RefTensor& b = c.input(2);
        RefTensor& out = c.out[0];
        broadcast_each(out, {&cond, &a, &b}, [&](int64_t i, const std::vector<int64_t>& off) {
          out[i] = cond[off[0]] != 0 ? a[off[1]] : b[off[2]];
        });
      })
      .summary("cond ? a : b elementwise, broadcasting all three");
}

}  // namespace modelc
