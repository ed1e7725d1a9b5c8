// A caching allocator in the manner of PyTorch's CUDACachingAllocator. It takes segments
// from a RawAllocator (runtime/device/memory/raw_allocator.h), cuts them into blocks, and keeps
// freed blocks for reuse instead of handing them back. The same class serves device memory
// (over cuMemAlloc) and pinned host memory (over cuMemHostAlloc): one instance each. CI
// runs it over HostRawAllocator.
//
// Sizes. A request is rounded up to a multiple of 512 bytes (at least 512; a request of 0
// bytes gets its own 512-byte block). Rounded sizes up to 1 MiB come from the small pool,
// larger ones from the large pool. A new segment is 2 MiB for the small pool; for the large
// pool it is 20 MiB for requests under 10 MiB and the request rounded up to 2 MiB otherwise.
//
// Pools and search. Free blocks sit in two ordered sets (small, large) keyed by (stream,
// size, address); a request takes the smallest free block of its pool and stream that is
// large enough (best fit, lowest address on ties). Blocks of a segment form an address-
// ordered list that tiles the segment exactly.
//
// Splitting and merging. A block is split when the remainder is at least 512 bytes (small
// pool) or more than 1 MiB (large pool); otherwise the whole block is handed out (the slack
// counts as allocated). A freed block merges with free neighbours of its segment. Segments
// never merge with each other.
//
// Streams. A block belongs to the stream it was allocated on and is only reused for that
// stream. record_stream(p, s) notes that p is also used on stream s; when p is freed, an
// event is recorded on each such stream and the block stays "pending" (active, not
// allocated, not reusable) until every event has completed. Events are polled at each
// allocate(); empty_cache() and the out-of-memory path wait for them.
//
// Out of memory. When the raw allocator returns null, the allocator waits for every
// pending event (EventBackend::synchronize), returns the freed blocks, hands every fully
// free segment back to the raw allocator, and tries once more. If that fails too it counts
// an OOM and throws a RuntimeError naming the request and carrying memory_summary().
//
// Errors. free() of a pointer that is not the start of a live block (double free, a
// pointer inside a block, a foreign pointer) and record_stream() of such a pointer throw a
// RuntimeError that says which case it is; the allocator's state is unchanged.
//
// Thread safety: one mutex guards everything; the EventBackend and the RawAllocator are
// called with it held. The RawAllocator and EventBackend must outlive the allocator. The
// destructor hands every segment back, including those with live blocks. free(nullptr)
// does nothing.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <unordered_map>
#include <vector>

#include "runtime/base/error.h"
#include "runtime/device/memory/raw_allocator.h"

namespace modelc::rt {

// A quantity's current value, its peak since construction or reset_peak(), and the totals
// of its increases and decreases.
struct MemoryStat {
  int64_t current = 0, peak = 0, allocated = 0, freed = 0;
  void add(int64_t delta);
};

struct PoolMemoryStats {
  MemoryStat allocated_bytes;  // in blocks handed out (rounded sizes)
  MemoryStat requested_bytes;  // as asked for
  MemoryStat active_bytes;     // handed out, or freed but waiting for stream events
  MemoryStat reserved_bytes;   // in segments taken from the raw allocator
  MemoryStat allocations;      // live blocks handed out
  MemoryStat active_blocks;    // live + pending blocks
  MemoryStat segments;
};

struct MemoryStats {
  PoolMemoryStats all, small, large;
  int64_t num_allocs = 0, num_frees = 0;  // successful allocate() and free() calls
  int64_t num_segment_allocs = 0, num_segment_frees = 0;
  int64_t num_alloc_retries = 0;  // raw OOMs answered by release-and-retry
  int64_t num_ooms = 0;           // allocate() calls that threw
  // Fragmentation: reserved - allocated (free and pending bytes, rounding slack), the bytes
  // in free blocks, and the largest free block of any pool and stream.
  int64_t unallocated_reserved_bytes = 0, free_bytes = 0, largest_free_block = 0;
  int64_t free_blocks = 0;
};

enum class BlockState : uint8_t { kAllocated, kPending, kFree };

// What check_invariants() and tests look at: every segment and its blocks in address order.
struct SegmentSnapshot {
  struct Block {
    uintptr_t address;
    size_t size, requested;
    BlockState state;
  };
  uintptr_t address;
  size_t size;
  StreamId stream;
  bool small;
  std::vector<Block> blocks;
};

class CachingAllocator {
 public:
  static constexpr size_t kMinBlockSize = 512;
  static constexpr size_t kSmallSize = size_t{1} << 20;     // largest small-pool request
  static constexpr size_t kSmallBuffer = size_t{2} << 20;   // small-pool segment
  static constexpr size_t kLargeBuffer = size_t{20} << 20;  // large-pool segment for < kMinLargeAlloc
  static constexpr size_t kMinLargeAlloc = size_t{10} << 20;
  static constexpr size_t kRoundLarge = size_t{2} << 20;
  // Requests above this are refused as out of memory before any rounding can overflow.
  static constexpr size_t kMaxRequest = size_t{1} << 62;

  CachingAllocator(std::string name, RawAllocator& raw, EventBackend& events);
  ~CachingAllocator();
  CachingAllocator(const CachingAllocator&) = delete;
  CachingAllocator& operator=(const CachingAllocator&) = delete;

  // A block of at least `bytes` bytes for use on `stream`; throws RuntimeError when out of
  // memory after release-and-retry.
  void* allocate(size_t bytes, StreamId stream = kDefaultStream);
  void free(void* p);
  // p, a live allocation, is also used on `stream`.
  void record_stream(void* p, StreamId stream);
  // Waits for the events of pending blocks (as PyTorch's empty_cache does), returns those
  // blocks, then hands every fully free segment back to the raw allocator.
  void empty_cache();
  // The rounded size of a live allocation.
  size_t allocation_size(const void* p) const;

  MemoryStats stats() const;
  // Peaks become the current values.
  void reset_peak();
  std::string memory_summary() const;
  std::vector<SegmentSnapshot> snapshot() const;
  // Throws RuntimeError naming the first broken invariant: segments disjoint, blocks tile
  // their segment, no two adjacent free blocks, pools hold exactly the free blocks, the
  // live map exactly the allocated ones, pending blocks have events, stats match a recount.
  void check_invariants() const;

  const std::string& name() const { return name_; }
  static size_t round_size(size_t bytes);
  static size_t segment_size(size_t rounded);
  // The bytes a request of `bytes` holds (what allocated_bytes counts) when it opens a new
  // segment: rounded, or the whole segment when the rest is too small to split off. The
  // memory plan's prediction adds this for each arena (compiler/lowered/memory_report.h).
  static size_t block_size(size_t bytes);
  static bool is_small(size_t rounded) { return rounded <= kSmallSize; }

 private:
  struct Segment;
  struct Block {
    uintptr_t address = 0;
    size_t size = 0, requested = 0;
    StreamId stream = kDefaultStream;
    bool small = false;
    BlockState state = BlockState::kFree;
    Block *prev = nullptr, *next = nullptr;
    Segment* segment = nullptr;
    std::set<StreamId> stream_uses;  // other streams p was recorded on
    int pending_events = 0;
  };
  struct Segment {
    uintptr_t address = 0;
    size_t size = 0;
    StreamId stream = kDefaultStream;
    bool small = false;
    Block* head = nullptr;
  };
  struct BlockLess {
    bool operator()(const Block* a, const Block* b) const;
  };
  using Pool = std::set<Block*, BlockLess>;

  Pool& pool(bool small) { return small ? small_pool_ : large_pool_; }
  void update(bool small, MemoryStat PoolMemoryStats::* stat, int64_t delta);
  Block* find_free(bool small, StreamId stream, size_t rounded);
  Block* new_segment(bool small, StreamId stream, size_t rounded);
  void return_block(Block* b);
  void process_events(bool wait);
  void release_cached();
  void release_segment(Segment* s);
  [[noreturn]] void fail(void* p, const char* op) const;
  std::string summary_locked() const;
  std::vector<SegmentSnapshot> snapshot_locked() const;
  MemoryStats stats_locked() const;

  std::string name_;
  RawAllocator& raw_;
  EventBackend& events_;
  mutable std::mutex mu_;
  std::map<uintptr_t, std::unique_ptr<Segment>> segments_;  // by address
  Pool small_pool_, large_pool_;
  std::unordered_map<uintptr_t, Block*> live_;  // allocated blocks by address
  std::vector<std::pair<EventId, Block*>> pending_;  // events of pending blocks, oldest first
  MemoryStats stats_;
};

}  // namespace modelc::rt
