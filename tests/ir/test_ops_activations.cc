// The activations and roundings of elementwise.def where PyTorch's definitions are easy to
// get wrong: the ends of the branches, the boundaries of the gradients, ties, NaN and the
// infinities. Each expected value is worked out by hand from PyTorch's definition and
// checked twice: through the reference interpreter (the oracle the compiled kernels meet in
// tests/conformance) and through the record's math evaluated in double; gradients through
// the record's gradient expression with g = 1.
#include <cmath>
#include <limits>
#include <numbers>

#include "compiler/ir/scalar_expr.h"
#include "tests/ir/op_harness.h"

namespace modelc::test {
namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr double kInf = std::numeric_limits<double>::infinity();
using Cases = std::initializer_list<std::pair<double, double>>;  // (x, the value expected)

const OpInfo& op_named(const std::string& name) {
  const OpInfo* op = OpRegistry::get().find(name);
  if (!op) throw InternalError("no op " + name);
  return *op;
}

Attrs with_defaults(const OpInfo& op, Attrs a) {
  apply_defaults(op, a);
  return a;
}

// The reference interpreter's value of op(x).
double reference(const std::string& name, double x, const Attrs& a = {}, DType t = DType::F32) {
  const OpInfo& op = op_named(name);
  OneOp o = build_op(op.kind, {tt(t, {1})}, with_defaults(op, a));
  if (o.error) throw InternalError(o.error->message);
  return run_op(o, {RefTensor(t, {1}, x)})[0][0];
}

// The record's math, resolved for these attributes and evaluated in double.
double math(const std::string& name, double x, const Attrs& a = {}) {
  Node n;
  n.op = op_named(name).kind;
  n.attrs = with_defaults(op_named(name), a);
  n.inputs.resize(1);
  return eval_scalar(node_scalar(n), {{"x", x}});
}

// d op / dx at x, from the record's gradient expression (g = 1).
double gradient(const std::string& name, double x, const Attrs& a = {}) {
  const OpInfo& op = op_named(name);
  const ScalarExpr e = resolve_scalar(parse_scalar(op.grad_exprs.at(0)), with_defaults(op, a), {"x", "y", "g"});
  return eval_scalar(e, {{"x", x}, {"y", math(name, x, a)}, {"g", 1.0}});
}

void expect_same(double got, double want, const std::string& what) {
  if (std::isnan(want)) {
    EXPECT_TRUE(std::isnan(got)) << what << ": got " << got << ", want NaN";
  } else if (std::isinf(want)) {
    EXPECT_EQ(got, want) << what;
  } else {
    EXPECT_NEAR(got, want, 1e-14 * (1 + std::fabs(want))) << what;
  }
}

// op(x) is `want` through the reference and through the math.
void expect_value(const std::string& name, double x, double want, const Attrs& a = {}) {
  const std::string what = name + "(" + std::to_string(x) + ")";
  expect_same(reference(name, x, a), want, what + ", reference");
  expect_same(math(name, x, a), want, what + ", math");
}

void expect_gradient(const std::string& name, double x, double want, const Attrs& a = {}) {
  expect_same(gradient(name, x, a), want, "d " + name + " / dx at " + std::to_string(x));
}

TEST(Activations, Relu6AndHardtanhClampAndPropagateNaN) {
  for (auto [x, want] : Cases{{-1.0, 0.0}, {3.0, 3.0}, {7.0, 6.0}, {kNaN, kNaN}, {kInf, 6.0}, {-kInf, 0.0}})
    expect_value("relu6", x, want);
  // Zero on the closed boundaries, as PyTorch's hardtanh_backward.
  for (auto [x, want] : Cases{{-1.0, 0.0}, {0.0, 0.0}, {3.0, 1.0}, {6.0, 0.0}, {7.0, 0.0}})
    expect_gradient("relu6", x, want);

  for (auto [x, want] : Cases{{-2.0, -1.0}, {0.5, 0.5}, {2.0, 1.0}, {kNaN, kNaN}, {-kInf, -1.0}})
    expect_value("hardtanh", x, want);
  for (auto [x, want] : Cases{{-1.0, 0.0}, {0.0, 1.0}, {1.0, 0.0}}) expect_gradient("hardtanh", x, want);
  const Attrs wide = attrs({{"min_val", -2.0}, {"max_val", 3.0}});
  expect_value("hardtanh", 2.5, 2.5, wide);
  expect_value("hardtanh", -2.5, -2.0, wide);
  expect_gradient("hardtanh", 2.5, 1.0, wide);
  // min_val above max_val: max_val everywhere (torch.clamp), and nothing to train.
  const Attrs inverted = attrs({{"min_val", 0.5}, {"max_val", 0.2}});
  for (double x : {-1.0, 0.3, 1.0}) {
    expect_value("hardtanh", x, 0.2, inverted);
    expect_gradient("hardtanh", x, 0.0, inverted);
  }
}

TEST(Activations, HardswishAndHardsigmoidWithPyTorchsGradientEnds) {
  for (auto [x, want] : Cases{{-4.0, 0.0}, {-3.0, 0.0}, {1.0, 4.0 / 6}, {3.0, 3.0}, {4.0, 4.0}, {kInf, kInf},
                         {kNaN, kNaN}, {-kInf, kNaN}})  // -inf * 0, as PyTorch's x * relu6(x + 3) / 6
    expect_value("hardswish", x, want);
  // hardswish_backward: 0 below -3, x / 3 + 1/2 on [-3, 3] (ends included), 1 above.
  for (auto [x, want] : Cases{{-3.5, 0.0}, {-3.0, -0.5}, {0.0, 0.5}, {1.5, 1.0}, {3.0, 1.5}, {3.5, 1.0}})
    expect_gradient("hardswish", x, want);

  for (auto [x, want] : Cases{{-4.0, 0.0}, {-3.0, 0.0}, {0.0, 0.5}, {1.5, 0.75}, {3.0, 1.0}, {kNaN, kNaN}})
    expect_value("hardsigmoid", x, want);
  for (auto [x, want] : Cases{{-3.0, 0.0}, {-1.0, 1.0 / 6}, {2.9, 1.0 / 6}, {3.0, 0.0}})
    expect_gradient("hardsigmoid", x, want);
}

TEST(Activations, TheEluFamilyTakesTheNegativeBranchAtZero) {
  expect_value("elu", -1.0, -0.6321205588285577);
  expect_value("elu", -1.0, -0.31606027941427883, attrs({{"alpha", 0.5}}));
  expect_value("elu", 2.0, 2.0);
  expect_value("elu", -kInf, -0.5, attrs({{"alpha", 0.5}}));
  expect_value("elu", kNaN, kNaN);
  expect_gradient("elu", 0.0, 0.5, attrs({{"alpha", 0.5}}));  // PyTorch: x <= 0 is the alpha side
  expect_gradient("elu", 1.0, 1.0, attrs({{"alpha", 0.5}}));

  // scale 1.0507009873554804934, scale * alpha = 1.7580993408473768599.
  expect_value("selu", 1.0, 1.0507009873554805);
  expect_value("selu", -1.0, -1.1113307378125628);
  expect_gradient("selu", 0.0, 1.7580993408473768);
  expect_gradient("selu", 1.0, 1.0507009873554805);

  const Attrs two = attrs({{"alpha", 2.0}});
  expect_value("celu", -1.0, -0.7869386805747332, two);  // 2 * (e^(-1/2) - 1)
  expect_value("celu", 1.0, 1.0, two);
  expect_value("celu", -kInf, -2.0, two);
  expect_gradient("celu", -1.0, 0.6065306597126334, two);  // e^(-1/2)
  expect_gradient("celu", 1.0, 1.0, two);
  // alpha = 1: celu is elu.
  for (double x : {-2.0, -0.25, 0.0, 1.5}) expect_same(reference("celu", x), reference("elu", x), "celu = elu");
}

TEST(Activations, MishAndTheTrigonometricFunctions) {
  expect_value("mish", 0.0, 0.0);
  expect_value("mish", 1.0, 0.8650983882673103);  // tanh(log(1 + e))
  expect_value("mish", kInf, kInf);
  expect_value("mish", -kInf, kNaN);  // -inf * tanh(0), as PyTorch's
  expect_gradient("mish", 0.0, 0.6);  // tanh(log 2) = 3/5
  expect_same(math("mish", 30.0), 30.0, "mish above softplus's threshold");

  expect_value("sin", std::numbers::pi / 2, 1.0);
  expect_value("cos", 0.0, 1.0);
  expect_value("sin", kInf, kNaN);
  expect_gradient("sin", 0.0, 1.0);
  expect_gradient("cos", std::numbers::pi / 2, -1.0);
}

TEST(Roundings, FloorCeilRoundAndSign) {
  for (auto [x, want] : Cases{{-0.5, -1.0}, {2.0, 2.0}, {-2.25, -3.0}, {-kInf, -kInf}, {kNaN, kNaN}})
    expect_value("floor", x, want);
  for (auto [x, want] : Cases{{-0.5, 0.0}, {2.25, 3.0}, {2.0, 2.0}, {kInf, kInf}}) expect_value("ceil", x, want);
  // Half to even, as torch.round.
  for (auto [x, want] : Cases{{0.5, 0.0}, {1.5, 2.0}, {2.5, 2.0}, {-0.5, 0.0}, {-1.5, -2.0}, {-2.5, -2.0},
                         {2.4, 2.0}, {2.6, 3.0}, {1e300, 1e300}, {kInf, kInf}, {kNaN, kNaN}})
    expect_value("round", x, want);
  for (auto [x, want] : Cases{{-3.0, -1.0}, {0.0, 0.0}, {0.25, 1.0}, {-kInf, -1.0}, {kNaN, kNaN}})
    expect_value("sign", x, want);
  for (auto [x, want] : Cases{{-7.0, -1.0}, {0.0, 0.0}, {3.0, 1.0}}) {
    EXPECT_EQ(reference("sign", x, {}, DType::I32), want) << x;
  }
}

// Piecewise constant ops have no gradient, and their records say why (autodiff's error and
// docs/ops.md show the reason).
TEST(Roundings, HaveNoGradientAndSayWhy) {
  for (const char* name : {"floor", "ceil", "round", "sign"}) {
    const OpInfo& op = op_named(name);
    EXPECT_FALSE(op.grad) << name;
    EXPECT_EQ(op.no_grad, "piecewise constant: its gradient is 0 wherever it exists, so a loss cannot train through it")
        << name;
  }
  for (const char* name : {"sin", "relu6", "hardswish", "mish", "elu"}) EXPECT_TRUE(op_named(name).grad) << name;
}

}  // namespace
}  // namespace modelc::test
