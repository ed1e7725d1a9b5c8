// Elementwise ops: shape rules (symbolic shapes, broadcasting, every refusal with its
// exact message) and the reference's broadcasting on fresh random inputs against
// independent loops. The ops come from the registry (the records of elementwise.def): what
// each takes is read from its shape rule, its scalar function is its record's `pointwise`
// (tests/conformance checks that against the compiled kernels and the gradients).
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

// --- the table ops -----------------------------------------------------------------------

// The elementwise ops given whole by their records (a pointwise function and a domain) with
// `inputs` tensor parameters.
std::vector<const OpInfo*> table_ops(size_t inputs) {
  std::vector<const OpInfo*> ops;
  for (const OpInfo& op : OpRegistry::get().all()) {
    size_t tensors = 0;
    for (const ParamSpec& p : op.params) tensors += p.kind == ParamKind::Tensor;
    if (op.pointwise && !op.domains.empty() && tensors == inputs && op.math == MathKind::Scalar) ops.push_back(&op);
  }
  return ops;
}

// Whether the shape rule takes operands of dtype t (read from the rule, not a list).
bool takes(const OpInfo& op, DType t, size_t inputs) {
  std::vector<std::optional<TensorType>> in(inputs, tt(t, {3}));
  return !build_op(op.kind, in).error;
}

// A comparison: f32 operands give bool.
bool compares(const OpInfo& op) {
  auto o = build_op(op.kind, {f32({3}), f32({3})});
  return !o.error && o.g.node(o.node).outputs[0].dtype == DType::Bool;
}

// What the tests below iterate: the records of elementwise.def, found by their contents.
TEST(ElementwiseUnary, TheTablesHoldTheRecords) {
  std::vector<std::string> names;
  for (size_t inputs : {1, 2})
    for (const OpInfo* op : table_ops(inputs)) names.push_back(op->name);
  for (const char* n : {"exp", "relu", "softplus", "leaky_relu", "log1p", "add", "pow", "eq"})
    EXPECT_NE(std::find(names.begin(), names.end(), n), names.end()) << n;
}

TEST(ElementwiseUnary, ShapeRuleKeepsTypeAndRefusesWrongDtypes) {
  for (const OpInfo* op : table_ops(1)) {
    SCOPED_TRACE(op->name);
    expect_type(build_op(op->kind, {f32({B, 3})}), f32({B, 3}));
    expect_type(build_op(op->kind, {tt(DType::F16, {B, T})}), tt(DType::F16, {B, T}));
    expect_type(build_op(op->kind, {tt(DType::BF16, {})}), tt(DType::BF16, {}));
    auto i32 = build_op(op->kind, {tt(DType::I32, {B, 3})});
    if (takes(*op, DType::I32, 1)) {
      expect_type(i32, tt(DType::I32, {B, 3}));
      expect_error(build_op(op->kind, {tt(DType::Bool, {B, 3})}),
                   op->name + " expects a floating-point or i32 tensor, got bool[B,3]", 0);
    } else {
      expect_error(i32, op->name + " expects a floating-point tensor, got i32[B,3]", 0);
      expect_error(build_op(op->kind, {tt(DType::Bool, {3})}), op->name + " expects a floating-point tensor, got bool[3]", 0);
    }
  }
}

TEST(ElementwiseUnary, ReferenceIsThePointwiseFunctionOfEachElement) {
  for (const OpInfo* op : table_ops(1)) {
    SCOPED_TRACE(op->name);
    for (int trial = 0; trial < 3; ++trial) {
      RefTensor x = random_tensor(random_float_dtype(), random_shape(rnd(0, 4)), op->domains[0].lo, op->domains[0].hi);
      auto o = build_op(op->kind, {type_of(x)});
      RefTensor want = x;
      for (double& v : want.data) v = op->pointwise(&v, o.attrs());
      expect_near(run_op(o, {x})[0], want, 0, op->name);
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

TEST(ElementwiseBinary, ShapeRuleBroadcastsSymbolicShapes) {
  for (const OpInfo* op : table_ops(2)) {
    SCOPED_TRACE(op->name);
    const bool compare = compares(*op);
    DType out = compare ? DType::Bool : DType::F32;
    auto check = [&](TensorType a, TensorType b, Shape want) {
      expect_type(build_op(op->kind, {a, b}), tt(out, std::move(want)));
    };
    check(f32({B, 3}), f32({3}), {B, 3});
    check(f32({3}), f32({B, 3}), {B, 3});
    check(f32({B, 1}), f32({1, 4}), {B, 4});
    check(f32({}), f32({B, 3}), {B, 3});
    check(f32({B, 3}), f32({B, 3}), {B, 3});
    check(f32({B, 1, 3}), f32({T, 1}), {B, T, 3});
    check(f32({B * T, 4}), f32({B * T, 1}), {B * T, 4});
    check(f32({1}), f32({B}), {B});
    DType f16_out = compare ? DType::Bool : DType::F16;
    expect_type(build_op(op->kind, {tt(DType::F16, {B, 2}), tt(DType::F16, {2})}), tt(f16_out, {B, 2}));
  }
}

TEST(ElementwiseBinary, ShapeRuleRefusals) {
  for (const OpInfo* op : table_ops(2)) {
    SCOPED_TRACE(op->name);
    const std::string n = op->name;
    const bool int_ok = takes(*op, DType::I32, 2), bool_ok = takes(*op, DType::Bool, 2), compare = compares(*op);
    expect_error(build_op(op->kind, {f32({B, 3}), f32({4})}),
                 "cannot broadcast f32[B,3] and f32[4] in " + n + " (dimension 1 from the end: 3 vs 4)");
    expect_error(build_op(op->kind, {f32({B, 2, 3}), f32({5, 3})}),
                 "cannot broadcast f32[B,2,3] and f32[5,3] in " + n + " (dimension 2 from the end: 2 vs 5)");
    // Two different symbols may be equal at run time, but the rule cannot know it.
    expect_error(build_op(op->kind, {f32({B}), f32({T})}),
                 "cannot broadcast f32[B] and f32[T] in " + n + " (dimension 1 from the end: B vs T)");
    expect_error(build_op(op->kind, {f32({B, 3}), tt(DType::F16, {3})}), "dtype mismatch in " + n + ": f32[B,3] and f16[3]");
    expect_error(build_op(op->kind, {tt(DType::I32, {B}), f32({B})}), "dtype mismatch in " + n + ": i32[B] and f32[B]");

    auto i32 = build_op(op->kind, {tt(DType::I32, {B, 3}), tt(DType::I32, {3})});
    if (int_ok) expect_type(i32, tt(compare ? DType::Bool : DType::I32, {B, 3}));
    else expect_error(i32, n + " expects floating-point tensors, got i32[B,3]", 0);

    auto bools = build_op(op->kind, {tt(DType::Bool, {B}), tt(DType::Bool, {1})});
    if (bool_ok) expect_type(bools, tt(DType::Bool, {B}));
    else
      expect_error(bools, n + " expects floating-point" + (int_ok ? " or i32" : "") + " tensors, got bool[B]", 0);
  }
}

// Runs op on a and b and compares with its pointwise function applied by hand-written
// broadcasting.
void check_binary(const OpInfo& op, const RefTensor& a, const RefTensor& b) {
  std::vector<int64_t> shape = broadcast_result({a.shape, b.shape});
  auto o = build_op(op.kind, {type_of(a), type_of(b)});
  ASSERT_FALSE(o.error) << o.error->message;
  RefTensor want(o.g.node(o.node).outputs[0].dtype, shape);
  for (int64_t i = 0; i < want.numel(); ++i) {
    auto idx = unflatten(i, shape);
    const double in[] = {at_broadcast(a, idx), at_broadcast(b, idx)};
    want[i] = op.pointwise(in, o.attrs());
  }
  expect_near(run_op(o, {a, b})[0], want, 0, op.name + " " + a.shape_str() + " " + b.shape_str());
}

RefTensor operand(const OpInfo& op, size_t k, DType t, std::vector<int64_t> shape) {
  return random_tensor(t, std::move(shape), op.domains[std::min(k, op.domains.size() - 1)].lo,
                       op.domains[std::min(k, op.domains.size() - 1)].hi);
}

TEST(ElementwiseBinary, ReferenceOnRandomBroadcasts) {
  for (const OpInfo* op : table_ops(2)) {
    SCOPED_TRACE(op->name);
    for (int trial = 0; trial < 6; ++trial) {
      DType t = random_float_dtype();
      std::vector<int64_t> out = random_shape(rnd(0, 4));
      // Either side may be the smaller one.
      std::vector<int64_t> sa = operand_for(out), sb = out;
      if (trial % 2) std::swap(sa, sb);
      check_binary(*op, operand(*op, 0, t, sa), operand(*op, 1, t, sb));
    }
    // Ranks that differ, and a pair where each side broadcasts along a different axis.
    DType t = random_float_dtype();
    int64_t n = rnd(1, 5);
    check_binary(*op, operand(*op, 0, t, {2, 3, n}), operand(*op, 1, t, {n}));
    check_binary(*op, operand(*op, 0, t, {n, 1}), operand(*op, 1, t, {2, 1, 4}));
    check_binary(*op, operand(*op, 0, t, {}), operand(*op, 1, t, {n, 3}));
  }
}

TEST(ElementwiseBinary, ReferenceOnI32StaysIntegral) {
  for (const OpInfo* op : table_ops(2)) {
    if (!takes(*op, DType::I32, 2)) continue;
    SCOPED_TRACE(op->name);
    std::vector<int64_t> out = random_shape(rnd(0, 3));
    RefTensor a = random_tensor(DType::I32, operand_for(out), -50, 50);
    RefTensor b = random_tensor(DType::I32, out, -50, 50);
    check_binary(*op, a, b);
    RefTensor got = run_op(build_op(op->kind, {type_of(a), type_of(b)}), {a, b})[0];
    for (double v : got.data) EXPECT_EQ(v, std::trunc(v));
  }
}

TEST(ElementwiseBinary, EqualityOnBool) {
  for (const OpInfo* op : table_ops(2)) {
    if (!takes(*op, DType::Bool, 2)) continue;
    std::vector<int64_t> out = random_shape(rnd(0, 3));
    check_binary(*op, random_tensor(DType::Bool, out), random_tensor(DType::Bool, operand_for(out)));
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

TEST(ElementwiseRegistry, EntriesCarryTheirDefinitionsAndFusionKinds) {
  for (size_t inputs : {1, 2})
    for (const OpInfo* op : table_ops(inputs)) {
      SCOPED_TRACE(op->name);
      EXPECT_EQ(op->fusion, inputs == 1 ? FusionKind::Elementwise : FusionKind::Broadcast);
      if (op->kind != OpKind::Gelu) {  // gelu's gradient is a C++ rule
        EXPECT_EQ(op->grad_exprs.size(), inputs);
      }
      // Without a gradient: a comparison (its result is bool), or a record that says why
      // ("none: REASON", the piecewise-constant ops).
      if (compares(*op)) {
        EXPECT_FALSE(op->grad);
        EXPECT_EQ(op->no_grad, "its result is bool");
      } else if (!op->grad) {
        EXPECT_NE(op->no_grad, "its result is bool");
        EXPECT_FALSE(op->no_grad.empty());
      }
      EXPECT_FALSE(op->summary.empty());
      if (inputs == 2) {
        EXPECT_EQ(op->signature_text, "a: tensor, b: tensor");
      }
    }
  EXPECT_EQ(op_info(OpKind::Gelu).signature_text, "x: tensor, approximate: str = \"none\"");
  EXPECT_EQ(op_info(OpKind::LeakyRelu).signature_text, "x: tensor, negative_slope: float = 0.01");
  EXPECT_EQ(op_info(OpKind::Cast).signature_text, "x: tensor, dtype: dtype");
  EXPECT_EQ(op_info(OpKind::Where).signature_text, "cond: tensor, a: tensor, b: tensor");
  EXPECT_EQ(op_info(OpKind::Where).fusion, FusionKind::Broadcast);
  EXPECT_EQ(OpRegistry::get().find("silu"), &op_info(OpKind::Silu));
}

}  // namespace
}  // namespace modelc::test
