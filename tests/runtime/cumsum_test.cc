// cumsum on the CPU against a naive double-precision loop: fresh random shapes, axes, both
// directions, f32, f16 and bf16; the same bytes whatever the thread count and in place; every
// error with its exact message.
#include <cmath>
#include <functional>

#include "tests/runtime/rt_harness.h"

namespace modelc::rt::test {

namespace {

// Uniform values in [-1, 1), rounded to `type` (f32, f16 or bf16).
HostTensor random_float(ElemType type, std::vector<int64_t> shape) {
  HostTensor f = random_f32(shape);
  if (type == ElemType::F32) return f;
  HostTensor t(type, std::move(shape));
  auto* bits = reinterpret_cast<uint16_t*>(t.bytes.data());
  for (int64_t i = 0; i < t.numel(); ++i) bits[i] = kernels::f32_to_low(f.f32()[i], type);
  return t;
}

double value(const HostTensor& t, int64_t i) {
  if (t.type == ElemType::F32) return t.f32()[i];
  return kernels::low_to_f32(reinterpret_cast<const uint16_t*>(t.bytes.data())[i], t.type);
}

// Offsets of line (o, k) of a [outer, len, inner] view of `shape` split at `axis`.
struct Lines {
  int64_t outer = 1, len = 1, inner = 1;
  Lines(const std::vector<int64_t>& shape, size_t axis) : len(shape[axis]) {
    for (size_t d = 0; d < axis; ++d) outer *= shape[d];
    for (size_t d = axis + 1; d < shape.size(); ++d) inner *= shape[d];
  }
  int64_t at(int64_t o, int64_t j, int64_t k) const { return (o * len + j) * inner + k; }
};

// The unit roundoff of the output type (half an ulp at 1).
double roundoff(ElemType t) { return t == ElemType::F32 ? 0x1p-24 : t == ElemType::F16 ? 0x1p-11 : 0x1p-8; }

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const RuntimeError& e) {
    return e.what();
  }
  return "";
}

}  // namespace

// Tolerance: the f32 running sum of i+1 terms is within (i+1) * 2^-24 * S of the exact sum,
// S the sum of the terms' magnitudes; rounding it once to the output type adds at most the
// type's unit roundoff times the result (f16 below 2^-14: half its ulp, 2^-25). The
// reference adds the same (exactly widened) terms in double, within 2^-53 of the exact sum.
TEST(Cumsum, MatchesANaiveLoopEveryTypeAxisAndDirection) {
  const ElemType types[] = {ElemType::F32, ElemType::F16, ElemType::BF16};
  for (int rep = 0; rep < 90; ++rep) {
    const ElemType type = types[rep % 3];
    const std::vector<int64_t> shape = random_shape(rnd(1, 4), 1, rnd(0, 3) == 0 ? 40 : 6);
    const auto axis = static_cast<size_t>(rnd(0, static_cast<int64_t>(shape.size()) - 1));
    const int64_t reverse = rnd(0, 2);  // 2: the attribute absent (forward)
    Ints ints = {{"axis", {static_cast<int64_t>(axis)}}};
    if (reverse < 2) ints["reverse"] = {reverse};
    HostTensor x = random_float(type, shape), out(type, shape);
    run_op("cumsum", {&x}, {&out}, ints);
    const Lines v(shape, axis);
    int bad = 0;
    for (int64_t o = 0; o < v.outer; ++o)
      for (int64_t k = 0; k < v.inner; ++k) {
        double sum = 0, mag = 0;
        for (int64_t s = 0; s < v.len; ++s) {
          const int64_t at = v.at(o, reverse == 1 ? v.len - 1 - s : s, k);
          sum += value(x, at);
          mag += std::abs(value(x, at));
          const double tol = static_cast<double>(s + 1) * 0x1p-24 * mag * (1 + roundoff(type)) +
                             roundoff(type) * std::abs(sum) + (type == ElemType::F16 ? 0x1p-25 : 0.0);
          if (!(std::abs(value(out, at) - sum) <= tol) && ++bad <= 5)
            ADD_FAILURE() << dtype_name(type) << rt::shape_str(shape) << " axis " << axis << " reverse " << reverse
                          << " element " << at << ": got " << value(out, at) << ", expected " << sum;
        }
      }
    ASSERT_EQ(bad, 0) << dtype_name(type) << rt::shape_str(shape) << " axis " << axis;
  }
}

// Each line is summed in order on one thread: the bytes do not depend on the thread count,
// and an output that is its own input (every term read before it is overwritten) gives them
// too.
TEST(Cumsum, SameBytesOnAnyThreadCountAndInPlace) {
  ThreadPool one(1), three(3);
  for (ElemType type : {ElemType::F32, ElemType::F16, ElemType::BF16})
    for (size_t axis = 0; axis < 3; ++axis) {
      const std::vector<int64_t> shape = {rnd(20, 70), rnd(20, 70), rnd(1, 20)};
      const Ints ints = {{"axis", {static_cast<int64_t>(axis)}}, {"reverse", {rnd(0, 1)}}};
      HostTensor x = random_float(type, shape), a(type, shape), b(type, shape);
      run_op("cumsum", {&x}, {&a}, ints, {}, &one);
      run_op("cumsum", {&x}, {&b}, ints, {}, &three);
      EXPECT_EQ(a.bytes, b.bytes) << dtype_name(type) << " axis " << axis;
      run_op("cumsum", {&x}, {&x}, ints, {}, &three);
      EXPECT_EQ(x.bytes, a.bytes) << dtype_name(type) << " axis " << axis << " in place";
    }
}

// An empty tensor has nothing to sum, whichever dim is 0.
TEST(Cumsum, EmptyDims) {
  for (size_t zero = 0; zero < 3; ++zero) {
    std::vector<int64_t> shape = {3, 4, 5};
    shape[zero] = 0;
    HostTensor x(ElemType::F32, shape), out(ElemType::F32, shape);
    run_op("cumsum", {&x}, {&out}, {{"axis", {1}}});
    EXPECT_EQ(out.numel(), 0);
  }
}

TEST(Cumsum, Errors) {
  HostTensor x = random_f32({2, 3}), out(ElemType::F32, {2, 3});
  const Ints axis1 = {{"axis", {1}}};
  auto msg = [&](std::vector<HostTensor*> ins, std::vector<HostTensor*> outs, const Ints& ints) {
    return error_of([&] { run_op("cumsum", std::move(ins), std::move(outs), ints); });
  };
  const std::string at = "cumsum at test.model:1:1: ";
  EXPECT_EQ(msg({&x, &x}, {&out}, axis1), at + "expects 1 input, got 2");
  EXPECT_EQ(msg({&x}, {&out, &out}, axis1), at + "expects 1 output, got 2");
  HostTensor xi(ElemType::I32, {2, 3}), oi(ElemType::I32, {2, 3});
  EXPECT_EQ(msg({&xi}, {&oi}, axis1), at + "input must be f32, f16 or bf16, got i32[2,3]");
  HostTensor oh(ElemType::F16, {2, 3}), os(ElemType::F32, {3, 2});
  EXPECT_EQ(msg({&x}, {&oh}, axis1), at + "output is f16[2,3], expected the input's f32[2,3]");
  EXPECT_EQ(msg({&x}, {&os}, axis1), at + "output is f32[3,2], expected the input's f32[2,3]");
  HostTensor s(ElemType::F32, {}), so(ElemType::F32, {});
  EXPECT_EQ(msg({&s}, {&so}, {{"axis", {0}}}), at + "cannot take the cumulative sum of a scalar");
  EXPECT_EQ(msg({&x}, {&out}, {}), at + "missing attribute 'axis'");
  EXPECT_EQ(msg({&x}, {&out}, {{"axis", {0, 1}}}), at + "attribute 'axis' must hold one integer, got [0,1]");
  EXPECT_EQ(msg({&x}, {&out}, {{"axis", {2}}}), at + "axis 2 is out of range for rank 2");
  EXPECT_EQ(msg({&x}, {&out}, {{"axis", {-1}}}), at + "axis -1 is out of range for rank 2");
  EXPECT_EQ(msg({&x}, {&out}, {{"axis", {1}}, {"reverse", {2}}}), at + "reverse must be 0 or 1, got 2");
  EXPECT_EQ(msg({&x}, {&out}, {{"axis", {1}}, {"reverse", {0, 1}}}), at + "attribute 'reverse' must hold one integer, got [0,1]");
  EXPECT_EQ(msg({nullptr}, {&out}, axis1), at + "input 0 is missing");
  EXPECT_EQ(msg({&x}, {nullptr}, axis1), at + "output 0 is missing");
}

}  // namespace modelc::rt::test
