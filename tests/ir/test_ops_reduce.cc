// Reductions: the shape rule (canonical axes, keepdims, every refusal with its exact
// message) and the reference on fresh random inputs against a naive reduction.
#include <algorithm>
#include <cmath>
#include <limits>

#include "tests/ir/op_harness.h"

namespace modelc::test {
namespace {

struct ReduceCase {
  OpKind op;
  const char* name;
  bool int_ok;
};
const ReduceCase kReduce[] = {{OpKind::Sum, "sum", true}, {OpKind::Mean, "mean", false}, {OpKind::Max, "max", false}};

Attrs reduce_attrs(Ints axes, bool keepdims = false) {
  Attrs a;
  a.set("axes", std::move(axes));
  a.set("keepdims", keepdims);
  return a;
}

// Builds op over x with the given axes and checks the output type and canonical axes.
void expect_reduce(OpKind op, const TensorType& x, Ints axes, bool keepdims, const TensorType& want,
                   const Ints& canonical) {
  auto o = build_op(op, {x}, reduce_attrs(std::move(axes), keepdims));
  ASSERT_FALSE(o.error) << o.error->message;
  EXPECT_EQ(o.outputs()[0], want) << o.outputs()[0].str() << " vs " << want.str();
  EXPECT_EQ(o.attrs().ints("axes"), canonical);
  EXPECT_EQ(o.attrs().b("keepdims"), keepdims);
}

TEST(ReduceShape, AxesKeepdimsAndCanonicalForm) {
  for (const ReduceCase& c : kReduce) {
    SCOPED_TRACE(c.name);
    expect_reduce(c.op, f32({B, 4}), {1}, false, f32({B}), {1});
    expect_reduce(c.op, f32({B, 4}), {1}, true, f32({B, 1}), {1});
    expect_reduce(c.op, f32({B, 4}), {-2}, false, f32({4}), {0});
    // No axes: all of them, written out so that passes read one form.
    expect_reduce(c.op, f32({B, 4}), {}, false, f32({}), {0, 1});
    expect_reduce(c.op, f32({B, 4}), {}, true, f32({1, 1}), {0, 1});
    expect_reduce(c.op, f32({B, 4}), {-1, 0}, false, f32({}), {0, 1});
    expect_reduce(c.op, f32({B, T, 4}), {2, -3}, true, f32({1, T, 1}), {0, 2});
    expect_reduce(c.op, f32({B, T * 2, 4}), {-1}, false, f32({B, T * 2}), {2});
    expect_reduce(c.op, f32({}), {}, false, f32({}), {});
    expect_reduce(c.op, tt(DType::BF16, {B, T}), {0}, false, tt(DType::BF16, {T}), {0});
    expect_reduce(c.op, tt(DType::F16, {B, T}), {1}, true, tt(DType::F16, {B, 1}), {1});
    // Defaults: axes [] and keepdims false.
    auto def = build_op(c.op, {f32({B, 4})});
    ASSERT_FALSE(def.error) << def.error->message;
    EXPECT_EQ(def.outputs()[0], f32({}));
    EXPECT_EQ(def.attrs().ints("axes"), (Ints{0, 1}));
  }
}

TEST(ReduceShape, Refusals) {
  for (const ReduceCase& c : kReduce) {
    SCOPED_TRACE(c.name);
    std::string n = c.name;
    expect_error(build_op(c.op, {f32({B, 4})}, reduce_attrs({3})), "axis 3 is out of range for f32[B,4] (rank 2)", -1,
                 "axes");
    expect_error(build_op(c.op, {f32({B, 4})}, reduce_attrs({0, -3})), "axis -3 is out of range for f32[B,4] (rank 2)",
                 -1, "axes");
    expect_error(build_op(c.op, {f32({})}, reduce_attrs({0})), "axis 0 is out of range for f32[] (rank 0)", -1, "axes");
    expect_error(build_op(c.op, {f32({B, 4})}, reduce_attrs({1, -1})), "axis 1 appears twice in axes [1, -1] for f32[B,4]",
                 -1, "axes");
    expect_error(build_op(c.op, {f32({B, T, 4})}, reduce_attrs({0, 2, 0})),
                 "axis 0 appears twice in axes [0, 2, 0] for f32[B,T,4]", -1, "axes");

    auto i32 = build_op(c.op, {tt(DType::I32, {B, 4})}, reduce_attrs({1}));
    if (c.int_ok) {
      ASSERT_FALSE(i32.error) << i32.error->message;
      EXPECT_EQ(i32.outputs()[0], tt(DType::I32, {B}));
      expect_error(build_op(c.op, {tt(DType::Bool, {B, 4})}), n + " expects a floating-point or i32 tensor, got bool[B,4]", 0);
    } else {
      expect_error(i32, n + " expects a floating-point tensor, got i32[B,4]", 0);
      expect_error(build_op(c.op, {tt(DType::Bool, {B, 4})}), n + " expects a floating-point tensor, got bool[B,4]", 0);
    }
  }
}

// The naive reduction: for every output position, visit every input element and take
// those whose kept coordinates match. Quadratic, and shares no index arithmetic with the op.
RefTensor naive_reduce(const ReduceCase& c, const RefTensor& x, const std::vector<bool>& reduced, bool keepdims) {
  std::vector<int64_t> out_shape;
  for (size_t d = 0; d < x.shape.size(); ++d) {
    if (!reduced[d]) out_shape.push_back(x.shape[d]);
    else if (keepdims) out_shape.push_back(1);
  }
  RefTensor out(x.dtype, out_shape);
  for (int64_t o = 0; o < out.numel(); ++o) {
    std::vector<int64_t> oi = unflatten(o, out_shape);
    double sum = 0, mx = -std::numeric_limits<double>::infinity();
    int64_t count = 0;
    for (int64_t i = 0; i < x.numel(); ++i) {
      std::vector<int64_t> xi = unflatten(i, x.shape);
      bool match = true;
      size_t k = 0;  // position in the output coordinates
      for (size_t d = 0; d < xi.size(); ++d) {
        if (reduced[d]) { k += keepdims ? 1 : 0; continue; }
        match = match && xi[d] == oi[k++];
      }
      if (!match) continue;
      sum += x[i];
      mx = std::max(mx, x[i]);
      ++count;
    }
    out[o] = c.op == OpKind::Sum ? sum : c.op == OpKind::Mean ? sum / static_cast<double>(count) : mx;
  }
  return out;
}

void check_reduce(const ReduceCase& c, const RefTensor& x, const Ints& axes, bool keepdims, bool symbolic = false) {
  std::vector<bool> reduced(x.shape.size(), axes.empty());
  for (int64_t a : axes) reduced[static_cast<size_t>(a < 0 ? a + x.rank() : a)] = true;
  TensorType in = type_of(x);
  if (symbolic && x.rank() > 0) in.shape[0] = B;  // bound from the feed at run time
  auto o = build_op(c.op, {in}, reduce_attrs(axes, keepdims));
  ASSERT_FALSE(o.error) << o.error->message;
  expect_near(run_op(o, {x})[0], naive_reduce(c, x, reduced, keepdims), kTol,
              std::string(c.name) + " of " + x.shape_str() + " over " + attr_str(axes) + (keepdims ? " keepdims" : ""));
}

// A random subset of the axes of a rank-`rank` tensor, in random order, some negative;
// sometimes [] (all axes).
Ints random_axes(int rank) {
  Ints axes;
  for (int d = 0; d < rank; ++d)
    if (rnd(0, 1)) axes.push_back(rnd(0, 1) ? d : d - rank);
  std::shuffle(axes.begin(), axes.end(), rng());
  return axes;
}

TEST(ReduceReference, RandomShapesAndAxes) {
  for (const ReduceCase& c : kReduce) {
    SCOPED_TRACE(c.name);
    for (int trial = 0; trial < 12; ++trial) {
      std::vector<int64_t> shape = random_shape(rnd(0, 4));
      RefTensor x = random_tensor(random_float_dtype(), shape, -3, 3);
      check_reduce(c, x, random_axes(x.rank()), rnd(0, 1) == 1, trial % 3 == 0);
    }
  }
}

TEST(ReduceReference, EveryAxisSingly) {
  for (const ReduceCase& c : kReduce) {
    RefTensor x = random_tensor(DType::F32, {rnd(1, 4), rnd(1, 4), rnd(1, 4)});
    for (int64_t a = -3; a < 3; ++a) check_reduce(c, x, {a}, a < 0);
    check_reduce(c, x, {}, false);
    check_reduce(c, x, {}, true);
  }
}

TEST(ReduceReference, SumOfI32IsExact) {
  RefTensor x = random_tensor(DType::I32, {rnd(1, 5), rnd(1, 5), rnd(1, 5)}, -1000, 1000);
  Ints axes = random_axes(3);
  check_reduce(kReduce[0], x, axes, false);
  RefTensor got = run_op(build_op(OpKind::Sum, {type_of(x)}, reduce_attrs(axes)), {x})[0];
  for (double v : got.data) EXPECT_EQ(v, std::trunc(v));
}

TEST(ReduceReference, EmptyAndNaN) {
  // An axis of extent 0: sum 0, mean 0/0, max -inf (the identities numpy uses).
  RefTensor empty(DType::F32, {2, 0});
  auto run = [&](OpKind op, const RefTensor& x) {
    return run_op(build_op(op, {type_of(x)}, reduce_attrs({1})), {x})[0];
  };
  EXPECT_EQ(run(OpKind::Sum, empty).data, (std::vector<double>{0, 0}));
  EXPECT_TRUE(std::isnan(run(OpKind::Mean, empty)[0]));
  EXPECT_EQ(run(OpKind::Max, empty)[1], -std::numeric_limits<double>::infinity());
  // A NaN anywhere in a row makes its max NaN, wherever it sits.
  RefTensor x = random_tensor(DType::F32, {2, 3});
  x[0] = std::numeric_limits<double>::quiet_NaN();
  x[4] = std::numeric_limits<double>::quiet_NaN();
  RefTensor m = run(OpKind::Max, x);
  EXPECT_TRUE(std::isnan(m[0]) && std::isnan(m[1]));
}

TEST(ReduceRegistry, Entries) {
  for (const ReduceCase& c : kReduce) {
    const OpInfo& info = op_info(c.op);
    EXPECT_EQ(info.signature_text, "x: tensor, axes: ints = [], keepdims: bool = false") << c.name;
    EXPECT_EQ(info.fusion, FusionKind::Reduction) << c.name;
    EXPECT_FALSE(info.summary.empty()) << c.name;
    EXPECT_EQ(OpRegistry::get().find(c.name), &info);
  }
}

}  // namespace
}  // namespace modelc::test
