// The scalar-expression language (compiler/ir/scalar_expr.h): parsing, printing, binding
// to a node (attributes and calls of other ops), and every registered definition evaluated
// in double against its record's pointwise reference on the record's test domain
// (two independent writings of each op must agree); malformed definitions.
#include <array>
#include <limits>

#include "compiler/ir/op_examples.h"
#include "compiler/ir/scalar_expr.h"
#include "tests/ir/op_harness.h"

namespace modelc::test {
namespace {

TEST(ScalarLanguage, ParsesPrecedenceAndPrintsBack) {
  EXPECT_EQ(scalar_str(parse_scalar("1 + 2 * x - -a / b")), "((1 + (2 * x)) - (neg(a) / b))");
  EXPECT_EQ(scalar_str(parse_scalar("select(c, max(a, b), pow(a, 2.5)) ")), "select(c, max(a, b), pow(a, 2.5))");
  EXPECT_EQ(scalar_str(parse_scalar("x <= 1e-3")), "(x <= 0.001)");
  EXPECT_EQ(scalar_str(parse_scalar("log1p(expm1(x)) * sigmoid(x)")), "(log1p(expm1(x)) * sigmoid(x))");
  EXPECT_EQ(scalar_str(parse_scalar("y * -0.5")), "(y * -0.5)");  // a negative constant, not neg(0.5)
  double x = static_cast<double>(rnd(-100, 100)) / 7;
  EXPECT_DOUBLE_EQ(eval_scalar(parse_scalar("(x + 1) * (x - 1)"), {{"x", x}}), (x + 1) * (x - 1));
  EXPECT_DOUBLE_EQ(eval_scalar(parse_scalar("log1p(x * x)"), {{"x", x}}), std::log1p(x * x));
  EXPECT_DOUBLE_EQ(eval_scalar(parse_scalar("expm1(x / 100)"), {{"x", x}}), std::expm1(x / 100));
  EXPECT_EQ(scalar_str(parse_scalar("round(floor(x) + ceil(x)) * sin(cos(x))")),
            "(round((floor(x) + ceil(x))) * sin(cos(x)))");
  EXPECT_DOUBLE_EQ(eval_scalar(parse_scalar("sin(x) * sin(x) + cos(x) * cos(x)"), {{"x", x}}), 1.0);
  // round is half to even (torch.round), floor and ceil go down and up, negatives included.
  for (auto [v, r, f, c] : {std::array{2.5, 2.0, 2.0, 3.0}, {-3.5, -4.0, -4.0, -3.0}, {-0.5, 0.0, -1.0, 0.0},
                            {1.25, 1.0, 1.0, 2.0}, {-2.75, -3.0, -3.0, -2.0}}) {
    EXPECT_EQ(eval_scalar(parse_scalar("round(x)"), {{"x", v}}), r) << v;
    EXPECT_EQ(eval_scalar(parse_scalar("floor(x)"), {{"x", v}}), f) << v;
    EXPECT_EQ(eval_scalar(parse_scalar("ceil(x)"), {{"x", v}}), c) << v;
  }
  EXPECT_TRUE(std::isinf(eval_scalar(parse_scalar("-inf"), {})));
  EXPECT_TRUE(std::isnan(eval_scalar(parse_scalar("max(x, nan)"), {{"x", x}})));
}

TEST(ScalarLanguage, MalformedDefinitionsAreInternalErrors) {
  for (const char* bad : {"", "x +", "exp(x, x)", "(x", "x y", "select(x, 1)", "1 $ 2", "round(x, 1)", "sin()"})
    EXPECT_THROW(parse_scalar(bad), InternalError) << bad;
  EXPECT_THROW(eval_scalar(parse_scalar("q + 1"), {{"x", 1.0}}), InternalError);
  EXPECT_THROW(eval_scalar(parse_scalar("sigmoid(x)"), {{"x", 1.0}}), InternalError);  // unresolved
  EXPECT_THROW(scalar_vars(4), InternalError);
  // Binding: a name neither an input nor a numeric attribute, a call of no elementwise op.
  Attrs a;
  a.set("mode", std::string("fast"));
  EXPECT_THROW(resolve_scalar(parse_scalar("x * slope"), a, {"x"}), InternalError);
  EXPECT_THROW(resolve_scalar(parse_scalar("x * mode"), a, {"x"}), InternalError);
  EXPECT_THROW(resolve_scalar(parse_scalar("foo(x)"), a, {"x"}), InternalError);
  EXPECT_THROW(resolve_scalar(parse_scalar("matmul(x, x)"), a, {"x"}), InternalError);
}

TEST(ScalarLanguage, BindingReadsAttributesAndInlinesCalls) {
  Attrs a;
  a.set("slope", 0.25);
  a.set("k", int64_t{3});
  EXPECT_EQ(scalar_str(resolve_scalar(parse_scalar("x * slope + k"), a, {"x"})), "((x * 0.25) + 3)");
  // A call stands for the callee's own definition, its variables bound to the arguments.
  const ScalarExpr silu = resolve_scalar(parse_scalar("x * sigmoid(x / 2)"), {}, {"x"});
  const std::string s = scalar_str(silu);
  EXPECT_EQ(s.find("sigmoid"), std::string::npos) << s;
  for (double x : {-3.0, -0.5, 0.0, 2.0, 7.0})
    EXPECT_NEAR(eval_scalar(silu, {{"x", x}}), x / (1 + std::exp(-x / 2)), 1e-15 * (1 + std::fabs(x))) << x;
}

// Every op's two writings, `scalar` (what code generation compiles) and `pointwise` (the
// reference), agree in double on its test domain, attributes included.
TEST(ScalarLanguage, EveryDefinitionMatchesItsReference) {
  int checked = 0;
  for (const OpInfo& op : OpRegistry::get().all()) {
    if (!op.scalar) continue;
    SCOPED_TRACE(op.name);
    ASSERT_NE(op.pointwise, nullptr) << "an op with a scalar definition has a pointwise reference";
    for (const OpExample& e : examples::of(op, rng())) {
      Node n;
      n.op = op.kind;
      n.attrs = e.attrs;
      apply_defaults(op, n.attrs);
      n.inputs.resize(e.inputs.size());
      const ScalarExpr expr = node_scalar(n);
      const std::vector<std::string>& names = scalar_vars(e.inputs.size());
      const RefTensor& first = *e.inputs[0];
      for (int64_t i = 0; i < first.numel(); ++i) {
        std::map<std::string, double> vars;
        std::vector<double> at;
        for (size_t k = 0; k < e.inputs.size(); ++k) {
          const RefTensor& t = *e.inputs[k];
          at.push_back(t[i % t.numel()]);
          vars[names[k]] = at.back();
        }
        const double want = op.pointwise(at.data(), n.attrs), got = eval_scalar(expr, vars);
        if (std::isnan(want)) EXPECT_TRUE(std::isnan(got)) << e.label;
        else EXPECT_NEAR(got, want, 1e-12 * (1 + std::fabs(want))) << e.label << " at " << at[0];
      }
    }
    ++checked;
  }
  EXPECT_GT(checked, 0);
}

}  // namespace
}  // namespace modelc::test
