// The subnormal mode (runtime/device/cpu/float_env.h): a scope flushes and restores, and the
// thread pool's workers and the CPU streams run in the mode of the thread that gave them the
// work, whatever mode they ran in before. (The Session's default and its switch, through a
// compiled model: tests/train/test_subnormals.cc.)
#include "runtime/device/cpu/float_env.h"

#include <atomic>
#include <chrono>
#include <limits>
#include <mutex>
#include <set>
#include <thread>

#include "runtime/execution/cpu/streams.h"

#if defined(__x86_64__) || defined(__i386__)
#include <xmmintrin.h>
#endif
#include "tests/runtime/rt_harness.h"

namespace modelc::rt::test {
namespace {

// 1e-20 * 1e-20 underflows to a subnormal (about 1e-40) unless results are flushed; a
// subnormal operand times 2 reads as 0 when operands are flushed. volatile: computed here,
// at run time, in this thread's mode.
float underflow() {
  volatile float a = 1e-20f, b = 1e-20f;
  return a * b;
}
float subnormal_operand() {
  volatile float a = std::numeric_limits<float>::denorm_min() * 1000.0f, two = 2.0f;
  return a * two;
}

// What one thread's arithmetic does: 1 when both results say "flushed", 0 when both say
// "kept", -1 for a mix (a mode the runtime never sets).
int observed_mode() {
  bool ftz = underflow() == 0.0f, daz = subnormal_operand() == 0.0f;
  return ftz && daz ? 1 : !ftz && !daz ? 0 : -1;
}

// Called by each of `chunks` chunks of one parallel_for: holds the chunk until every chunk has
// started (or five seconds have passed), so that the chunks run on several threads rather
// than all on the caller's.
void wait_for_all(std::atomic<int>& entered, int chunks) {
  entered.fetch_add(1);
  auto until = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  while (entered.load() < chunks && std::chrono::steady_clock::now() < until) std::this_thread::yield();
}

TEST(FloatEnv, ScopeFlushesAndRestores) {
  if (!can_flush_subnormals()) GTEST_SKIP() << "this build cannot change the subnormal mode on this architecture";
  SubnormalScope outer(false);
  EXPECT_EQ(observed_mode(), 0);
  EXPECT_GT(underflow(), 0.0f);
  {
    SubnormalScope inner(true);
    EXPECT_TRUE(subnormals_flushed());
    EXPECT_EQ(observed_mode(), 1);
    {
      SubnormalScope keep(false);
      EXPECT_EQ(observed_mode(), 0);
    }
    EXPECT_EQ(observed_mode(), 1);
  }
  EXPECT_FALSE(subnormals_flushed());
  EXPECT_EQ(observed_mode(), 0);
}

// An application that set only one of the two bits (x86: FTZ without DAZ) gets exactly that
// back, and the pool's workers run in it too.
TEST(FloatEnv, APartialModeIsGivenBackExactly) {
#if defined(__x86_64__) || defined(__i386__)
  constexpr unsigned kFtz = 1u << 15, kDaz = 1u << 6;
  const unsigned before = _mm_getcsr();
  _mm_setcsr((before & ~kDaz) | kFtz);
  const unsigned partial = _mm_getcsr() & (kFtz | kDaz);
  EXPECT_FALSE(subnormals_flushed());
  {
    SubnormalScope flush(true);
    EXPECT_TRUE(subnormals_flushed());
    SubnormalScope keep(false);
    EXPECT_EQ(observed_mode(), 0);
  }
  EXPECT_EQ(_mm_getcsr() & (kFtz | kDaz), partial);
  ThreadPool pool(2);
  std::atomic<int> entered{0};
  std::vector<unsigned> seen(2, 0);
  pool.parallel_for(2, 1, [&](int64_t b, int64_t) {
    wait_for_all(entered, 2);
    seen[static_cast<size_t>(b)] = _mm_getcsr() & (kFtz | kDaz);
  });
  for (unsigned s : seen) EXPECT_EQ(s, partial);
  _mm_setcsr(before);
#else
  GTEST_SKIP() << "the partial mode (FTZ without DAZ) is x86's";
#endif
}

TEST(FloatEnv, PoolWorkersTakeTheCallersMode) {
  if (!can_flush_subnormals()) GTEST_SKIP() << "this build cannot change the subnormal mode on this architecture";
  ThreadPool pool(4);
  // Alternate the modes, so each worker has run in the other mode just before.
  for (bool flush : {true, false, true, false}) {
    SubnormalScope mode(flush);
    std::atomic<int> entered{0};
    std::mutex mu;
    std::set<std::thread::id> threads;
    std::vector<int> seen(4, -2);
    pool.parallel_for(4, 1, [&](int64_t b, int64_t e) {
      wait_for_all(entered, 4);
      std::lock_guard<std::mutex> lock(mu);
      threads.insert(std::this_thread::get_id());
      for (int64_t i = b; i < e; ++i) seen[static_cast<size_t>(i)] = observed_mode();
    });
    EXPECT_GT(threads.size(), 1u) << "every chunk ran on one thread: the workers were not tested";
    for (int m : seen) EXPECT_EQ(m, flush ? 1 : 0) << (flush ? "flush" : "keep");
    EXPECT_EQ(subnormals_flushed(), flush) << "the caller's mode changed";
  }
}

TEST(FloatEnv, StreamsTakeTheCallersMode) {
  if (!can_flush_subnormals()) GTEST_SKIP() << "this build cannot change the subnormal mode on this architecture";
  StreamRunner runner(3);
  const std::vector<std::vector<uint32_t>> by_stream = {{0}, {1}, {2}};
  StreamEvents events;
  events.waits.resize(3);
  events.records.resize(3);
  for (bool flush : {true, false, true}) {
    SubnormalScope mode(flush);
    std::vector<int> seen(3, -2);
    runner.run(by_stream, events, [&](uint32_t i) { seen[i] = observed_mode(); });
    for (int m : seen) EXPECT_EQ(m, flush ? 1 : 0) << (flush ? "flush" : "keep");
  }
}

}  // namespace
}  // namespace modelc::rt::test
