// matmul against a double-precision loop: random batch shapes with broadcasting, rank-1
// operands on either side, the folded `x @ w` path and every error. Tolerance: 1e-5 of the
// sum of |a*b| over the products of an element, plus 1e-6.
#include <fmt/format.h>

#include "kernels/cpu/gemm.h"
#include "tests/runtime/rt_harness.h"

namespace modelc::rt::test {

namespace {

// numpy matmul in double, with the per-element scale sum |a_ik * b_kj|.
std::vector<int64_t> ref_matmul(const HostTensor& a, const HostTensor& b, std::vector<double>& out, std::vector<double>& scale) {
  std::vector<int64_t> sa = a.shape, sb = b.shape;
  bool va = sa.size() == 1, vb = sb.size() == 1;
  if (va) sa.insert(sa.begin(), 1);
  if (vb) sb.push_back(1);
  int64_t M = sa[sa.size() - 2], K = sa.back(), N = sb.back();
  size_t nb = std::max(sa.size(), sb.size()) - 2;
  std::vector<int64_t> batch(nb), pa(nb, 1), pb(nb, 1);
  for (size_t k = 0; k < nb; ++k) {
    if (k + sa.size() - 2 >= nb) pa[k] = sa[k + sa.size() - 2 - nb];
    if (k + sb.size() - 2 >= nb) pb[k] = sb[k + sb.size() - 2 - nb];
    batch[k] = std::max(pa[k], pb[k]);
  }
  int64_t total = 1;
  for (int64_t d : batch) total *= d;
  out.assign(static_cast<size_t>(total * M * N), 0);
  scale = out;
  for (int64_t bi = 0; bi < total; ++bi) {
    int64_t rem = bi, oa = 0, ob = 0, sta = M * K, stb = K * N;
    for (size_t k = nb; k-- > 0;) {
      int64_t i = rem % batch[k];
      rem /= batch[k];
      if (pa[k] != 1) oa += i * sta;
      if (pb[k] != 1) ob += i * stb;
      sta *= pa[k], stb *= pb[k];
    }
    for (int64_t m = 0; m < M; ++m)
      for (int64_t n = 0; n < N; ++n) {
        double acc = 0, s = 0;
        for (int64_t k = 0; k < K; ++k) {
          double p = static_cast<double>(a.f32()[oa + m * K + k]) * b.f32()[ob + k * N + n];
          acc += p, s += std::abs(p);
        }
        out[static_cast<size_t>((bi * M + m) * N + n)] = acc;
        scale[static_cast<size_t>((bi * M + m) * N + n)] = s;
      }
  }
  std::vector<int64_t> shape = batch;
  if (!va) shape.push_back(M);
  if (!vb) shape.push_back(N);
  return shape;
}

void check(std::vector<int64_t> sa, std::vector<int64_t> sb, const std::string& what) {
  HostTensor a = random_f32(sa), b = random_f32(sb);
  std::vector<double> ref, scale;
  std::vector<int64_t> shape = ref_matmul(a, b, ref, scale);
  HostTensor out = filled_f32(shape, NAN);
  run_op("matmul", {&a, &b}, {&out});
  expect_close(out, ref, 1e-5, 1e-6, &scale, what + " " + a.shape_str() + " @ " + b.shape_str());
}

}  // namespace

TEST(Matmul, RandomBroadcastBatches) {
  for (int rep = 0; rep < 40; ++rep) {
    int64_t M = rnd(1, 9), K = rnd(1, 40), N = rnd(1, 9);
    std::vector<int64_t> batch = random_shape(rnd(0, 3), 1, 3);
    std::vector<int64_t> ba = batch, bb = batch;
    for (auto& d : ba) if (rnd(0, 2) == 0) d = 1;   // broadcast some dims on either side
    for (auto& d : bb) if (rnd(0, 2) == 0) d = 1;
    if (!bb.empty() && rnd(0, 1)) bb.erase(bb.begin());  // fewer batch dims on the right
    ba.push_back(M), ba.push_back(K);
    bb.push_back(K), bb.push_back(N);
    check(ba, bb, "batched");
  }
}

TEST(Matmul, SharedRightOperandFolds) {
  for (int rep = 0; rep < 10; ++rep) {
    std::vector<int64_t> sa = random_shape(rnd(1, 3), 1, 5);
    int64_t K = rnd(1, 64), N = rnd(1, 33);
    sa.push_back(K);
    check(sa, {K, N}, "x @ w");
  }
  check({64, 784}, {784, 256}, "fashion_mlp");
}

TEST(Matmul, RankOneOperands) {
  for (int rep = 0; rep < 10; ++rep) {
    int64_t K = rnd(1, 30), M = rnd(1, 6), N = rnd(1, 6);
    check({K}, {K}, "vector . vector");
    check({K}, {K, N}, "vector @ matrix");
    check({M, K}, {K}, "matrix @ vector");
    check({rnd(1, 3), M, K}, {K}, "batch @ vector");
    check({K}, {rnd(1, 3), K, N}, "vector @ batch");
  }
}

TEST(Matmul, EmptyInnerDimensionGivesZeros) {
  HostTensor a(ElemType::F32, {3, 0}), b(ElemType::F32, {0, 2});
  HostTensor out = filled_f32({3, 2}, 7);
  run_op("matmul", {&a, &b}, {&out});
  for (int i = 0; i < 6; ++i) EXPECT_EQ(out.f32()[i], 0.0f);
}

TEST(Gemm, PoolSplitsMatchTheReferenceInEveryMode) {
  // Large enough to be split over the pool (> 1 MFLOP), both split directions, transposes.
  for (int rep = 0; rep < 6; ++rep) {
    bool ta = rep & 1, tb = rep & 2;
    int64_t M = rnd(20, 200), N = rnd(20, 200), K = rnd(60, 120);
    if (rep >= 4) std::swap(M, N);
    HostTensor A = random_f32(ta ? std::vector<int64_t>{K, M} : std::vector<int64_t>{M, K});
    HostTensor B = random_f32(tb ? std::vector<int64_t>{N, K} : std::vector<int64_t>{K, N});
    std::vector<double> ref(static_cast<size_t>(M * N)), scale(ref.size());
    for (int64_t m = 0; m < M; ++m)
      for (int64_t n = 0; n < N; ++n) {
        double acc = 0, sc = 0;
        for (int64_t k = 0; k < K; ++k) {
          double p = static_cast<double>(ta ? A.f32()[k * M + m] : A.f32()[m * K + k]) * (tb ? B.f32()[n * K + k] : B.f32()[k * N + n]);
          acc += p, sc += std::abs(p);
        }
        ref[static_cast<size_t>(m * N + n)] = acc, scale[static_cast<size_t>(m * N + n)] = sc;
      }
    for (int threads : {1, 2, 3}) {
      ThreadPool pool(threads);
      for (auto mode : {kernels::GemmThreading::Pool, kernels::GemmThreading::OpenBlas}) {
        kernels::set_gemm_threading(mode, threads);
        HostTensor C = filled_f32({M, N}, NAN);
        kernels::parallel_sgemm(pool, ta, tb, M, N, K, A.f32(), ta ? M : K, B.f32(), tb ? K : N, 0.0f, C.f32(), N);
        expect_close(C, ref, 1e-5, 1e-6, &scale, fmt::format("sgemm ta={} tb={} {}x{}x{} threads {}", ta, tb, M, N, K, threads));
      }
    }
    kernels::set_gemm_threading(kernels::GemmThreading::Pool, 1);
  }
}

TEST(Matmul, LargeAndBatchedAcrossThreadCounts) {
  HostTensor a = random_f32({3, 130, 70}), b = random_f32({70, 90}), bb = random_f32({3, 70, 90});
  std::vector<double> ref, scale, ref2, scale2;
  ref_matmul(a, b, ref, scale);
  ref_matmul(a, bb, ref2, scale2);
  for (int threads : {1, 2, 4}) {
    ThreadPool pool(threads);
    HostTensor o = filled_f32({3, 130, 90}, NAN), o2 = o;
    run_op("matmul", {&a, &b}, {&o}, {}, {}, &pool);
    run_op("matmul", {&a, &bb}, {&o2}, {}, {}, &pool);
    expect_close(o, ref, 1e-5, 1e-6, &scale, "folded, threads " + std::to_string(threads));
    expect_close(o2, ref2, 1e-5, 1e-6, &scale2, "batched, threads " + std::to_string(threads));
  }
}

TEST(Matmul, Errors) {
  HostTensor a = random_f32({2, 3}), b = random_f32({4, 5}), out = random_f32({2, 5});
  expect_error([&] { run_op("matmul", {&a, &b}, {&out}); }, {"matmul", "test.model:1:1", "[2,3] @ [4,5]", "inner"});
  HostTensor b2 = random_f32({3, 5}), bad = random_f32({2, 4});
  expect_error([&] { run_op("matmul", {&a, &b2}, {&bad}); }, {"matmul", "output has shape [2,4]", "expected [2,5]"});
  HostTensor x = random_f32({2, 2, 3}), y = random_f32({3, 3, 5}), o = random_f32({3, 2, 5});
  expect_error([&] { run_op("matmul", {&x, &y}, {&o}); }, {"batch dimensions do not broadcast"});
  HostTensor ai(ElemType::I32, {2, 3});
  expect_error([&] { run_op("matmul", {&ai, &b2}, {&out}); }, {"left operand must be f32", "i32"});
  HostTensor s(ElemType::F32, {});
  expect_error([&] { run_op("matmul", {&s, &b2}, {&out}); }, {"rank >= 1"});
  expect_error([&] { run_op("matmul", {&a}, {&out}); }, {"expects 2 inputs"});
}

// bf16 linear layers through oneDNN's native bf16 GEMM (kernels/cpu/library.h,
// LowFloatMatmul) against the widened path, which tests/codegen/test_library_lowp.cc checks
// against double. Both accumulate in f32 and round once; they sum in other orders, so:
// one bf16 ulp of the result (2^-8 relative) + 1e-5 of the sum of |a b| + 1e-6.
namespace {

HostTensor random_bf16(std::vector<int64_t> shape, float r) {
  HostTensor t(ElemType::BF16, std::move(shape));
  std::uniform_real_distribution<float> d(-r, r);
  auto* p = reinterpret_cast<uint16_t*>(t.bytes.data());
  for (int64_t i = 0; i < t.numel(); ++i) p[i] = kernels::f32_to_low(d(rng()), ElemType::BF16);
  return t;
}

double element(const HostTensor& t, int64_t i) {
  if (t.type == ElemType::F32) return t.f32()[i];
  return kernels::low_to_f32(reinterpret_cast<const uint16_t*>(t.bytes.data())[i], t.type);
}

// Restores the process-wide mode when a test ends, whichever way.
struct LowFloatMode {
  explicit LowFloatMode(kernels::LowFloatMatmul m) { kernels::set_low_float_matmul(m); }
  ~LowFloatMode() { kernels::set_low_float_matmul(kernels::LowFloatMatmul::Auto); }
};

// Runs matmul on `ins` into a fresh output of `type` once per mode and returns both.
std::pair<HostTensor, HostTensor> widened_and(kernels::LowFloatMatmul mode, std::vector<HostTensor*> ins,
                                              std::vector<int64_t> shape, ElemType type, const Ints& ints = {}) {
  HostTensor w(type, shape), n(type, shape);
  {
    LowFloatMode m(kernels::LowFloatMatmul::Widened);
    run_op("matmul", ins, {&w}, ints);
  }
  {
    LowFloatMode m(mode);
    run_op("matmul", ins, {&n}, ints);
  }
  return {std::move(w), std::move(n)};
}

}  // namespace

TEST(Matmul, NativeBf16MatchesWidened) {
  if (!kernels::native_bf16_available())
    GTEST_SKIP() << "this CPU has no bf16 instructions (AVX512-BF16 or AMX), or the runtime has no oneDNN: "
                    "bf16 matmuls are widened here (ForcingNativeBf16WhereItIsMissingIsAnError runs instead)";
  using Act = EpilogueActivation;
  const std::pair<bool, Act> epilogues[] = {{false, Act::None}, {true, Act::None}, {true, Act::Relu},
                                            {false, Act::Sigmoid}, {true, Act::Tanh}, {true, Act::GeluErf}};
  for (ElemType out : {ElemType::BF16, ElemType::F32}) {
    for (const auto& [bias, act] : epilogues) {
      if (act == Act::GeluErf && out != ElemType::F32) continue;  // widened by design
      const int64_t B = rnd(1, 3), M = rnd(1, 70), K = rnd(1, 300), N = rnd(1, 50);
      const float r = 2.0f / std::sqrt(static_cast<float>(K));
      HostTensor x = random_bf16({B, M, K}, 1), w = random_bf16({K, N}, r), b = random_f32({N});
      std::vector<HostTensor*> ins{&x, &w};
      Ints ints;
      if (bias || act != Act::None) ints["epilogue"] = {bias ? 1 : 0, static_cast<int64_t>(act)};
      if (bias) ins.push_back(&b);
      const auto [want, got] = widened_and(kernels::LowFloatMatmul::Native, ins, {B, M, N}, out, ints);
      const std::string what = fmt::format("{}x{}x{} @ {}x{} -> {}, bias {}, activation {}", B, M, K, K, N,
                                           out == ElemType::F32 ? "f32" : "bf16", bias, static_cast<int>(act));
      int bad = 0;
      for (int64_t i = 0; i < want.numel(); ++i) {
        const int64_t row = i / N, col = i % N;
        double sum_abs = bias ? std::abs(b.f32()[col]) : 0;
        for (int64_t k = 0; k < K; ++k) sum_abs += std::abs(element(x, row * K + k) * element(w, k * N + col));
        // A bf16 result: two f32 sums in different orders that straddle a rounding boundary
        // round one bf16 ulp apart (up to 2^-7 relative); an f32 result half of that.
        const double ulp = out == ElemType::BF16 ? 0x1p-7 : 0x1p-8;
        const double tol = ulp * std::abs(element(want, i)) + 1e-5 * sum_abs + 1e-6;
        if (!(std::abs(element(got, i) - element(want, i)) <= tol) && ++bad <= 5)
          ADD_FAILURE() << what << " element " << i << ": native " << element(got, i) << ", widened " << element(want, i);
      }
      EXPECT_EQ(bad, 0) << what;
    }
  }
}

TEST(Matmul, ForcingNativeBf16WhereItIsMissingIsAnError) {
  if (kernels::native_bf16_available())
    GTEST_SKIP() << "this CPU has native bf16 matmul (NativeBf16MatchesWidened runs instead)";
  expect_error([] { kernels::set_low_float_matmul(kernels::LowFloatMatmul::Native); },
               {"native bf16 matmul is not available"});
  EXPECT_EQ(kernels::low_float_matmul(), kernels::LowFloatMatmul::Auto) << "a failed set changes nothing";
  // Auto widens here: bit for bit the widened result.
  HostTensor x = random_bf16({rnd(1, 40), rnd(1, 90)}, 1), w = random_bf16({x.shape[1], rnd(1, 30)}, 0.2f);
  const auto [want, got] = widened_and(kernels::LowFloatMatmul::Auto, {&x, &w}, {x.shape[0], w.shape[1]}, ElemType::BF16);
  EXPECT_EQ(got.bytes, want.bytes);
}

}  // namespace modelc::rt::test
