// Randomized sequences of allocate / free / record_stream / event completion / empty_cache /
// reset_peak / bad frees, with fresh seeds each run (MODELC_MEMORY_SEED=N replays one), and
// after every step: the allocator's own check_invariants(), plus checks made here from the
// public snapshot and the test's own records (live blocks disjoint and holding their data,
// segments tiled, free neighbours merged, stats equal to the recount, reserved equal to
// what the raw allocator holds, an OOM only when the memory really is not there). Then the
// same from several threads at once.
#include <fmt/format.h>

#include <algorithm>
#include <cstdlib>
#include <map>
#include <random>
#include <thread>
#include <vector>

#include "tests/memory/memory_harness.h"

namespace modelc::rt::test {

namespace {

struct Live {
  void* p;
  size_t bytes;
  StreamId stream;
  uint8_t tag;
};

// Up to 16 bytes spread over the block, first and last included; the value written at an
// offset depends only on the tag and the offset (small blocks probe some offsets twice).
template <class F>
void each_probe(const Live& l, F f) {
  if (l.bytes == 0) return;
  for (size_t k = 0; k < 16; ++k) {
    size_t off = k * (l.bytes - 1) / 15;
    f(static_cast<uint8_t*>(l.p) + off, uint8_t(l.tag + off * 7));
  }
}
void fill(const Live& l) {
  each_probe(l, [](uint8_t* at, uint8_t v) { *at = v; });
}
bool intact(const Live& l) {
  bool ok = true;
  each_probe(l, [&](uint8_t* at, uint8_t v) { ok = ok && *at == v; });
  return ok;
}

uint64_t fresh_seed() {
  if (const char* s = std::getenv("MODELC_MEMORY_SEED")) return std::strtoull(s, nullptr, 10);
  std::random_device rd;
  return (uint64_t(rd()) << 32) ^ rd();
}

size_t random_size(std::mt19937_64& rng) {
  auto in = [&](size_t lo, size_t hi) { return lo + rng() % (hi - lo + 1); };
  size_t r = rng() % 20;
  if (r == 0) return in(0, 600);
  if (r <= 11) return in(1, 64 * KiB);
  if (r <= 16) return in(64 * KiB, MiB + 64 * KiB);  // across the small/large boundary
  if (r <= 18) return in(MiB, 10 * MiB + MiB);       // 20 MiB segments and the 10 MiB edge
  return in(10 * MiB, 24 * MiB);
}

// Checks from the outside: the snapshot against the test's records and the stats.
void verify(Harness& h, const std::vector<Live>& live, size_t limit) {
  ASSERT_NO_THROW(h.alloc.check_invariants());
  std::vector<SegmentSnapshot> segs = h.alloc.snapshot();
  std::map<uintptr_t, SegmentSnapshot::Block> allocated;
  uintptr_t prev_end = 0;
  int64_t reserved = 0;
  for (const SegmentSnapshot& s : segs) {
    ASSERT_GE(s.address, prev_end) << "segments overlap";
    prev_end = s.address + s.size;
    reserved += int64_t(s.size);
    uintptr_t at = s.address;
    for (size_t i = 0; i < s.blocks.size(); ++i) {
      const auto& b = s.blocks[i];
      ASSERT_EQ(b.address, at) << "blocks do not tile their segment";
      at += b.size;
      if (i > 0) {
        ASSERT_FALSE(b.state == BlockState::kFree && s.blocks[i - 1].state == BlockState::kFree) << "unmerged";
      }
      if (b.state == BlockState::kAllocated) allocated.emplace(b.address, b);
    }
    ASSERT_EQ(at, s.address + s.size) << "blocks do not cover their segment";
  }
  ASSERT_EQ(allocated.size(), live.size());
  int64_t requested = 0;
  std::vector<std::pair<uintptr_t, size_t>> spans;
  for (const Live& l : live) {
    auto it = allocated.find(addr(l.p));
    ASSERT_NE(it, allocated.end()) << "a live pointer is not an allocated block";
    ASSERT_EQ(it->second.requested, l.bytes);
    ASSERT_GE(it->second.size, std::max<size_t>(l.bytes, 1));
    ASSERT_TRUE(intact(l)) << "the data of a live block changed: blocks overlap";
    requested += int64_t(l.bytes);
    spans.emplace_back(addr(l.p), it->second.size);
  }
  std::sort(spans.begin(), spans.end());
  for (size_t i = 1; i < spans.size(); ++i) ASSERT_LE(spans[i - 1].first + spans[i - 1].second, spans[i].first);
  MemoryStats st = h.alloc.stats();
  ASSERT_EQ(st.all.allocations.current, int64_t(live.size()));
  ASSERT_EQ(st.all.requested_bytes.current, requested);
  ASSERT_EQ(st.all.reserved_bytes.current, reserved);
  ASSERT_EQ(size_t(reserved), h.raw.in_use());
  ASSERT_LE(st.all.allocated_bytes.peak, st.all.reserved_bytes.peak);
  if (limit != 0) {
    ASSERT_LE(size_t(reserved), limit);
  }
}

// What the sequences exercised, summed over seeds, printed so that a run that stopped
// reaching a path shows.
struct Coverage {
  int64_t allocs = 0, ooms = 0, retries = 0, segment_frees = 0, pending_frees = 0, double_frees = 0;
};

void run_sequence(uint64_t seed, int steps, Coverage& cov) {
  std::mt19937_64 rng(seed);
  const size_t limits[] = {0, 48 * MiB, 128 * MiB};
  size_t limit = limits[rng() % 3];
  SCOPED_TRACE(fmt::format("limit {} bytes", limit));
  Harness h(limit);
  std::vector<Live> live;
  std::vector<void*> freed;
  int64_t ooms = 0;
  for (int step = 0; step < steps; ++step) {
    SCOPED_TRACE(fmt::format("step {}", step));
    unsigned op = rng() % 100;
    bool must_free = live.size() > 48;
    if (op < 42 && !must_free) {
      size_t bytes = random_size(rng);
      StreamId stream = rng() % 3;
      void* p = nullptr;
      try {
        p = h.alloc.allocate(bytes, stream);
      } catch (const RuntimeError& e) {
        std::string msg = e.what();
        ASSERT_NE(limit, 0u) << msg;
        ASSERT_NE(msg.find("out of memory"), std::string::npos) << msg;
        ASSERT_EQ(h.alloc.stats().num_ooms, ++ooms);
        // Everything cached was released first, so the segment really did not fit.
        size_t need = CachingAllocator::segment_size(CachingAllocator::round_size(bytes));
        ASSERT_GT(h.raw.in_use() + need, limit) << msg;
        ASSERT_EQ(h.events.live_events(), 0u);
      }
      if (p != nullptr) {
        ASSERT_EQ(addr(p) % HostRawAllocator::kAlignment, 0u);
        live.push_back({p, bytes, stream, uint8_t(rng())});
        fill(live.back());
        std::erase(freed, p);
      }
    } else if (op < 80 && !live.empty()) {
      size_t i = rng() % live.size();
      ASSERT_TRUE(intact(live[i]));
      int64_t active_before = h.alloc.stats().all.active_blocks.current;
      h.alloc.free(live[i].p);
      cov.pending_frees += h.alloc.stats().all.active_blocks.current == active_before;  // kept pending
      freed.push_back(live[i].p);
      live.erase(live.begin() + std::ptrdiff_t(i));
    } else if (op < 88 && !live.empty()) {
      h.alloc.record_stream(live[rng() % live.size()].p, rng() % 3);
    } else if (op < 95) {
      if (rng() % 4 == 0) h.events.complete_all();
      else h.events.complete_stream(rng() % 3);
    } else if (op < 97) {
      h.alloc.empty_cache();
      ASSERT_EQ(h.events.live_events(), 0u);
      for (const SegmentSnapshot& s : h.alloc.snapshot())
        ASSERT_FALSE(s.blocks.size() == 1 && s.blocks[0].state == BlockState::kFree) << "empty_cache kept a free segment";
    } else if (op < 98) {
      h.alloc.reset_peak();
      MemoryStats st = h.alloc.stats();
      ASSERT_EQ(st.all.reserved_bytes.peak, st.all.reserved_bytes.current);
      ASSERT_EQ(st.large.active_bytes.peak, st.large.active_bytes.current);
    } else if (!freed.empty()) {  // a double free: an error, and nothing changes
      MemoryStats before = h.alloc.stats();
      void* p = freed[rng() % freed.size()];
      ASSERT_THROW(h.alloc.free(p), RuntimeError);
      ++cov.double_frees;
      ASSERT_EQ(h.alloc.stats().num_frees, before.num_frees);
      ASSERT_EQ(h.alloc.stats().all.active_bytes.current, before.all.active_bytes.current);
    }
    verify(h, live, limit);
    if (testing::Test::HasFatalFailure()) return;
  }
  MemoryStats st = h.alloc.stats();
  cov.allocs += st.num_allocs, cov.ooms += st.num_ooms, cov.retries += st.num_alloc_retries;
  cov.segment_frees += st.num_segment_frees;
  for (const Live& l : live) h.alloc.free(l.p);
  live.clear();
  h.alloc.empty_cache();
  verify(h, live, limit);
  ASSERT_EQ(h.raw.in_use(), 0u);
  ASSERT_EQ(h.alloc.stats().all.active_bytes.current, 0);
}

TEST(CachingAllocatorRandom, InvariantsHoldAfterEveryStep) {
  uint64_t first = fresh_seed();
  int seeds = std::getenv("MODELC_MEMORY_SEED") != nullptr ? 1 : 12;
  Coverage cov;
  for (int i = 0; i < seeds; ++i) {
    uint64_t seed = first + uint64_t(i);
    SCOPED_TRACE(fmt::format("seed {} (rerun with MODELC_MEMORY_SEED={})", seed, seed));
    run_sequence(seed, 2500, cov);
    if (HasFatalFailure()) return;
  }
  fmt::print("randomized: seeds {}..{}: {} allocations, {} OOMs, {} release-and-retries, {} segment frees, {} frees "
             "left pending on events, {} double frees caught\n",
             first, first + uint64_t(seeds) - 1, cov.allocs, cov.ooms, cov.retries, cov.segment_frees,
             cov.pending_frees, cov.double_frees);
}

TEST(CachingAllocatorRandom, ThreadsShareOneAllocator) {
  uint64_t seed = fresh_seed();
  SCOPED_TRACE(fmt::format("seed {}", seed));
  Harness h;
  constexpr int kThreads = 4;
  std::vector<int> broken(kThreads, 0);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t)
    threads.emplace_back([&, t] {
      std::mt19937_64 rng(seed + uint64_t(t));
      std::vector<Live> mine;
      for (int step = 0; step < 3000; ++step) {
        unsigned op = rng() % 10;
        if (op < 5 && mine.size() < 32) {
          size_t bytes = rng() % 4 == 0 ? rng() % (3 * MiB) : rng() % (16 * KiB);
          mine.push_back({h.alloc.allocate(bytes, StreamId(t)), bytes, StreamId(t), uint8_t(rng())});
          fill(mine.back());
        } else if (op < 9 && !mine.empty()) {
          size_t i = rng() % mine.size();
          broken[size_t(t)] += !intact(mine[i]);
          if (rng() % 3 == 0) h.alloc.record_stream(mine[i].p, rng() % kThreads);
          h.alloc.free(mine[i].p);
          mine.erase(mine.begin() + std::ptrdiff_t(i));
        } else {
          h.events.complete_stream(rng() % kThreads);
        }
      }
      for (const Live& l : mine) broken[size_t(t)] += !intact(l), h.alloc.free(l.p);
    });
  for (auto& th : threads) th.join();
  for (int t = 0; t < kThreads; ++t) EXPECT_EQ(broken[size_t(t)], 0) << "thread " << t;
  h.alloc.check_invariants();
  MemoryStats st = h.alloc.stats();
  EXPECT_EQ(st.all.allocations.current, 0);
  EXPECT_EQ(st.num_allocs, st.num_frees);
  h.alloc.empty_cache();
  EXPECT_EQ(h.raw.in_use(), 0u);
  EXPECT_EQ(h.events.live_events(), 0u);
  h.alloc.check_invariants();
}

}  // namespace

}  // namespace modelc::rt::test
