// tanh is generated inline (compiler/codegen/scalar.cc: a Taylor series near 0, the
// exponential form elsewhere) so that gelu's tanh form vectorizes: its relative error
// against std::tanh stays below 2e-6 over the whole range, including tiny values, the
// seam at |x| = 0.5, saturation, infinities, NaN and -0.
#include <cmath>
#include <limits>

#include "tests/codegen/jit_harness.h"

namespace modelc::test {
namespace {

TEST(KernelsTanh, RelativeErrorEverywhere) {
  std::vector<double> xs = {0.0, -0.0, 1e-30, -1e-20, 1e-8, 3e-5, 1e-3, 0.1, 0.4999999, 0.5, 0.5000001, 0.75,
                            1.0, 2.5, 8.0, 9.5, 20.0, 44.0, 89.0, 1e30, -1e30};
  for (int i = 0; i < 4000; ++i) xs.push_back(std::ldexp(static_cast<double>(rnd(-1000000, 1000000)) / 1e6, static_cast<int>(rnd(-20, 5))));
  const double inf = std::numeric_limits<double>::infinity();
  xs.push_back(inf);
  xs.push_back(-inf);
  xs.push_back(std::nan(""));
  RefTensor in(DType::F32, {static_cast<int64_t>(xs.size())});
  for (size_t i = 0; i < xs.size(); ++i) in[static_cast<int64_t>(i)] = static_cast<float>(xs[i]);
  OneOp o = build_op(OpKind::Tanh, {type_of(in)});
  auto c = compile_node(o.g, o.node);
  RefTensor got = run_kernel(*c, o.g.node(o.node), {&in}, {}).at(0);
  double worst = 0;
  for (int64_t i = 0; i < in.numel(); ++i) {
    const double x = in[i], want = std::tanh(x), g = got[i];
    if (std::isnan(x)) { EXPECT_TRUE(std::isnan(g)); continue; }
    EXPECT_EQ(std::signbit(g), std::signbit(want)) << "x = " << x;
    const double rel = want == 0 ? std::fabs(g) : std::fabs(g - want) / std::fabs(want);
    worst = std::max(worst, rel);
    EXPECT_LE(rel, 2e-6) << "x = " << x << ": " << g << " vs " << want;
  }
  std::cout << "tanh: largest relative error " << worst << " over " << in.numel() << " values\n";
}

}  // namespace
}  // namespace modelc::test
