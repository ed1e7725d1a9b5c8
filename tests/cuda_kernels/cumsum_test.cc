// The CUDA cumsum kernel, run on the host through its own launch and body
// (kernels/cuda/launches.h), against the CPU twin: fresh random shapes, axes, both
// directions, f32, f16 and bf16, byte-identical results; its launch geometry; and the shared
// checks, word for word on both paths.
#include <cstring>

#include "kernels/cuda/launches.h"
#include "kernels/cuda/library.h"
#include "tests/cuda_kernels/harness.h"

namespace modelc::kernels::cuda::test {

namespace {

const ElemType kFloatTypes[] = {ElemType::F32, ElemType::F16, ElemType::BF16};

// Any value of `type` but NaN: subnormals, large values and infinities too (a sum that
// overflows, or inf + -inf, ends the same way on both paths). NaN inputs are left out: the
// payload of NaN + NaN depends on the operands' order, which IEEE 754 leaves open and a
// vectorizing compiler may swap.
HostTensor any_but_nan(ElemType type, std::vector<int64_t> shape) {
  HostTensor t = random_tensor(type, std::move(shape));
  for (int64_t i = 0; i < t.numel(); ++i) {
    if (type == ElemType::F32) {
      uint32_t u = static_cast<uint32_t>(rnd(0, 0xffffffffLL));
      if ((u & 0x7fffffffu) > 0x7f800000u) u &= 0xff7fffffu;  // a NaN becomes a finite value
      std::memcpy(t.bytes.data() + 4 * i, &u, 4);
    } else {
      auto* b = reinterpret_cast<uint16_t*>(t.bytes.data()) + i;
      const uint16_t exp = type == ElemType::F16 ? 0x7c00 : 0x7f80, mant = type == ElemType::F16 ? 0x03ff : 0x007f;
      if ((*b & exp) == exp && (*b & mant) != 0) *b = static_cast<uint16_t>(*b & 0xbfff);  // clears an exponent bit
    }
  }
  return t;
}

// Values in [-1, 1) rounded to `type`: the sums a model makes.
HostTensor moderate(ElemType type, std::vector<int64_t> shape) {
  HostTensor f = random_tensor(ElemType::F32, shape);
  if (type == ElemType::F32) return f;
  HostTensor t(type, std::move(shape));
  for (int64_t i = 0; i < t.numel(); ++i) reinterpret_cast<uint16_t*>(t.bytes.data())[i] = f32_to_low(f.f32()[i], type);
  return t;
}

}  // namespace

TEST(HandCumsum, SameBytesAsTheCpuTwin) {
  for (int rep = 0; rep < 120; ++rep) {
    const ElemType t = kFloatTypes[rep % 3];
    const std::vector<int64_t> shape = random_shape(rnd(1, 5), 1, rnd(0, 3) == 0 ? 30 : 6);
    const int64_t axis = rnd(0, static_cast<int64_t>(shape.size()) - 1);
    const int64_t reverse = rnd(0, 2);  // 2: the attribute absent
    OpInts ints = {{"axis", {axis}}};
    if (reverse < 2) ints["reverse"] = {reverse};
    HostTensor x = rep % 2 ? any_but_nan(t, shape) : moderate(t, shape);
    expect_same("cumsum", {&x}, {like(t, shape)}, ints, {},
                std::string(dtype_name(t)) + rt::shape_str(shape) + " axis " + std::to_string(axis) + " reverse " +
                    std::to_string(reverse));
  }
}

// One launch of modelc_cumsum with an index per line (outer x inner); none for an empty tensor.
TEST(HandCumsum, OneIndexPerLine) {
  HostTensor x = moderate(ElemType::BF16, {3, 5, 7}), out = like(ElemType::BF16, {3, 5, 7});
  for (int64_t axis = 0; axis < 3; ++axis) {
    const OpInts ints = {{"axis", {axis}}, {"reverse", {1}}};
    LibCall c;
    c.op = "cumsum";
    c.ints = &ints;
    c.inputs.push_back({x.bytes.data(), x.type, x.shape});
    c.outputs.push_back({out.bytes.data(), out.type, out.shape});
    const OpLaunches l = plan_launches(c, nullptr);
    ASSERT_EQ(l.launches.size(), 1u);
    EXPECT_EQ(l.launches[0].kernel, HandKernel::Cumsum);
    EXPECT_EQ(l.launches[0].n(), 3 * 5 * 7 / x.shape[static_cast<size_t>(axis)]) << axis;
    EXPECT_FALSE(l.checks_ids);
  }
  for (size_t zero = 0; zero < 3; ++zero) {
    std::vector<int64_t> shape = {3, 5, 7};
    shape[zero] = 0;
    HostTensor e(ElemType::F32, shape);
    const OpInts ints = {{"axis", {1}}};
    LibCall c;
    c.op = "cumsum";
    c.ints = &ints;
    c.inputs.push_back({&e, e.type, e.shape});  // non-null: present, but no element
    c.outputs.push_back({&e, e.type, e.shape});
    EXPECT_TRUE(plan_launches(c, nullptr).launches.empty()) << zero;
    expect_same("cumsum", {&e}, {like(ElemType::F32, shape)}, ints);
  }
  EXPECT_STREQ(hand_kernel_name(HandKernel::Cumsum), "modelc_cumsum");
  if (*rt::cuda::hand_kernels_ptx() != '\0') {
    EXPECT_NE(std::string(rt::cuda::hand_kernels_ptx()).find(".entry modelc_cumsum("), std::string::npos);
  }
}

// The checks are plan_cumsum's on both paths: the same words, exactly these.
TEST(HandCumsum, ErrorsAreTheCpuTwins) {
  HostTensor x = moderate(ElemType::F16, {2, 3}), xi = random_tensor(ElemType::I32, {2, 3});
  HostTensor s = moderate(ElemType::F32, {});
  const OpInts axis1 = {{"axis", {1}}};
  const std::string at = "cumsum at test.model:1:1: ";
  auto both = [&](const std::vector<const HostTensor*>& ins, const std::vector<HostTensor>& outs, const OpInts& ints,
                  const std::string& want) {
    std::vector<HostTensor> emu = outs, cpu = outs;
    EXPECT_EQ(error_of([&] { run_emulated_op("cumsum", ins, emu, ints); }), at + want);
    EXPECT_EQ(error_of([&] { run_cpu_op("cumsum", ins, cpu, ints); }), at + want);
  };
  const std::vector<HostTensor> out{like(ElemType::F16, {2, 3})};
  both({&x, &x}, out, axis1, "expects 1 input, got 2");
  both({&x}, {like(ElemType::F16, {2, 3}), like(ElemType::F16, {2, 3})}, axis1, "expects 1 output, got 2");
  both({nullptr}, out, axis1, "input 0 is missing");
  both({&xi}, {like(ElemType::I32, {2, 3})}, axis1, "input must be f32, f16 or bf16, got i32[2,3]");
  both({&x}, {like(ElemType::BF16, {2, 3})}, axis1, "output is bf16[2,3], expected the input's f16[2,3]");
  both({&x}, {like(ElemType::F16, {2, 4})}, axis1, "output is f16[2,4], expected the input's f16[2,3]");
  both({&s}, {like(ElemType::F32, {})}, {{"axis", {0}}}, "cannot take the cumulative sum of a scalar");
  both({&x}, out, {}, "missing attribute 'axis'");
  both({&x}, out, {{"axis", {2}}}, "axis 2 is out of range for rank 2");
  both({&x}, out, {{"axis", {-1}}}, "axis -1 is out of range for rank 2");
  both({&x}, out, {{"axis", {0}}, {"reverse", {-1}}}, "reverse must be 0 or 1, got -1");
  both({&x}, out, {{"axis", {0}}, {"reverse", {1, 1}}}, "attribute 'reverse' must hold one integer, got [1,1]");
}

}  // namespace modelc::kernels::cuda::test
