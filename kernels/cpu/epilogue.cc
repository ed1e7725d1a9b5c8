// Library epilogues on the CPU: reading ints["epilogue"] and the vectorized activations.
#include "kernels/cpu/epilogue.h"

#include <fmt/format.h>

#include <bit>
#include <cmath>
#include <cstring>

#include "runtime/base/tensor.h"

namespace modelc::kernels {

namespace {

// Four floats: SSE on the x86-64 baseline (no ABI change, unlike 32-byte vectors).
typedef float v4f __attribute__((vector_size(16)));
typedef int32_t v4i __attribute__((vector_size(16)));

inline v4f load(const float* p) {
  v4f v;
  std::memcpy(&v, p, sizeof v);
  return v;
}
inline void store(float* p, v4f v) { std::memcpy(p, &v, sizeof v); }
inline v4f splat(float x) { return v4f{x, x, x, x}; }
inline v4f vabs(v4f x) { return x < 0 ? -x : x; }  // -0 stays -0: only the sign test matters below

// e^x: x = n ln2 + r with |r| <= ln2 / 2, e^r by Cephes' expf polynomial, 2^n through the
// exponent bits. Below -87 the result flushes to 0 (no subnormals), above 88 it is +inf;
// NaN propagates.
inline v4f vexp(v4f x) {
  v4f xc = x < -87.0f ? splat(-87.0f) : x;
  xc = xc > 88.0f ? splat(88.0f) : xc;
  xc = xc == xc ? xc : splat(0.0f);  // NaN: any finite value, replaced below
  const v4f n = (xc * 1.44269504088896341f + 12582912.0f) - 12582912.0f;  // round to nearest
  v4f r = xc - n * 0.693359375f;
  r = r - n * -2.12194440e-4f;
  v4f p = splat(1.9875691500e-4f);
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * r * r + r + 1.0f;
  const v4i bits = (__builtin_convertvector(n, v4i) + 127) << 23;
  v4f y = p * std::bit_cast<v4f>(bits);
  y = x > 88.0f ? splat(INFINITY) : y;
  y = x < -87.0f ? splat(0.0f) : y;
  return x == x ? y : x;
}

// The code generator's tanh (compiler/codegen/scalar.cc, tanh_f32).
inline v4f vtanh(v4f x) {
  const v4f x2 = x * x;
  v4f p = splat(-929569.0f / 638512875.0f);
  p = p * x2 + 21844.0f / 6081075;
  p = p * x2 + -1382.0f / 155925;
  p = p * x2 + 62.0f / 2835;
  p = p * x2 + -17.0f / 315;
  p = p * x2 + 2.0f / 15;
  p = p * x2 + -1.0f / 3;
  const v4f small = x * (1.0f + x2 * p);  // keeps -0
  const v4f ax = vabs(x);
  const v4f big = 1.0f - 2.0f / (vexp(ax * 2.0f) + 1.0f);
  return ax < 0.5f ? small : (x < 0 ? -big : big);
}

// x >= 0: 1 / (1 + e^-x); else e^x / (1 + e^x); both from t = e^-|x|.
inline v4f vsigmoid(v4f x) {
  const v4f t = vexp(-vabs(x));
  const v4f r = 1.0f / (1.0f + t);
  return x >= 0 ? r : (x == x ? t * r : x);
}

inline v4f vgelu_tanh(v4f x) { return 0.5f * x * (1.0f + vtanh(0.7978845608028654f * (x + 0.044715f * x * x * x))); }

// erff has no vector form here; the generated kernels call it per element too.
inline v4f vgelu_erf(v4f x) {
  v4f e;
  for (int k = 0; k < 4; ++k) e[k] = std::erf(x[k] * 0.7071067811865476f);
  return 0.5f * x * (1.0f + e);
}

template <EpilogueActivation A>
inline v4f act(v4f x) {
  if constexpr (A == EpilogueActivation::Relu) return x < 0 ? splat(0.0f) : x;  // NaN stays
  else if constexpr (A == EpilogueActivation::GeluErf) return vgelu_erf(x);
  else if constexpr (A == EpilogueActivation::GeluTanh) return vgelu_tanh(x);
  else if constexpr (A == EpilogueActivation::Tanh) return vtanh(x);
  else if constexpr (A == EpilogueActivation::Sigmoid) return vsigmoid(x);
  else return x;
}

// y[j] = act(y[j] (+ bias[j])) for j < n; a partial last vector goes through a padded copy.
template <EpilogueActivation A, bool Bias>
void run(float* y, const float* bias, int64_t n) {
  int64_t j = 0;
  for (; j + 4 <= n; j += 4) {
    v4f v = load(y + j);
    if constexpr (Bias) v += load(bias + j);
    store(y + j, act<A>(v));
  }
  if (j == n) return;
  float tail[4] = {0, 0, 0, 0}, btail[4] = {0, 0, 0, 0};
  const size_t rest = static_cast<size_t>(n - j) * sizeof(float);
  std::memcpy(tail, y + j, rest);
  if constexpr (Bias) std::memcpy(btail, bias + j, rest);
  v4f v = load(tail);
  if constexpr (Bias) v += load(btail);
  store(tail, act<A>(v));
  std::memcpy(y + j, tail, rest);
}

using RunFn = void (*)(float*, const float*, int64_t);

template <bool Bias>
RunFn runner(EpilogueActivation a) {
  switch (a) {
    case EpilogueActivation::None: return run<EpilogueActivation::None, Bias>;
    case EpilogueActivation::Relu: return run<EpilogueActivation::Relu, Bias>;
    case EpilogueActivation::GeluErf: return run<EpilogueActivation::GeluErf, Bias>;
    case EpilogueActivation::GeluTanh: return run<EpilogueActivation::GeluTanh, Bias>;
    case EpilogueActivation::Tanh: return run<EpilogueActivation::Tanh, Bias>;
    case EpilogueActivation::Sigmoid: return run<EpilogueActivation::Sigmoid, Bias>;
  }
  return run<EpilogueActivation::None, Bias>;
}

}  // namespace

Epilogue read_epilogue(const LibCall& c, size_t bias_input, int64_t channels, const char* channel_what) {
  Epilogue e;
  const std::vector<int64_t> attr = c.ints_or("epilogue", {});
  const bool extra_input = c.inputs.size() > bias_input;
  if (attr.empty()) {
    if (extra_input) c.fail(fmt::format("has {} inputs, but no epilogue bias (ints[\"epilogue\"] is absent)", c.inputs.size()));
    return e;
  }
  if (attr.size() != 2)
    c.fail(fmt::format("attribute 'epilogue' must be {{bias, activation}}, got {}", rt::shape_str(attr)));
  if (attr[0] != 0 && attr[0] != 1) c.fail(fmt::format("epilogue bias flag must be 0 or 1, got {}", attr[0]));
  if (attr[1] < 0 || attr[1] >= rt::kEpilogueActivations)
    c.fail(fmt::format("unknown epilogue activation code {} (known: 0 to {})", attr[1], rt::kEpilogueActivations - 1));
  e.act = static_cast<EpilogueActivation>(attr[1]);
  if (attr[0] == 0) {
    if (extra_input) c.fail(fmt::format("has {} inputs, but its epilogue has no bias", c.inputs.size()));
    return e;
  }
  if (!extra_input || !c.inputs[bias_input].present()) c.fail(fmt::format("epilogue bias (input {}) is missing", bias_input));
  const TensorArg& b = c.inputs[bias_input];
  int64_t longest = 1;
  for (int64_t d : b.shape) longest = d == 1 ? longest : (longest == 1 ? d : -1);
  if (b.type != ElemType::F32 || b.numel() != channels || longest == -1)
    c.fail(fmt::format("epilogue bias must be f32[{}] (one value per {}), got {}{}", channels, channel_what,
                       dtype_name(b.type), rt::shape_str(b.shape)));
  e.bias = b.f32();
  return e;
}

void apply_epilogue_rows(const Epilogue& e, float* y, int64_t rows, int64_t cols, int64_t ld, int64_t col0) {
  if (e.empty() || rows <= 0 || cols <= 0) return;
  const RunFn f = e.bias ? runner<true>(e.act) : runner<false>(e.act);
  const float* bias = e.bias ? e.bias + col0 : nullptr;
  for (int64_t r = 0; r < rows; ++r) f(y + r * ld, bias, cols);
}

void apply_activation(EpilogueActivation a, float* y, int64_t n) {
  if (a == EpilogueActivation::None || n <= 0) return;
  runner<false>(a)(y, nullptr, n);
}

}  // namespace modelc::kernels
