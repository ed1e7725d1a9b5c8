// The CPU library's matmul and convolutions (kernels/cpu/matmul.cc, conv.cc) with f16 and
// bf16 operands, as autocast makes them (docs/precision.md): the operands widened to f32,
// one f32 product (f32 accumulation), the result rounded to the output type. Run through a
// lowered Program against the double reference on random shapes. Tolerance, relative as
// expect_near's: one ulp of the output type (the reference does not round its result) plus
// the f32 accumulation's error.
#include <fmt/format.h>

#include "kernels/cpu/library.h"
#include "tests/codegen/lowp_harness.h"

namespace modelc::test {
namespace {

void check(const Graph& g, const std::map<std::string, RefTensor>& feeds, DType t, const std::string& what) {
  InterpResult ref = interpret(g, feeds, {});
  std::map<std::string, RefTensor> got = run_program(g, feeds, true);
  for (const auto& [name, want] : ref.outputs) {
    ASSERT_EQ(got.at(name).dtype, t) << what;
    expect_near(got.at(name), want, ulp_tol(t) + 1e-4, fmt::format("{} {} {}", what, dtype_name(t), name));
  }
}

TEST(LibraryLowPrecision, ConversionsAreExactAndRoundToNearestEven) {
  // Every bit pattern widens to the value it holds; every f32 of a random sample (all
  // exponents) and the widened patterns' midpoints round as round_to_dtype does.
  for (DType t : {DType::F16, DType::BF16}) {
    const rt::ElemType e = t == DType::F16 ? rt::ElemType::F16 : rt::ElemType::BF16;
    for (uint32_t b = 0; b < 65536; ++b) {
      const double want = from_bits(static_cast<uint16_t>(b), t);
      const float got = kernels::low_to_f32(static_cast<uint16_t>(b), e);
      if (std::isnan(want)) {
        ASSERT_TRUE(std::isnan(got)) << b;
        continue;
      }
      ASSERT_EQ(got, want) << dtype_name(t) << " bits " << b;
      ASSERT_EQ(std::signbit(got), std::signbit(want));
      ASSERT_EQ(kernels::f32_to_low(got, e), b) << dtype_name(t) << " round trip of " << got;
      // The midpoint to the next value up (ties to even) and just above it.
      const double next = from_bits(static_cast<uint16_t>(b + 1), t);
      if (!std::isfinite(want) || !std::isfinite(next) || (b & 0x7fff) == 0x7fff || std::signbit(next) != std::signbit(want)) continue;
      const float mid = static_cast<float>((want + next) / 2);
      if (static_cast<double>(mid) != (want + next) / 2) continue;  // not an f32
      ASSERT_EQ(from_bits(kernels::f32_to_low(mid, e), t), round_to_dtype(mid, t)) << dtype_name(t) << " midpoint " << mid;
      const float above = std::nextafter(mid, std::signbit(mid) ? -INFINITY : INFINITY);
      ASSERT_EQ(from_bits(kernels::f32_to_low(above, e), t), round_to_dtype(above, t)) << dtype_name(t) << " above " << mid;
    }
  }
}

TEST(LibraryLowPrecision, MatmulWidensAccumulatesInF32AndRounds) {
  for (DType t : {DType::F16, DType::BF16}) {
    // x @ w (one tall product), a batched product with broadcasting, a vector operand.
    const int64_t M = rnd(1, 40), K = rnd(1, 70), N = rnd(1, 30), Bt = rnd(1, 3);
    const std::vector<std::pair<std::vector<int64_t>, std::vector<int64_t>>> shapes = {
        {{Bt, M, K}, {K, N}}, {{Bt, M, K}, {1, K, N}}, {{K}, {K, N}}, {{M, K}, {K}}};
    for (const auto& [sa, sb] : shapes) {
      Graph g;
      g.name = "mm";
      Value a = add_input(g, "a", TensorType{t, to_dims(sa)}), b = add_input(g, "b", TensorType{t, to_dims(sb)});
      g.outputs = {{"out", emit_op(g, OpKind::Matmul, {a, b}), {}}};
      // Values of order 1 / sqrt(K): the products stay of order 1.
      const double r = 2.0 / std::sqrt(static_cast<double>(K));
      check(g, {{"a", random_tensor(t, sa, -1, 1)}, {"b", random_tensor(t, sb, -r, r)}}, t,
            fmt::format("matmul {} @ {}", RefTensor(t, sa).shape_str(), RefTensor(t, sb).shape_str()));
    }
  }
}

TEST(LibraryLowPrecision, ConvolutionsAndTheirGradients) {
  for (DType t : {DType::F16, DType::BF16}) {
    const int64_t N = rnd(1, 3), C = rnd(1, 4), O = rnd(1, 5), H = rnd(5, 12), W = rnd(5, 12);
    const Attrs conv = attrs({{"stride", Ints{1}}, {"padding", Ints{1}}});
    Graph g;
    g.name = "conv";
    Value x = add_input(g, "x", TensorType{t, {Dim(N), Dim(C), Dim(H), Dim(W)}});
    Value w = add_input(g, "w", TensorType{t, {Dim(O), Dim(C), Dim(3), Dim(3)}});
    Value bias = add_input(g, "bias", TensorType{t, {Dim(O)}});
    Value y = emit_op(g, OpKind::Conv2d, {x, w, bias}, conv);
    Value gy = add_input(g, "gy", g.type(y));
    Attrs gi = conv, gw = conv;
    gi.set("input_shape", Shape{Dim(N), Dim(C), Dim(H), Dim(W)});
    gw.set("weight_shape", Shape{Dim(O), Dim(C), Dim(3), Dim(3)});
    g.outputs = {{"y", y, {}},
                 {"dx", emit_op(g, OpKind::Conv2dGradInput, {gy, w}, gi), {}},
                 {"dw", emit_op(g, OpKind::Conv2dGradWeight, {x, gy}, gw), {}}};
    const int64_t HO = g.type(y).shape[2].const_value(), WO = g.type(y).shape[3].const_value();
    // dw sums N * HO * WO products: its operands scaled to keep it of order 1.
    const double r = 1.0 / std::sqrt(static_cast<double>(N * HO * WO));
    check(g,
          {{"x", random_tensor(t, {N, C, H, W})},
           {"w", random_tensor(t, {O, C, 3, 3}, -0.3, 0.3)},
           {"bias", random_tensor(t, {O})},
           {"gy", random_tensor(t, {N, O, HO, WO}, -r, r)}},
          t, "conv2d");
  }
}

}  // namespace
}  // namespace modelc::test
