// ThreadPool: chunking covers an extent exactly once, respects the grain, propagates
// exceptions and runs nested calls inline.
#include "runtime/device/cpu/thread_pool.h"

#include <atomic>
#include <mutex>
#include <set>
#include <thread>
#include <stdexcept>

#include "tests/runtime/rt_harness.h"

namespace modelc::rt::test {

TEST(ThreadPool, CoversTheExtentExactlyOnce) {
  for (int threads : {1, 2, 3, 5, 8}) {
    ThreadPool pool(threads);
    EXPECT_EQ(pool.size(), threads);
    for (int rep = 0; rep < 20; ++rep) {
      int64_t extent = rnd(0, 5000), grain = rnd(1, 300);
      std::vector<std::atomic<int>> hits(static_cast<size_t>(extent));
      std::mutex mu;
      std::vector<std::pair<int64_t, int64_t>> ranges;
      pool.parallel_for(extent, grain, [&](int64_t b, int64_t e) {
        for (int64_t i = b; i < e; ++i) hits[static_cast<size_t>(i)]++;
        std::lock_guard<std::mutex> lock(mu);
        ranges.emplace_back(b, e);
      });
      for (int64_t i = 0; i < extent; ++i) ASSERT_EQ(hits[static_cast<size_t>(i)].load(), 1) << "item " << i;
      EXPECT_EQ(static_cast<int64_t>(ranges.size()), pool.chunks_for(extent, grain));
      EXPECT_LE(static_cast<int>(ranges.size()), threads);
      for (auto [b, e] : ranges) {
        EXPECT_LT(b, e);
        EXPECT_EQ(b % grain, 0) << "a chunk starts off the grain";
        if (e != extent) {
          EXPECT_EQ((e - b) % grain, 0);
        }
      }
    }
  }
}

TEST(ThreadPool, UsesSeveralThreads) {
  ThreadPool pool(4);
  std::mutex mu;
  std::set<std::thread::id> ids;
  for (int rep = 0; rep < 50 && ids.size() < 2; ++rep)
    pool.parallel_for(4, 1, [&](int64_t, int64_t) {
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
      std::lock_guard<std::mutex> lock(mu);
      ids.insert(std::this_thread::get_id());
    });
  EXPECT_GE(ids.size(), 2u);
}

TEST(ThreadPool, PropagatesTheFirstException) {
  ThreadPool pool(3);
  EXPECT_THROW(pool.parallel_for(100, 1, [](int64_t b, int64_t) {
                 if (b > 0) throw std::runtime_error("chunk failed");
               }),
               std::runtime_error);
  // The pool still works afterwards.
  std::atomic<int64_t> sum{0};
  pool.parallel_for(1000, 7, [&](int64_t b, int64_t e) { sum += e - b; });
  EXPECT_EQ(sum.load(), 1000);
}

TEST(ThreadPool, NestedCallsRunInline) {
  ThreadPool pool(3);
  std::atomic<int64_t> sum{0};
  pool.parallel_for(6, 1, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) pool.parallel_for(10, 1, [&](int64_t x, int64_t y) { sum += y - x; });
  });
  EXPECT_EQ(sum.load(), 60);
}

TEST(ThreadPool, EmptyAndDefault) {
  ThreadPool pool(0);
  EXPECT_GE(pool.size(), 1);
  bool called = false;
  pool.parallel_for(0, 1, [&](int64_t, int64_t) { called = true; });
  EXPECT_FALSE(called);
  EXPECT_EQ(pool.chunks_for(0, 5), 0);
}

}  // namespace modelc::rt::test
