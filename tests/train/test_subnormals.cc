// The Session's subnormal mode through a compiled model: by default a run flushes subnormal
// results and operands to zero on every worker thread, flush_subnormals = false keeps IEEE
// gradual underflow, and either way the caller's own mode is what it was before the run
// (an embedding application's threads are not changed). The mechanism's unit tests:
// tests/runtime/float_env_test.cc.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <map>
#include <string>

#include "runtime/device/cpu/float_env.h"
#include "runtime/session/session.h"
#include "tests/train/torch_golden.h"

namespace modelc::test {
namespace {

constexpr int64_t kN = 1 << 16;  // enough elements for every worker thread to get a chunk

// under = x * 1e-20 underflows for x = 1e-20; doubled = 2 * s reads a subnormal s.
constexpr const char* kModel = R"(model tiny(N = 65536) {
  input x: f32[N]
  input s: f32[N]
  under = x * 1e-20
  doubled = s * 2.0
  output under, doubled
}
)";

struct Counts {
  int64_t zero_under = 0, zero_doubled = 0;
};

uint32_t bits(float f) { return std::bit_cast<uint32_t>(f); }

// Runs the model with the session's mode `flush` from a caller in mode `caller_flush`. The
// results are checked by their bits outside the caller's scope: a flushing thread reads a
// subnormal as 0 in any comparison.
Counts run(bool flush, bool caller_flush) {
  static const std::shared_ptr<rt::Program> p = compile_model_text("tiny", kModel);  // once for every run
  if (!p) {
    ADD_FAILURE() << "the model did not compile";
    return {};
  }
  rt::Session s(p, {.threads = 4, .flush_subnormals = flush});
  rt::HostTensor x(rt::ElemType::F32, {kN}), sub(rt::ElemType::F32, {kN});
  const float tiny = std::numeric_limits<float>::denorm_min() * 1000.0f;  // about 1.4e-42
  for (int64_t i = 0; i < kN; ++i) {
    x.f32()[i] = 1e-20f;
    sub.f32()[i] = tiny;
  }
  std::map<std::string, rt::HostTensor> out;
  {
    rt::SubnormalScope caller(caller_flush);
    out = s.eval({{"x", x}, {"s", sub}});
    EXPECT_EQ(rt::subnormals_flushed(), caller_flush) << "the run left the caller's thread in another mode";
  }
  rt::SubnormalScope check(false);
  const float under = 1e-20f * static_cast<float>(x.f32()[0]), doubled = 2.0f * tiny;  // IEEE, in this thread
  EXPECT_GT(under, 0.0f);
  Counts c;
  for (int64_t i = 0; i < kN; ++i) {
    const uint32_t u = bits(out.at("under").f32()[i]), d = bits(out.at("doubled").f32()[i]);
    c.zero_under += u == 0;
    c.zero_doubled += d == 0;
    if (!flush) {
      EXPECT_EQ(u, bits(under)) << i;
      EXPECT_EQ(d, bits(doubled)) << i;
    }
  }
  return c;
}

TEST(Subnormals, FlushedByDefaultOnEveryThread) {
  if (!rt::can_flush_subnormals()) GTEST_SKIP() << "this build cannot change the subnormal mode on this architecture";
  EXPECT_TRUE(rt::SessionOptions{}.flush_subnormals);
  for (bool caller : {false, true}) {
    Counts c = run(true, caller);
    EXPECT_EQ(c.zero_under, kN) << "caller mode " << caller;
    EXPECT_EQ(c.zero_doubled, kN) << "caller mode " << caller;
  }
}

TEST(Subnormals, KeptWhenAsked) {
  for (bool caller : {false, true}) {
    if (caller && !rt::can_flush_subnormals()) continue;
    Counts c = run(false, caller);
    EXPECT_EQ(c.zero_under, 0) << "caller mode " << caller;
    EXPECT_EQ(c.zero_doubled, 0) << "caller mode " << caller;
  }
}

}  // namespace
}  // namespace modelc::test
