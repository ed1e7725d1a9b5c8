// The CUDA epilogue kernel's body on the host against the CPU epilogue (kernels/cpu/epilogue.h):
// every activation, with and without bias, f32 bit for bit; f16 and bf16 as the CPU's
// widen-apply-round; the portable f16/bf16 conversions of bodies.h against the runtime's;
// and the launch's error paths.
#include <cmath>
#include <limits>

#include "kernels/cpu/epilogue.h"
#include "kernels/cuda/launches.h"
#include "tests/cuda_kernels/harness.h"

namespace modelc::kernels::cuda::test {

namespace {

using rt::EpilogueActivation;

uint32_t bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

float from_bits(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

// Values over the activations' interesting ranges, and the specials.
std::vector<float> epilogue_inputs(int64_t n) {
  std::vector<float> v(static_cast<size_t>(n));
  std::uniform_real_distribution<float> wide(-12.0f, 12.0f), narrow(-0.6f, 0.6f), huge(-100.0f, 100.0f);
  for (float& x : v) {
    const int64_t k = rnd(0, 9);
    x = k < 5 ? wide(rng()) : k < 8 ? narrow(rng()) : huge(rng());
  }
  const float specials[] = {0.0f, -0.0f, std::numeric_limits<float>::infinity(), -std::numeric_limits<float>::infinity(),
                            std::nanf(""), 88.5f, -87.5f, 0.5f, -0.5f, 1e-30f};
  for (size_t i = 0; i < std::size(specials) && i < v.size(); ++i) v[i] = specials[i];
  return v;
}

}  // namespace

TEST(HandEpilogue, F32MatchesTheCpuEpilogueBitForBit) {
  for (int a = 0; a < rt::kEpilogueActivations; ++a)
    for (bool with_bias : {false, true}) {
      const auto act = static_cast<EpilogueActivation>(a);
      const int64_t rows = rnd(1, 7), L = rnd(1, 37);
      std::vector<float> y = epilogue_inputs(rows * L), bias = epilogue_inputs(L), ref = y;
      for (float& b : bias) b = std::isfinite(b) ? b * 0.1f : b;
      Epilogue e;
      e.bias = with_bias ? bias.data() : nullptr;
      e.act = act;
      apply_epilogue_rows(e, ref.data(), rows, L, L, 0);
      run_on_host(plan_epilogue(y.data(), ElemType::F32, e.bias, act, rows, L));
      int bad = 0;
      for (size_t i = 0; i < y.size(); ++i) {
        const bool same = bits(y[i]) == bits(ref[i]) || (std::isnan(y[i]) && std::isnan(ref[i]));
        if (!same && ++bad <= 3)
          ADD_FAILURE() << rt::epilogue_activation_name(act) << (with_bias ? " + bias" : "") << " element " << i << ": kernel "
                        << y[i] << ", CPU " << ref[i];
      }
      EXPECT_EQ(bad, 0) << rt::epilogue_activation_name(act);
    }
}

// NCHW, as a convolution applies it: the bias runs along the channels, H * W values each.
TEST(HandEpilogue, ChannelBiasOverPlanesAsTheCpuConvolution) {
  for (int a = 0; a < rt::kEpilogueActivations; ++a) {
    const auto act = static_cast<EpilogueActivation>(a);
    const int64_t N = rnd(1, 3), C = rnd(1, 6), P = rnd(1, 13);
    std::vector<float> y = epilogue_inputs(N * C * P), bias = epilogue_inputs(C), ref = y;
    for (int64_t n = 0; n < N; ++n)
      for (int64_t ch = 0; ch < C; ++ch) {
        float* dst = ref.data() + (n * C + ch) * P;
        for (int64_t p = 0; p < P; ++p) dst[p] = dst[p] + bias[static_cast<size_t>(ch)];
        apply_activation(act, dst, P);
      }
    run_on_host(plan_epilogue(y.data(), ElemType::F32, bias.data(), act, N, C, P));
    for (size_t i = 0; i < y.size(); ++i)
      ASSERT_TRUE(bits(y[i]) == bits(ref[i]) || (std::isnan(y[i]) && std::isnan(ref[i])))
          << rt::epilogue_activation_name(act) << " element " << i << ": kernel " << y[i] << ", CPU " << ref[i];
  }
}

TEST(HandEpilogue, LowPrecisionOutputsRoundAsTheCpu) {
  for (ElemType t : {ElemType::F16, ElemType::BF16})
    for (int a = 0; a < rt::kEpilogueActivations; ++a) {
      const auto act = static_cast<EpilogueActivation>(a);
      const int64_t rows = rnd(1, 5), L = rnd(1, 23);
      std::vector<float> in = epilogue_inputs(rows * L), bias = epilogue_inputs(L);
      std::vector<uint16_t> y(in.size());
      std::vector<float> wide(in.size());
      for (size_t i = 0; i < in.size(); ++i) y[i] = f32_to_low(in[i], t), wide[i] = low_to_f32(y[i], t);
      Epilogue e;
      e.bias = bias.data();
      e.act = act;
      apply_epilogue_rows(e, wide.data(), rows, L, L, 0);
      run_on_host(plan_epilogue(y.data(), t, bias.data(), act, rows, L));
      for (size_t i = 0; i < y.size(); ++i) {
        const uint16_t want = f32_to_low(wide[i], t);
        const bool nan = std::isnan(low_to_f32(y[i], t)) && std::isnan(wide[i]);
        ASSERT_TRUE(y[i] == want || nan) << dtype_name(t) << " " << rt::epilogue_activation_name(act) << " element " << i
                                         << ": kernel bits " << y[i] << ", CPU bits " << want;
      }
    }
}

TEST(HandEpilogue, ConversionsMatchTheRuntimes) {
  for (uint32_t h = 0; h < 65536; ++h) {
    const auto b = static_cast<uint16_t>(h);
    const float f16 = f16_to_f32(b), want16 = low_to_f32(b, ElemType::F16);
    ASSERT_TRUE(bits(f16) == bits(want16) || (std::isnan(f16) && std::isnan(want16))) << "f16 bits " << h;
    ASSERT_EQ(bits(bf16_to_f32(b)), bits(low_to_f32(b, ElemType::BF16))) << "bf16 bits " << h;
  }
  std::vector<uint32_t> samples;
  for (uint32_t e = 0; e < 256; ++e)  // every exponent, both signs, mantissas at the rounding edges
    for (uint32_t m : {0u, 1u, 0xfffu, 0x1000u, 0x1001u, 0x2000u, 0x3000u, 0x7fffu, 0x8000u, 0x8001u, 0x18000u, 0x7fffffu})
      for (uint32_t s : {0u, 0x80000000u}) samples.push_back(s | (e << 23) | m);
  for (int i = 0; i < 200000; ++i) samples.push_back(static_cast<uint32_t>(rnd(0, 0xffffffffLL)));
  for (uint32_t nan : {0x7f800001u, 0x7fc00000u, 0x7fffffffu, 0xff800001u, 0xffc00000u, 0xffffffffu}) samples.push_back(nan);
  for (uint32_t u : samples) {  // NaNs included: the same quiet NaN bits as the runtime's
    const float f = from_bits(u);
    ASSERT_EQ(f32_to_f16(f), f32_to_low(f, ElemType::F16)) << "f32 bits 0x" << std::hex << u;
    ASSERT_EQ(f32_to_bf16(f), f32_to_low(f, ElemType::BF16)) << "f32 bits 0x" << std::hex << u;
  }
}

TEST(HandEpilogue, Errors) {
  float y[4] = {};
  EXPECT_EQ(error_of([&] { plan_epilogue(y, ElemType::I32, nullptr, EpilogueActivation::Relu, 2, 2); }),
            "CUDA epilogue: the output must be f32, f16 or bf16, got i32");
  EXPECT_EQ(error_of([&] { plan_epilogue(y, ElemType::F32, nullptr, static_cast<EpilogueActivation>(9), 2, 2); }),
            "CUDA epilogue: unknown activation code 9 (known: 0 to 5)");
  EXPECT_EQ(error_of([&] { plan_epilogue(y, ElemType::F32, nullptr, EpilogueActivation::Relu, -1, 2); }),
            "CUDA epilogue: bad extent -1 x 2 x 1");
  EXPECT_EQ(error_of([&] { plan_epilogue(y, ElemType::F32, nullptr, EpilogueActivation::Relu, 1, 2, 0); }),
            "CUDA epilogue: bad extent 1 x 2 x 0");
}

}  // namespace modelc::kernels::cuda::test
