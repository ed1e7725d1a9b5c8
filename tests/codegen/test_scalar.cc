// The scalar-expression language: parsing, printing, and every registered scalar definition
// evaluated in double against the op's reference scalar function; malformed definitions.
#include <limits>

#include "compiler/codegen/scalar.h"
#include "tests/ir/op_harness.h"

namespace modelc::test {
namespace {

TEST(ScalarLanguage, ParsesPrecedenceAndPrintsBack) {
  EXPECT_EQ(scalar_str(parse_scalar("1 + 2 * x - -a / b")), "((1 + (2 * x)) - (neg(a) / b))");
  EXPECT_EQ(scalar_str(parse_scalar("select(c, max(a, b), pow(a, 2.5)) ")), "select(c, max(a, b), pow(a, 2.5))");
  EXPECT_EQ(scalar_str(parse_scalar("x <= 1e-3")), "(x <= 0.001)");
  double x = static_cast<double>(rnd(-100, 100)) / 7;
  EXPECT_DOUBLE_EQ(eval_scalar(parse_scalar("(x + 1) * (x - 1)"), {{"x", x}}), (x + 1) * (x - 1));
  EXPECT_TRUE(std::isinf(eval_scalar(parse_scalar("-inf"), {})));
  EXPECT_TRUE(std::isnan(eval_scalar(parse_scalar("max(x, nan)"), {{"x", x}})));
}

TEST(ScalarLanguage, MalformedDefinitionsAreInternalErrors) {
  for (const char* bad : {"", "x +", "foo(x)", "exp(x, x)", "(x", "x y", "select(x, 1)", "1 $ 2"})
    EXPECT_THROW(parse_scalar(bad), InternalError) << bad;
  EXPECT_THROW(eval_scalar(parse_scalar("q + 1"), {{"x", 1.0}}), InternalError);
  EXPECT_THROW(scalar_vars(4), InternalError);
}

TEST(ScalarLanguage, EveryDefinitionMatchesTheReferenceScalar) {
  int checked = 0;
  for (const OpInfo& op : OpRegistry::get().all()) {
    if (!op.scalar) continue;
    ScalarExpr e = parse_scalar(op.scalar(Attrs{}));
    for (int rep = 0; rep < 50; ++rep) {
      double a = std::uniform_real_distribution<double>(-5, 5)(rng());
      double b = std::uniform_real_distribution<double>(0.1, 5)(rng());
      if (op.unary) {
        double x = (op.kind == OpKind::Log || op.kind == OpKind::Sqrt || op.kind == OpKind::Rsqrt) ? b : a;
        EXPECT_NEAR(eval_scalar(e, {{"x", x}}), op.unary(x), 1e-12 * (1 + std::fabs(op.unary(x)))) << op.name << " " << x;
      } else if (op.binary) {
        EXPECT_NEAR(eval_scalar(e, {{"a", b}, {"b", a}}), op.binary(b, a), 1e-12 * (1 + std::fabs(op.binary(b, a))))
            << op.name;
      }
    }
    ++checked;
  }
  EXPECT_GE(checked, 26);
}

}  // namespace
}  // namespace modelc::test
