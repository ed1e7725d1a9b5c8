// Elementwise ops: shape rules (symbolic shapes, broadcasting, every refusal with its
// exact message) and the reference on fresh random inputs against independent loops.
#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <numbers>

#include "tests/ir/op_harness.h"

namespace modelc::test {
namespace {

// A shape that broadcasts to `out`: a random suffix of it (so often of lower rank), with
// some dims replaced by 1.
std::vector<int64_t> operand_for(const std::vector<int64_t>& out) {
  size_t rank = static_cast<size_t>(rnd(0, static_cast<int64_t>(out.size())));
  std::vector<int64_t> s(out.end() - static_cast<std::ptrdiff_t>(rank), out.end());
  for (int64_t& d : s)
    if (rnd(0, 2) == 0) d = 1;
  return s;
}

// numpy's result shape, computed independently of broadcast_shapes.
std::vector<int64_t> broadcast_result(const std::vector<std::vector<int64_t>>& shapes) {
  size_t rank = 0;
  for (const auto& s : shapes) rank = std::max(rank, s.size());
  std::vector<int64_t> out(rank, 1);
  for (const auto& s : shapes)
    for (size_t i = 0; i < s.size(); ++i) {
      int64_t& o = out[rank - s.size() + i];
      o = std::max(o, s[i]);
    }
  return out;
}

// The element of t that numpy pairs with the output position `idx` (row-major, by hand).
double at_broadcast(const RefTensor& t, const std::vector<int64_t>& idx) {
  size_t lead = idx.size() - t.shape.size();
  int64_t flat = 0;
  for (size_t d = 0; d < t.shape.size(); ++d) flat = flat * t.shape[d] + (t.shape[d] == 1 ? 0 : idx[lead + d]);
  return t[flat];
}

// --- unary ----------------------------------------------------------------------------

struct UnaryCase {
  OpKind op;
  const char* name;
  bool int_ok;
  double lo, hi;           // input range for the reference check
  double (*want)(double);  // written differently from the op's scalar function
};

const UnaryCase kUnary[] = {
    {OpKind::Neg, "neg", true, -5, 5, [](double x) { return 0.0 - x; }},
    {OpKind::Abs, "abs", true, -5, 5, [](double x) { return x < 0 ? -x : x; }},
    {OpKind::Exp, "exp", false, -5, 5, [](double x) { return std::pow(std::numbers::e, x); }},
    {OpKind::Log, "log", false, 0.01, 5, [](double x) { return std::log2(x) / std::numbers::log2e; }},
    {OpKind::Sqrt, "sqrt", false, 0, 5, [](double x) { return std::pow(x, 0.5); }},
    {OpKind::Rsqrt, "rsqrt", false, 0.01, 5, [](double x) { return std::pow(x, -0.5); }},
    {OpKind::Tanh, "tanh", false, -5, 5,
     [](double x) { return std::expm1(2 * x) / (std::exp(2 * x) + 1); }},
    {OpKind::Sigmoid, "sigmoid", false, -8, 8, [](double x) { return 0.5 * (1 + std::tanh(x / 2)); }},
    {OpKind::Relu, "relu", false, -5, 5, [](double x) { return std::max(x, 0.0); }},
    {OpKind::Silu, "silu", false, -8, 8, [](double x) { return x / (1 + std::exp(-x)); }},
};

TEST(ElementwiseUnary, ShapeRuleKeepsTypeAndRefusesWrongDtypes) {
  for (const UnaryCase& c : kUnary) {
    SCOPED_TRACE(c.name);
    expect_type(build_op(c.op, {f32({B, 3})}), f32({B, 3}));
    expect_type(build_op(c.op, {tt(DType::F16, {B, T})}), tt(DType::F16, {B, T}));
    expect_type(build_op(c.op, {tt(DType::BF16, {})}), tt(DType::BF16, {}));
    auto i32 = build_op(c.op, {tt(DType::I32, {B, 3})});
    if (c.int_ok) {
      expect_type(i32, tt(DType::I32, {B, 3}));
      expect_error(build_op(c.op, {tt(DType::Bool, {B, 3})}),
                   std::string(c.name) + " expects a floating-point or i32 tensor, got bool[B,3]", 0);
    } else {
      expect_error(i32, std::string(c.name) + " expects a floating-point tensor, got i32[B,3]", 0);
      expect_error(build_op(c.op, {tt(DType::Bool, {3})}),
                   std::string(c.name) + " expects a floating-point tensor, got bool[3]", 0);
    }
  }
}

TEST(ElementwiseUnary, ReferenceMatchesIndependentFormulas) {
  for (const UnaryCase& c : kUnary) {
    SCOPED_TRACE(c.name);
    for (int trial = 0; trial < 4; ++trial) {
      RefTensor x = random_tensor(random_float_dtype(), random_shape(rnd(0, 4)), c.lo, c.hi);
      RefTensor want = x;
      for (double& v : want.data) v = c.want(v);
      expect_near(run_op(build_op(c.op, {type_of(x)}), {x})[0], want, kTol, c.name);
    }
  }
}

TEST(ElementwiseUnary, SymbolicInputBindsFromTheFeed) {
  // The type says [B,3]; the run binds B from the fed tensor.
  RefTensor x = random_tensor(DType::F32, {rnd(1, 6), 3}, -3, 3);
  RefTensor want = x;
  for (double& v : want.data) v = std::pow(std::numbers::e, v);
  expect_near(run_op(build_op(OpKind::Exp, {f32({B, 3})}), {x})[0], want, kTol);
}

TEST(ElementwiseUnary, NegAndAbsStayIntegralOnI32) {
  for (OpKind op : {OpKind::Neg, OpKind::Abs}) {
    RefTensor x = random_tensor(DType::I32, random_shape(rnd(0, 3)), -100, 100);
    RefTensor got = run_op(build_op(op, {type_of(x)}), {x})[0];
    ASSERT_EQ(got.dtype, DType::I32);
    for (int64_t i = 0; i < x.numel(); ++i)
      EXPECT_EQ(got[i], op == OpKind::Neg ? -x[i] : (x[i] < 0 ? -x[i] : x[i]));
  }
}

TEST(ElementwiseUnary, ReferencePropagatesNaN) {
  for (const UnaryCase& c : kUnary) {
    RefTensor x(DType::F32, {1}, std::numeric_limits<double>::quiet_NaN());
    EXPECT_TRUE(std::isnan(run_op(build_op(c.op, {type_of(x)}), {x})[0][0])) << c.name;
  }
}

// --- gelu -----------------------------------------------------------------------------

TEST(ElementwiseGelu, ShapeRuleAndApproximateAttribute) {
  auto def = build_op(OpKind::Gelu, {f32({B, 3})});
  expect_type(def, f32({B, 3}));
  EXPECT_EQ(def.attrs().s("approximate"), "none");  // the default is filled in
  expect_type(build_op(OpKind::Gelu, {tt(DType::BF16, {T})}, attrs({{"approximate", std::string("tanh")}})),
              tt(DType::BF16, {T}));
  expect_error(build_op(OpKind::Gelu, {f32({B, 3})}, attrs({{"approximate", std::string("foo")}})),
               "gelu approximate must be \"none\" or \"tanh\", got \"foo\"", -1, "approximate");
  expect_error(build_op(OpKind::Gelu, {tt(DType::I32, {B, 3})}), "gelu expects a floating-point tensor, got i32[B,3]", 0);
}

TEST(ElementwiseGelu, ReferenceErfAndTanhForms) {
  for (int trial = 0; trial < 4; ++trial) {
    RefTensor x = random_tensor(random_float_dtype(), random_shape(rnd(0, 4)), -6, 6);
    RefTensor exact = x, approx = x;
    for (double& v : exact.data) v = v * 0.5 * std::erfc(-v / std::numbers::sqrt2);
    // 0.5 * (1 + tanh(z)) == sigmoid(2z): the tanh form written through the sigmoid.
    const double k = std::sqrt(2 / std::numbers::pi);
    for (double& v : approx.data) v = v / (1 + std::exp(-2 * k * (v + 0.044715 * v * v * v)));
    expect_near(run_op(build_op(OpKind::Gelu, {type_of(x)}), {x})[0], exact, kTol, "erf");
    expect_near(run_op(build_op(OpKind::Gelu, {type_of(x)}, attrs({{"approximate", std::string("tanh")}})), {x})[0],
                approx, kTol, "tanh");
  }
}

// --- cast -----------------------------------------------------------------------------

TEST(ElementwiseCast, ShapeRuleTakesTheNewDtype) {
  expect_type(build_op(OpKind::Cast, {f32({B, 3})}, attrs({{"dtype", DType::F16}})), tt(DType::F16, {B, 3}));
  expect_type(build_op(OpKind::Cast, {tt(DType::Bool, {B})}, attrs({{"dtype", DType::F32}})), f32({B}));
  expect_type(build_op(OpKind::Cast, {tt(DType::BF16, {})}, attrs({{"dtype", DType::I32}})), tt(DType::I32, {}));
  expect_type(build_op(OpKind::Cast, {tt(DType::I32, {T, B})}, attrs({{"dtype", DType::Bool}})),
              tt(DType::Bool, {T, B}));
}

// Independent roundings of an f32 value (the inputs below are all exact f32 values, so
// rounding through float first is not a double rounding).
double to_f16(double x) { return static_cast<double>(static_cast<float>(static_cast<_Float16>(static_cast<float>(x)))); }
double to_bf16(double x) {
  float f = static_cast<float>(x);
  if (std::isnan(f)) return x;
  uint32_t bits = std::bit_cast<uint32_t>(f);
  bits += 0x7fffu + ((bits >> 16) & 1u);  // round to nearest even on the upper 16 bits
  return static_cast<double>(std::bit_cast<float>(bits & 0xffff0000u));
}
double to_i32(double x) {
  if (std::isnan(x)) return 0;
  if (x >= 2147483648.0) return 2147483647.0;
  if (x <= -2147483649.0) return -2147483648.0;
  return static_cast<double>(static_cast<int64_t>(x));  // truncates toward zero
}

TEST(ElementwiseCast, ReferenceRoundsLikeTheTargetType) {
  const double inf = std::numeric_limits<double>::infinity();
  std::vector<double> vals = {0.1, -0.1, 65504, 65520, 1e-7, 3e-8, 3e38, 3.4e38, 1e-40,
                              2.5, -2.5, 3e9, -3e9, 0.0, -0.0, inf, -inf,
                              std::numeric_limits<double>::quiet_NaN()};
  // Values across many binades, so that every rounding regime is met.
  for (int i = 0; i < 200; ++i)
    vals.push_back(std::ldexp(std::uniform_real_distribution<double>(-1, 1)(rng()), static_cast<int>(rnd(-30, 34))));
  RefTensor x(DType::F32, {static_cast<int64_t>(vals.size())});
  for (size_t i = 0; i < vals.size(); ++i) x.data[i] = static_cast<double>(static_cast<float>(vals[i]));

  struct Target { DType t; double (*round)(double); };
  const Target targets[] = {
      {DType::F32, [](double v) { return static_cast<double>(static_cast<float>(v)); }},
      {DType::F16, to_f16},
      {DType::BF16, to_bf16},
      {DType::I32, to_i32},
      {DType::Bool, [](double v) { return v == 0 ? 0.0 : 1.0; }},
  };
  for (const Target& tg : targets) {
    RefTensor want(tg.t, x.shape);
    for (int64_t i = 0; i < x.numel(); ++i) want[i] = tg.round(x[i]);
    auto o = build_op(OpKind::Cast, {type_of(x)}, attrs({{"dtype", tg.t}}));
    expect_near(run_op(o, {x})[0], want, 0, std::string(dtype_name(tg.t)));
  }
}

// --- binary ---------------------------------------------------------------------------

struct BinaryCase {
  OpKind op;
  const char* name;
  bool int_ok, bool_ok, compare;
  double lo, hi;                   // operand range for the reference check
  double (*want)(double, double);  // by hand
};

const BinaryCase kBinary[] = {
    {OpKind::Add, "add", true, false, false, -5, 5, [](double a, double b) { return a - -b; }},
    {OpKind::Sub, "sub", true, false, false, -5, 5, [](double a, double b) { return a + -b; }},
    {OpKind::Mul, "mul", true, false, false, -5, 5, [](double a, double b) { return a * b; }},
    {OpKind::Div, "div", false, false, false, 0.5, 5, [](double a, double b) { return a * (1 / b); }},
    {OpKind::Pow, "pow", false, false, false, 0.1, 3, [](double a, double b) { return std::exp(b * std::log(a)); }},
    {OpKind::Maximum, "maximum", true, false, false, -5, 5, [](double a, double b) { return std::max(a, b); }},
    {OpKind::Minimum, "minimum", true, false, false, -5, 5, [](double a, double b) { return std::min(a, b); }},
    // Comparisons run on small integers so that ties (where lt/le differ) are frequent.
    {OpKind::Lt, "lt", true, false, true, -2, 2, [](double a, double b) { return b - a > 0 ? 1.0 : 0.0; }},
    {OpKind::Le, "le", true, false, true, -2, 2, [](double a, double b) { return b - a >= 0 ? 1.0 : 0.0; }},
    {OpKind::Gt, "gt", true, false, true, -2, 2, [](double a, double b) { return a - b > 0 ? 1.0 : 0.0; }},
    {OpKind::Ge, "ge", true, false, true, -2, 2, [](double a, double b) { return a - b >= 0 ? 1.0 : 0.0; }},
    {OpKind::Eq, "eq", true, true, true, -2, 2, [](double a, double b) { return a - b == 0 ? 1.0 : 0.0; }},
    {OpKind::Ne, "ne", true, true, true, -2, 2, [](double a, double b) { return a - b == 0 ? 0.0 : 1.0; }},
};

TEST(ElementwiseBinary, ShapeRuleBroadcastsSymbolicShapes) {
  for (const BinaryCase& c : kBinary) {
    SCOPED_TRACE(c.name);
    DType out = c.compare ? DType::Bool : DType::F32;
    auto check = [&](TensorType a, TensorType b, Shape want) {
      expect_type(build_op(c.op, {a, b}), tt(out, std::move(want)));
    };
    check(f32({B, 3}), f32({3}), {B, 3});
    check(f32({3}), f32({B, 3}), {B, 3});
    check(f32({B, 1}), f32({1, 4}), {B, 4});
    check(f32({}), f32({B, 3}), {B, 3});
    check(f32({B, 3}), f32({B, 3}), {B, 3});
    check(f32({B, 1, 3}), f32({T, 1}), {B, T, 3});
    check(f32({B * T, 4}), f32({B * T, 1}), {B * T, 4});
    check(f32({1}), f32({B}), {B});
    DType f16_out = c.compare ? DType::Bool : DType::F16;
    expect_type(build_op(c.op, {tt(DType::F16, {B, 2}), tt(DType::F16, {2})}), tt(f16_out, {B, 2}));
  }
}

TEST(ElementwiseBinary, ShapeRuleRefusals) {
  for (const BinaryCase& c : kBinary) {
    SCOPED_TRACE(c.name);
    std::string n = c.name;
    expect_error(build_op(c.op, {f32({B, 3}), f32({4})}),
                 "cannot broadcast f32[B,3] and f32[4] in " + n + " (dimension 1 from the end: 3 vs 4)");
    expect_error(build_op(c.op, {f32({B, 2, 3}), f32({5, 3})}),
                 "cannot broadcast f32[B,2,3] and f32[5,3] in " + n + " (dimension 2 from the end: 2 vs 5)");
    // Two different symbols may be equal at run time, but the rule cannot know it.
    expect_error(build_op(c.op, {f32({B}), f32({T})}),
                 "cannot broadcast f32[B] and f32[T] in " + n + " (dimension 1 from the end: B vs T)");
    expect_error(build_op(c.op, {f32({B, 3}), tt(DType::F16, {3})}), "dtype mismatch in " + n + ": f32[B,3] and f16[3]");
    expect_error(build_op(c.op, {tt(DType::I32, {B}), f32({B})}), "dtype mismatch in " + n + ": i32[B] and f32[B]");

    auto i32 = build_op(c.op, {tt(DType::I32, {B, 3}), tt(DType::I32, {3})});
    if (c.int_ok) expect_type(i32, tt(c.compare ? DType::Bool : DType::I32, {B, 3}));
    else expect_error(i32, n + " expects floating-point tensors, got i32[B,3]", 0);

    auto bools = build_op(c.op, {tt(DType::Bool, {B}), tt(DType::Bool, {1})});
    if (c.bool_ok) expect_type(bools, tt(DType::Bool, {B}));
    else
      expect_error(bools, n + " expects floating-point" + (c.int_ok ? " or i32" : "") + " tensors, got bool[B]", 0);
  }
}

// Runs op on a and b and compares with c.want applied by hand-written broadcasting.
void check_binary(const BinaryCase& c, const RefTensor& a, const RefTensor& b) {
  std::vector<int64_t> shape = broadcast_result({a.shape, b.shape});
  auto o = build_op(c.op, {type_of(a), type_of(b)});
  ASSERT_FALSE(o.error) << o.error->message;
  RefTensor want(c.compare ? DType::Bool : a.dtype, shape);
  for (int64_t i = 0; i < want.numel(); ++i) {
    auto idx = unflatten(i, shape);
    want[i] = c.want(at_broadcast(a, idx), at_broadcast(b, idx));
  }
  expect_near(run_op(o, {a, b})[0], want, kTol, std::string(c.name) + " " + a.shape_str() + " " + b.shape_str());
}

RefTensor operand(const BinaryCase& c, DType t, std::vector<int64_t> shape) {
  RefTensor x = random_tensor(t, std::move(shape), c.lo, c.hi);
  if (c.compare)
    for (double& v : x.data) v = std::floor(v);
  return x;
}

TEST(ElementwiseBinary, ReferenceOnRandomBroadcasts) {
  for (const BinaryCase& c : kBinary) {
    SCOPED_TRACE(c.name);
    for (int trial = 0; trial < 6; ++trial) {
      DType t = random_float_dtype();
      std::vector<int64_t> out = random_shape(rnd(0, 4));
      // Either side may be the smaller one.
      std::vector<int64_t> sa = operand_for(out), sb = out;
      if (trial % 2) std::swap(sa, sb);
      check_binary(c, operand(c, t, sa), operand(c, t, sb));
    }
    // Ranks that differ, and a pair where each side broadcasts along a different axis.
    DType t = random_float_dtype();
    int64_t n = rnd(1, 5);
    check_binary(c, operand(c, t, {2, 3, n}), operand(c, t, {n}));
    check_binary(c, operand(c, t, {n, 1}), operand(c, t, {2, 1, 4}));
    check_binary(c, operand(c, t, {}), operand(c, t, {n, 3}));
  }
}

TEST(ElementwiseBinary, ReferenceOnI32StaysIntegral) {
  for (const BinaryCase& c : kBinary) {
    if (!c.int_ok) continue;
    SCOPED_TRACE(c.name);
    std::vector<int64_t> out = random_shape(rnd(0, 3));
    RefTensor a = random_tensor(DType::I32, operand_for(out), -50, 50);
    RefTensor b = random_tensor(DType::I32, out, -50, 50);
    check_binary(c, a, b);
    RefTensor got = run_op(build_op(c.op, {type_of(a), type_of(b)}), {a, b})[0];
    for (double v : got.data) EXPECT_EQ(v, std::trunc(v));
  }
}

TEST(ElementwiseBinary, EqualityOnBool) {
  for (const BinaryCase& c : kBinary) {
    if (!c.bool_ok) continue;
    std::vector<int64_t> out = random_shape(rnd(0, 3));
    check_binary(c, random_tensor(DType::Bool, out), random_tensor(DType::Bool, operand_for(out)));
  }
}

TEST(ElementwiseBinary, ReferenceBindsSymbolicDims) {
  // f32[B,3] + f32[3] with B taken from the feed.
  RefTensor a = random_tensor(DType::F32, {rnd(1, 6), 3});
  RefTensor b = random_tensor(DType::F32, {3});
  RefTensor want(DType::F32, a.shape);
  for (int64_t i = 0; i < a.numel(); ++i) want[i] = a[i] + b[i % 3];
  expect_near(run_op(build_op(OpKind::Add, {f32({B, 3}), f32({3})}), {a, b})[0], want, kTol);
}

TEST(ElementwiseBinary, MaximumAndMinimumPropagateNaN) {
  RefTensor a(DType::F32, {2}), b(DType::F32, {2});
  a[0] = std::numeric_limits<double>::quiet_NaN(); a[1] = 1;
  b[0] = 1; b[1] = std::numeric_limits<double>::quiet_NaN();
  for (OpKind op : {OpKind::Maximum, OpKind::Minimum}) {
    RefTensor r = run_op(build_op(op, {type_of(a), type_of(b)}), {a, b})[0];
    EXPECT_TRUE(std::isnan(r[0]) && std::isnan(r[1]));
  }
}

// --- where ----------------------------------------------------------------------------

TEST(ElementwiseWhere, ShapeRule) {
  const TensorType cond = tt(DType::Bool, {B, 1});
  expect_type(build_op(OpKind::Where, {cond, f32({3}), f32({})}), f32({B, 3}));
  expect_type(build_op(OpKind::Where, {tt(DType::Bool, {}), f32({B, T}), f32({T})}), f32({B, T}));
  expect_type(build_op(OpKind::Where, {tt(DType::Bool, {T, 1, 1}), tt(DType::I32, {B, 1}), tt(DType::I32, {5})}),
              tt(DType::I32, {T, B, 5}));
  expect_type(build_op(OpKind::Where, {cond, tt(DType::Bool, {B, 2}), tt(DType::Bool, {2})}), tt(DType::Bool, {B, 2}));

  expect_error(build_op(OpKind::Where, {f32({B, 3}), f32({3}), f32({3})}), "where expects a bool condition, got f32[B,3]", 0);
  expect_error(build_op(OpKind::Where, {cond, f32({3}), tt(DType::F16, {3})}), "dtype mismatch in where: f32[3] and f16[3]");
  expect_error(build_op(OpKind::Where, {cond, f32({2}), f32({5})}),
               "cannot broadcast f32[2] and f32[5] in where (dimension 1 from the end: 2 vs 5)");
  expect_error(build_op(OpKind::Where, {tt(DType::Bool, {B, 3}), f32({4}), f32({})}),
               "cannot broadcast bool[B,3] and f32[4] in where (dimension 1 from the end: 3 vs 4)");
  expect_error(build_op(OpKind::Where, {tt(DType::Bool, {B, 3}), f32({}), f32({T, 1})}),
               "cannot broadcast bool[B,3] and f32[T,1] in where (dimension 2 from the end: B vs T)");
}

TEST(ElementwiseWhere, ReferenceOnRandomBroadcasts) {
  for (int trial = 0; trial < 8; ++trial) {
    std::vector<int64_t> out = random_shape(rnd(0, 4));
    std::vector<int64_t> shapes[3] = {operand_for(out), operand_for(out), operand_for(out)};
    shapes[trial % 3] = out;  // the full shape comes from a different operand each time
    DType t = random_float_dtype();
    RefTensor cond = random_tensor(DType::Bool, shapes[0]);
    RefTensor a = random_tensor(t, shapes[1]), b = random_tensor(t, shapes[2]);
    auto o = build_op(OpKind::Where, {type_of(cond), type_of(a), type_of(b)});
    ASSERT_FALSE(o.error) << o.error->message;
    RefTensor want(t, out);
    for (int64_t i = 0; i < want.numel(); ++i) {
      auto idx = unflatten(i, out);
      want[i] = at_broadcast(cond, idx) == 1 ? at_broadcast(a, idx) : at_broadcast(b, idx);
    }
    expect_near(run_op(o, {cond, a, b})[0], want, 0, cond.shape_str() + a.shape_str() + b.shape_str());
  }
}

// --- registry entries -----------------------------------------------------------------

TEST(ElementwiseRegistry, EntriesCarryTheirScalarFunctionsAndFusionKinds) {
  for (const UnaryCase& c : kUnary) {
    const OpInfo& info = op_info(c.op);
    EXPECT_EQ(info.signature_text, "x: tensor") << c.name;
    EXPECT_EQ(info.fusion, FusionKind::Elementwise) << c.name;
    ASSERT_NE(info.unary, nullptr) << c.name;
    double x = c.lo + 0.37 * (c.hi - c.lo);
    EXPECT_NEAR(info.unary(x), c.want(x), kTol * (1 + std::fabs(c.want(x)))) << c.name;
    EXPECT_FALSE(info.summary.empty()) << c.name;
  }
  for (const BinaryCase& c : kBinary) {
    const OpInfo& info = op_info(c.op);
    EXPECT_EQ(info.signature_text, "a: tensor, b: tensor") << c.name;
    EXPECT_EQ(info.fusion, FusionKind::Broadcast) << c.name;
    ASSERT_NE(info.binary, nullptr) << c.name;
    EXPECT_NEAR(info.binary(1.5, 0.5), c.want(1.5, 0.5), kTol) << c.name;
    EXPECT_FALSE(info.summary.empty()) << c.name;
  }
  EXPECT_EQ(op_info(OpKind::Gelu).signature_text, "x: tensor, approximate: str = \"none\"");
  EXPECT_EQ(op_info(OpKind::Gelu).unary, nullptr);  // its function depends on an attribute
  EXPECT_EQ(op_info(OpKind::Cast).signature_text, "x: tensor, dtype: dtype");
  EXPECT_EQ(op_info(OpKind::Where).signature_text, "cond: tensor, a: tensor, b: tensor");
  EXPECT_EQ(op_info(OpKind::Where).fusion, FusionKind::Broadcast);
  EXPECT_EQ(OpRegistry::get().find("silu"), &op_info(OpKind::Silu));
}

}  // namespace
}  // namespace modelc::test
