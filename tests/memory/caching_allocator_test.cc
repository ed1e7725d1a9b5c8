// The caching allocator's rules one at a time, on host memory: rounding and segment sizes,
// best fit, splitting and merging, the small/large pools, streams and events, out of
// memory with release-and-retry, statistics and peak reset, memory_summary(), the
// fragmentation case of 8x16 MiB then 4x32 MiB, and every error path.
#include <fmt/format.h>

#include <cstdio>
#include <cstring>
#include <vector>

#include "tests/memory/memory_harness.h"

namespace modelc::rt::test {

namespace {

using CA = CachingAllocator;

TEST(CachingAllocator, RoundingAndSegmentSizes) {
  EXPECT_EQ(CA::round_size(0), 512u);
  EXPECT_EQ(CA::round_size(1), 512u);
  EXPECT_EQ(CA::round_size(512), 512u);
  EXPECT_EQ(CA::round_size(513), 1024u);
  EXPECT_EQ(CA::round_size(MiB + 1), MiB + 512);
  EXPECT_EQ(CA::segment_size(512), 2 * MiB);
  EXPECT_EQ(CA::segment_size(MiB), 2 * MiB);
  EXPECT_EQ(CA::segment_size(MiB + 512), 20 * MiB);
  EXPECT_EQ(CA::segment_size(10 * MiB - 512), 20 * MiB);
  EXPECT_EQ(CA::segment_size(10 * MiB), 10 * MiB);
  EXPECT_EQ(CA::segment_size(10 * MiB + 512), 12 * MiB);
  EXPECT_EQ(CA::segment_size(16 * MiB), 16 * MiB);
}

TEST(CachingAllocator, SmallAllocationsShareASegmentAndAreReused) {
  Harness h;
  void* a = h.alloc.allocate(100);
  void* b = h.alloc.allocate(3000);
  ASSERT_NE(a, nullptr);
  EXPECT_EQ(addr(a) % HostRawAllocator::kAlignment, 0u);
  EXPECT_EQ(addr(b), addr(a) + 512);  // a's block is 512 bytes, b comes right after it
  EXPECT_EQ(h.alloc.allocation_size(b), 3072u);
  MemoryStats s = h.alloc.stats();
  EXPECT_EQ(s.all.reserved_bytes.current, int64_t(2 * MiB));
  EXPECT_EQ(s.small.segments.current, 1);
  EXPECT_EQ(s.large.segments.current, 0);
  EXPECT_EQ(s.all.allocated_bytes.current, 512 + 3072);
  EXPECT_EQ(s.all.requested_bytes.current, 3100);
  h.alloc.free(a);
  EXPECT_EQ(h.alloc.allocate(200), a);  // the freed block, not a new one
  EXPECT_EQ(h.alloc.stats().num_segment_allocs, 1);
  EXPECT_EQ(h.raw.allocations(), 1u);
  h.alloc.check_invariants();
}

TEST(CachingAllocator, BestFitTakesTheSmallestFreeBlockThatFits) {
  Harness h;
  void* a = h.alloc.allocate(4 * KiB);
  void* s1 = h.alloc.allocate(512);
  void* b = h.alloc.allocate(16 * KiB);
  void* s2 = h.alloc.allocate(512);
  void* c = h.alloc.allocate(8 * KiB);
  void* s3 = h.alloc.allocate(512);
  h.alloc.free(a), h.alloc.free(b), h.alloc.free(c);
  EXPECT_EQ(h.alloc.allocate(6 * KiB), c);  // 8 KiB is the best fit, not 16 KiB or the tail
  EXPECT_EQ(h.alloc.allocate(3 * KiB), a);
  void* d = h.alloc.allocate(10 * KiB);     // splits b: 10 KiB + 6 KiB free
  EXPECT_EQ(d, b);
  EXPECT_EQ(h.alloc.allocate(6 * KiB), static_cast<char*>(b) + 10 * KiB);
  h.alloc.check_invariants();
  (void)s1, (void)s2, (void)s3;
}

TEST(CachingAllocator, LargePoolSplitsOnlyWhenMoreThanOneMiBRemains) {
  Harness h;
  void* a = h.alloc.allocate(11 * MiB);  // segment of 12 MiB; 1 MiB left is not split off
  EXPECT_EQ(h.alloc.allocation_size(a), 12 * MiB);
  EXPECT_EQ(h.alloc.stats().all.allocated_bytes.current, int64_t(12 * MiB));
  EXPECT_EQ(h.alloc.stats().all.requested_bytes.current, int64_t(11 * MiB));
  void* b = h.alloc.allocate(5 * MiB);  // segment of 20 MiB, split: 15 MiB free
  EXPECT_EQ(h.alloc.allocation_size(b), 5 * MiB);
  MemoryStats s = h.alloc.stats();
  EXPECT_EQ(s.largest_free_block, int64_t(15 * MiB));
  EXPECT_EQ(s.large.reserved_bytes.current, int64_t(32 * MiB));
  void* c = h.alloc.allocate(14 * MiB + 512);  // from the 15 MiB block; 511.5 KiB left stays with it
  EXPECT_EQ(addr(c), addr(b) + 5 * MiB);
  EXPECT_EQ(h.alloc.allocation_size(c), 15 * MiB);
  EXPECT_EQ(h.alloc.stats().free_blocks, 0);
  h.alloc.check_invariants();
}

TEST(CachingAllocator, FreeMergesWithFreeNeighbours) {
  Harness h;
  void* a = h.alloc.allocate(256 * KiB);
  void* b = h.alloc.allocate(256 * KiB);
  void* c = h.alloc.allocate(256 * KiB);
  h.alloc.free(a);
  h.alloc.free(c);  // merges with the tail
  auto segs = h.alloc.snapshot();
  ASSERT_EQ(segs.size(), 1u);
  ASSERT_EQ(segs[0].blocks.size(), 3u);
  EXPECT_EQ(segs[0].blocks[2].size, 2 * MiB - 512 * KiB);
  h.alloc.free(b);  // merges both ways: one free block covers the segment
  segs = h.alloc.snapshot();
  ASSERT_EQ(segs[0].blocks.size(), 1u);
  EXPECT_EQ(segs[0].blocks[0].size, 2 * MiB);
  EXPECT_EQ(segs[0].blocks[0].state, BlockState::kFree);
  h.alloc.check_invariants();
  h.alloc.empty_cache();
  EXPECT_EQ(h.raw.in_use(), 0u);
  EXPECT_EQ(h.alloc.stats().num_segment_frees, 1);
}

TEST(CachingAllocator, SmallAndLargePoolsAndStreamsDoNotShare) {
  Harness h;
  h.alloc.free(h.alloc.allocate(5 * MiB));  // a free 20 MiB large segment
  void* s = h.alloc.allocate(4 * KiB);       // small: needs its own segment
  MemoryStats st = h.alloc.stats();
  EXPECT_EQ(st.small.segments.current, 1);
  EXPECT_EQ(st.large.segments.current, 1);
  EXPECT_EQ(st.small.allocated_bytes.current, int64_t(4 * KiB));
  EXPECT_EQ(st.large.allocated_bytes.current, 0);
  h.alloc.free(s);
  void* t = h.alloc.allocate(4 * KiB, 1);  // stream 1 does not take stream 0's free blocks
  EXPECT_NE(t, s);
  EXPECT_EQ(h.alloc.stats().small.segments.current, 2);
  h.alloc.free(t);
  EXPECT_EQ(h.alloc.allocate(4 * KiB, 1), t);
  h.alloc.check_invariants();
}

TEST(CachingAllocator, CrossStreamUseDelaysReuseUntilTheEventCompletes) {
  Harness h;
  void* p = h.alloc.allocate(4 * KiB, 1);
  h.alloc.record_stream(p, 2);
  h.alloc.record_stream(p, 2);  // twice on one stream: one event
  h.alloc.record_stream(p, 1);  // its own stream: no event
  h.alloc.free(p);
  EXPECT_EQ(h.events.pending_on(2), 1u);
  EXPECT_EQ(h.events.live_events(), 1u);
  MemoryStats s = h.alloc.stats();
  EXPECT_EQ(s.all.allocated_bytes.current, 0);
  EXPECT_EQ(s.all.active_bytes.current, int64_t(4 * KiB));  // pending counts as active
  EXPECT_EQ(s.all.active_blocks.current, 1);
  h.alloc.check_invariants();
  void* q = h.alloc.allocate(4 * KiB, 1);
  EXPECT_NE(q, p);  // still in use on stream 2
  EXPECT_NE(error_of([&] { h.alloc.free(p); }).find("double free"), std::string::npos);
  h.events.complete_stream(2);
  void* r = h.alloc.allocate(4 * KiB, 1);
  EXPECT_EQ(r, p);
  EXPECT_EQ(h.events.live_events(), 0u);
  EXPECT_EQ(h.alloc.stats().all.active_blocks.current, 2);
  h.alloc.check_invariants();
}

TEST(CachingAllocator, ImmediateEventsFreeAtTheNextAllocation) {
  HostRawAllocator raw;
  ImmediateEventBackend events;
  CachingAllocator alloc("immediate", raw, events);
  void* p = alloc.allocate(1000, 0);
  alloc.record_stream(p, 3);
  alloc.free(p);
  EXPECT_EQ(alloc.allocate(1000, 0), p);
  alloc.check_invariants();
}

TEST(CachingAllocator, OomReleasesCachedSegmentsAndRetries) {
  Harness h(24 * MiB);
  h.alloc.free(h.alloc.allocate(11 * MiB));  // caches a free 12 MiB segment
  EXPECT_EQ(h.raw.in_use(), 12 * MiB);
  void* p = h.alloc.allocate(14 * MiB);      // too big for it; 12 + 14 > 24: release, then retry
  ASSERT_NE(p, nullptr);
  MemoryStats s = h.alloc.stats();
  EXPECT_EQ(s.num_alloc_retries, 1);
  EXPECT_EQ(s.num_ooms, 0);
  EXPECT_EQ(s.num_segment_frees, 1);
  EXPECT_EQ(s.all.reserved_bytes.current, int64_t(14 * MiB));
  EXPECT_EQ(s.all.reserved_bytes.peak, int64_t(14 * MiB));
  EXPECT_EQ(h.raw.in_use(), 14 * MiB);
  h.alloc.check_invariants();
}

TEST(CachingAllocator, OomWaitsForPendingBlocksBeforeGivingUp) {
  Harness h(2 * MiB);
  void* p = h.alloc.allocate(MiB, 1);
  h.alloc.record_stream(p, 2);
  h.alloc.free(p);                       // pending on stream 2
  void* q = h.alloc.allocate(MiB, 3);    // needs a segment: waits for the event, releases, retries
  ASSERT_NE(q, nullptr);
  EXPECT_EQ(h.events.synchronize_calls(), 1u);
  EXPECT_EQ(h.events.live_events(), 0u);
  EXPECT_EQ(h.alloc.stats().num_alloc_retries, 1);
  h.alloc.check_invariants();
}

TEST(CachingAllocator, OomThatCannotBeSatisfiedThrowsWithTheSummary) {
  Harness h(24 * MiB);
  void* p = h.alloc.allocate(12 * MiB);
  std::string msg = error_of([&] { h.alloc.allocate(14 * MiB); });  // 12 + 14 > 24
  EXPECT_NE(msg.find("out of memory allocating 14680064 bytes on stream 0"), std::string::npos) << msg;
  EXPECT_NE(msg.find("the memory limit of 24.00 MiB (25165824 bytes: SessionOptions::memory_limit, modelrun "
                     "--memory-limit) leaves 12.00 MiB after the 12.00 MiB already reserved, and the request "
                     "needs 14.00 MiB (14680064 bytes)"),
            std::string::npos)
      << msg;
  EXPECT_NE(msg.find("memory summary"), std::string::npos) << msg;
  EXPECT_NE(msg.find("OOMs: 1"), std::string::npos) << msg;
  EXPECT_NE(msg.find("Reserved memory"), std::string::npos) << msg;
  MemoryStats s = h.alloc.stats();
  EXPECT_EQ(s.num_ooms, 1);
  EXPECT_EQ(s.num_allocs, 1);
  EXPECT_EQ(s.all.allocated_bytes.current, int64_t(12 * MiB));
  h.alloc.check_invariants();
  std::memset(p, 1, 12 * MiB);  // p is still good
  EXPECT_NE(h.alloc.allocate(10 * MiB), nullptr);  // 12 + 10 fits
  msg = error_of([&] { h.alloc.allocate(SIZE_MAX); });
  EXPECT_NE(msg.find("larger than the allocator's limit"), std::string::npos) << msg;
  EXPECT_EQ(h.alloc.stats().num_ooms, 2);
  h.alloc.check_invariants();
}

// Under a limit a new segment asks for no more than the limit leaves (but never less than
// the request): a 1 MiB + 512 request, whose segment would be 20 MiB, fits under 3 MiB, and
// small requests take what is left of a 2 MiB small segment.
TEST(CachingAllocator, SegmentsNeverExceedWhatTheLimitLeaves) {
  Harness h(3 * MiB);
  void* big = h.alloc.allocate(MiB + 512);
  ASSERT_NE(big, nullptr);
  EXPECT_EQ(h.raw.in_use(), MiB + 512);  // just the block: no unsplittable remainder
  EXPECT_EQ(h.alloc.allocation_size(big), MiB + 512);
  void* small = h.alloc.allocate(100 * 1024);  // a 2 MiB small segment would not fit
  ASSERT_NE(small, nullptr);
  EXPECT_EQ(h.raw.in_use(), 3 * MiB);  // the small segment is all the limit left
  void* more = h.alloc.allocate(200 * 1024);  // from the rest of that segment
  EXPECT_NE(more, nullptr);
  EXPECT_EQ(h.alloc.stats().num_segment_allocs, 2);
  h.alloc.check_invariants();
  h.alloc.free(small);
  h.alloc.free(more);
  h.alloc.free(big);
  // Once everything is free and cached, a request the limit holds is met by releasing the
  // cached segments and sizing the new one to what is then left.
  void* whole = h.alloc.allocate(2 * MiB + 512 * 1024);
  EXPECT_NE(whole, nullptr);
  EXPECT_EQ(h.raw.in_use(), 2 * MiB + 512 * 1024);
  h.alloc.check_invariants();
  // Without a limit the sizes are the usual ones.
  Harness free_h;
  free_h.alloc.allocate(MiB + 512);
  EXPECT_EQ(free_h.raw.in_use(), 20 * MiB);
}

TEST(CachingAllocator, FragmentationEightBy16ThenFourBy32MiB) {
  auto run = [](Harness& h, const char* label) {
    std::vector<void*> ps;
    for (int i = 0; i < 8; ++i) ps.push_back(h.alloc.allocate(16 * MiB));
    for (void* p : ps) h.alloc.free(p);
    ps.clear();
    for (int i = 0; i < 4; ++i) ps.push_back(h.alloc.allocate(32 * MiB));
    MemoryStats s = h.alloc.stats();
    std::printf("fragmentation (%s): 8x16 MiB freed, then 4x32 MiB: reserved %.0f MiB, live %.0f MiB, "
                "largest free block %.0f MiB, segments %lld, retries %lld\n",
                label, double(s.all.reserved_bytes.current) / MiB, double(s.all.allocated_bytes.current) / MiB,
                double(s.largest_free_block) / MiB, (long long)s.all.segments.current, (long long)s.num_alloc_retries);
    h.alloc.check_invariants();
    return s;
  };
  {  // Unlimited: the eight cached 16 MiB segments never merge, so 32 MiB needs new segments.
    Harness h;
    MemoryStats s = run(h, "unlimited");
    EXPECT_EQ(s.all.allocated_bytes.current, int64_t(128 * MiB));
    EXPECT_EQ(s.all.reserved_bytes.current, int64_t(256 * MiB));
    EXPECT_EQ(s.all.reserved_bytes.peak, int64_t(256 * MiB));
    EXPECT_EQ(s.largest_free_block, int64_t(16 * MiB));
    EXPECT_EQ(s.free_bytes, int64_t(128 * MiB));
    EXPECT_EQ(s.unallocated_reserved_bytes, int64_t(128 * MiB));
    EXPECT_EQ(s.all.segments.current, 12);
    h.alloc.empty_cache();
    s = h.alloc.stats();
    std::printf("fragmentation (unlimited) after empty_cache(): reserved %.0f MiB, live %.0f MiB\n",
                double(s.all.reserved_bytes.current) / MiB, double(s.all.allocated_bytes.current) / MiB);
    EXPECT_EQ(s.all.reserved_bytes.current, int64_t(128 * MiB));
    EXPECT_EQ(s.num_segment_frees, 8);
    EXPECT_EQ(h.raw.in_use(), 128 * MiB);
  }
  {  // Limited to 160 MiB: the first 32 MiB request releases the cache and retries.
    Harness h(160 * MiB);
    MemoryStats s = run(h, "limit 160 MiB");
    EXPECT_EQ(s.all.allocated_bytes.current, int64_t(128 * MiB));
    EXPECT_EQ(s.all.reserved_bytes.current, int64_t(128 * MiB));
    EXPECT_EQ(s.num_alloc_retries, 1);
    EXPECT_EQ(s.num_ooms, 0);
    EXPECT_EQ(s.num_segment_frees, 8);
  }
}

TEST(CachingAllocator, PeakResetMakesPeaksCurrent) {
  Harness h;
  void* a = h.alloc.allocate(MiB);
  void* b = h.alloc.allocate(MiB);
  h.alloc.free(a);
  MemoryStats s = h.alloc.stats();
  EXPECT_EQ(s.all.allocated_bytes.peak, int64_t(2 * MiB));
  EXPECT_EQ(s.all.allocated_bytes.current, int64_t(MiB));
  EXPECT_EQ(s.all.allocations.peak, 2);
  EXPECT_EQ(s.all.allocated_bytes.allocated, int64_t(2 * MiB));
  EXPECT_EQ(s.all.allocated_bytes.freed, int64_t(MiB));
  h.alloc.reset_peak();
  s = h.alloc.stats();
  EXPECT_EQ(s.all.allocated_bytes.peak, int64_t(MiB));
  EXPECT_EQ(s.small.allocated_bytes.peak, int64_t(MiB));
  EXPECT_EQ(s.all.allocations.peak, 1);
  EXPECT_EQ(s.all.reserved_bytes.peak, int64_t(2 * MiB));  // both 1 MiB blocks came from one 2 MiB segment
  h.alloc.allocate(512);
  EXPECT_EQ(h.alloc.stats().all.allocated_bytes.peak, int64_t(MiB + 512));
  EXPECT_EQ(h.alloc.stats().all.allocated_bytes.allocated, int64_t(2 * MiB + 512));  // totals are not reset
  (void)b;
}

TEST(CachingAllocator, MemorySummaryIsATableOfTheStats) {
  Harness h;
  void* a = h.alloc.allocate(16 * MiB);
  h.alloc.allocate(1000);
  h.alloc.free(a);
  std::string s = h.alloc.memory_summary();
  std::printf("%s", s.c_str());
  for (const char* want :
       {"Caching allocator 'test' over raw allocator 'host-test': memory summary",
        "allocs: 2  frees: 1  segment allocs: 2  segment frees: 0", "alloc retries: 0  OOMs: 0  pending events: 0",
        "Metric", "Current", "Peak", "Total alloc", "Total freed", "Allocated memory", "Requested memory",
        "Active memory", "Reserved memory", "Allocations", "Active blocks", "Segments", "from large pool",
        "from small pool", "Reserved - allocated: 18.00 MiB",
        "Free blocks: 2 holding 18.00 MiB, the largest 16.00 MiB"})
    EXPECT_NE(s.find(want), std::string::npos) << want;
  // The allocated-memory row: 1024 B now, 16 MiB + 1 KiB at peak.
  EXPECT_NE(s.find("| Allocated memory          |     1.00 KiB |    16.00 MiB |    16.00 MiB |    16.00 MiB |"),
            std::string::npos)
      << s;
  // Every line is a table row of the same width.
  size_t width = s.find('\n'), start = 0, lines = 0;
  for (size_t end; (end = s.find('\n', start)) != std::string::npos; start = end + 1, ++lines) {
    EXPECT_EQ(end - start, width) << s.substr(start, end - start);
    EXPECT_EQ(s[start], '|');
    EXPECT_EQ(s[end - 1], '|');
  }
  EXPECT_EQ(start, s.size());
  EXPECT_GT(lines, 30u);
}

TEST(CachingAllocator, MemorySummaryWrapsLongNames) {
  HostRawAllocator raw(0, std::string(70, 'r'));
  FakeEventBackend events;
  CachingAllocator alloc(std::string(60, 'a'), raw, events);
  std::string s = alloc.memory_summary();
  size_t width = s.find('\n');
  for (size_t start = 0, end; (end = s.find('\n', start)) != std::string::npos; start = end + 1)
    EXPECT_EQ(end - start, width) << s.substr(start, end - start);
  EXPECT_NE(s.find(std::string(60, 'a')), std::string::npos);
}

TEST(CachingAllocator, ErrorsAreClearAndLeaveTheStateAlone) {
  Harness h;
  void* p = h.alloc.allocate(4 * KiB);
  void* q = h.alloc.allocate(4 * KiB);
  h.alloc.free(p);
  int local = 0;
  std::string e1 = error_of([&] { h.alloc.free(p); });
  EXPECT_NE(e1.find("caching allocator 'test': free of"), std::string::npos) << e1;
  EXPECT_NE(e1.find("already freed (double free?)"), std::string::npos) << e1;
  std::string e2 = error_of([&] { h.alloc.free(&local); });
  EXPECT_NE(e2.find("which this allocator did not allocate"), std::string::npos) << e2;
  std::string e3 = error_of([&] { h.alloc.free(static_cast<char*>(q) + 512); });
  EXPECT_NE(e3.find("points 512 bytes into a live block of 4096 bytes"), std::string::npos) << e3;
  std::string e4 = error_of([&] { h.alloc.record_stream(p, 2); });
  EXPECT_NE(e4.find("record_stream of"), std::string::npos) << e4;
  std::string e5 = error_of([&] { h.alloc.allocation_size(&local); });
  EXPECT_NE(e5.find("allocation_size of"), std::string::npos) << e5;
  h.alloc.free(nullptr);  // like std::free: nothing
  MemoryStats s = h.alloc.stats();
  EXPECT_EQ(s.num_frees, 1);
  EXPECT_EQ(s.all.allocations.current, 1);
  h.alloc.check_invariants();
  h.alloc.free(q);
  EXPECT_NE(error_of([&] { h.raw.free(&local); }).find("raw allocator 'host-test': free of"), std::string::npos);
  EXPECT_NE(error_of([&] { h.events.query(12345); }).find("unknown event 12345"), std::string::npos);
}

TEST(CachingAllocator, DestructorHandsEverythingBack) {
  HostRawAllocator raw;
  FakeEventBackend events;
  {
    CachingAllocator alloc("d", raw, events);
    alloc.allocate(100);
    void* p = alloc.allocate(30 * MiB, 1);
    alloc.record_stream(p, 2);
    alloc.free(p);
    EXPECT_EQ(events.live_events(), 1u);
    EXPECT_EQ(raw.live_regions(), 2u);
  }
  EXPECT_EQ(raw.in_use(), 0u);
  EXPECT_EQ(raw.live_regions(), 0u);
  EXPECT_EQ(events.live_events(), 0u);
}

}  // namespace

}  // namespace modelc::rt::test
