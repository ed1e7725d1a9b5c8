// The caching allocator: see caching_allocator.h for the algorithm. Blocks are heap nodes
// linked in address order within their segment; free ones also sit in a pool set, live ones
// in live_, pending ones in pending_ (once per outstanding event).
#include "runtime/device/memory/caching_allocator.h"

#include "runtime/base/bytes.h"

#include <fmt/format.h>

#include <algorithm>
#include <utility>

namespace modelc::rt {

namespace {

void* as_ptr(uintptr_t a) { return reinterpret_cast<void*>(a); }
int64_t i64(size_t n) { return static_cast<int64_t>(n); }

}  // namespace

void MemoryStat::add(int64_t delta) {
  current += delta;
  if (delta > 0) allocated += delta;
  else freed -= delta;
  peak = std::max(peak, current);
}

bool CachingAllocator::BlockLess::operator()(const Block* a, const Block* b) const {
  if (a->stream != b->stream) return a->stream < b->stream;
  if (a->size != b->size) return a->size < b->size;
  return a->address < b->address;
}

size_t CachingAllocator::round_size(size_t bytes) {
  if (bytes < kMinBlockSize) return kMinBlockSize;
  return (bytes + kMinBlockSize - 1) / kMinBlockSize * kMinBlockSize;
}

size_t CachingAllocator::segment_size(size_t rounded) {
  if (rounded <= kSmallSize) return kSmallBuffer;
  if (rounded < kMinLargeAlloc) return kLargeBuffer;
  return (rounded + kRoundLarge - 1) / kRoundLarge * kRoundLarge;
}

size_t CachingAllocator::block_size(size_t bytes) {
  const size_t rounded = round_size(bytes);
  const size_t remaining = segment_size(rounded) - rounded;
  return is_small(rounded) || remaining > kSmallSize ? rounded : rounded + remaining;
}

CachingAllocator::CachingAllocator(std::string name, RawAllocator& raw, EventBackend& events)
    : name_(std::move(name)), raw_(raw), events_(events) {}

CachingAllocator::~CachingAllocator() {
  std::lock_guard lock(mu_);
  for (auto& [e, b] : pending_) {
    try {
      events_.destroy(e);
    } catch (...) {  // a destructor cannot report it; the memory is handed back regardless
    }
  }
  for (auto& [address, seg] : segments_) {
    for (Block* b = seg->head; b != nullptr;) {
      Block* next = b->next;
      delete b;
      b = next;
    }
    try {
      raw_.free(as_ptr(address));
    } catch (...) {
    }
  }
}

void CachingAllocator::update(bool small, MemoryStat PoolMemoryStats::* stat, int64_t delta) {
  // Through a reference: GCC 12 applies .* to a copy of a parenthesized ?: expression.
  PoolMemoryStats& pool_stats = small ? stats_.small : stats_.large;
  (stats_.all.*stat).add(delta);
  (pool_stats.*stat).add(delta);
}

CachingAllocator::Block* CachingAllocator::find_free(bool small, StreamId stream, size_t rounded) {
  Block key;
  key.stream = stream, key.size = rounded, key.address = 0;
  Pool& p = pool(small);
  auto it = p.lower_bound(&key);
  if (it == p.end() || (*it)->stream != stream) return nullptr;
  Block* b = *it;
  p.erase(it);
  return b;
}

CachingAllocator::Block* CachingAllocator::new_segment(bool small, StreamId stream, size_t rounded) {
  // Under a limit, a segment never asks for more than the limit leaves (a 20 MiB segment
  // for a 1 MiB request would fail under --memory-limit 15MiB), nor less than the request.
  auto fitted = [&] {
    size_t size = segment_size(rounded);
    // (A large block takes a remainder too small to split off, so it gets just its size.)
    if (const size_t left = raw_.available(); size > left && rounded <= left)
      size = is_small(rounded) ? std::max(rounded, left / kMinBlockSize * kMinBlockSize) : rounded;
    return size;
  };
  size_t size = fitted();
  void* p = raw_.allocate(size);
  if (p == nullptr) {
    ++stats_.num_alloc_retries;
    release_cached();
    size = fitted();
    p = raw_.allocate(size);
    if (p == nullptr) return nullptr;
  }
  auto seg = std::make_unique<Segment>();
  auto block = std::make_unique<Block>();
  seg->address = block->address = reinterpret_cast<uintptr_t>(p);
  seg->size = block->size = size;
  seg->stream = block->stream = stream;
  seg->small = block->small = small;
  block->segment = seg.get();
  seg->head = block.get();
  segments_.emplace(seg->address, std::move(seg));
  update(small, &PoolMemoryStats::reserved_bytes, i64(size));
  update(small, &PoolMemoryStats::segments, 1);
  ++stats_.num_segment_allocs;
  return block.release();
}

void* CachingAllocator::allocate(size_t bytes, StreamId stream) {
  std::lock_guard lock(mu_);
  process_events(false);
  size_t rounded = bytes <= kMaxRequest ? round_size(bytes) : 0;
  bool small = rounded != 0 && is_small(rounded);
  Block* b = rounded == 0 ? nullptr : find_free(small, stream, rounded);
  if (b == nullptr && rounded != 0) b = new_segment(small, stream, rounded);
  if (b == nullptr) {
    ++stats_.num_ooms;
    std::string why = rounded == 0
        ? fmt::format("the request is larger than the allocator's limit of {} bytes", kMaxRequest)
        : raw_.available() != SIZE_MAX  // a limit of the caller's, not the device's size
        ? fmt::format("the memory limit of {} ({} bytes: SessionOptions::memory_limit, modelrun --memory-limit) "
                      "leaves {} after the {} already reserved, and the request needs {} ({} bytes)",
                      format_bytes(i64(raw_.capacity())), raw_.capacity(), format_bytes(i64(raw_.available())),
                      format_bytes(i64(raw_.capacity() - raw_.available())), format_bytes(i64(rounded)), rounded)
        : fmt::format("raw allocator '{}' refused a new segment of {} ({} bytes) even after every cached "
                      "free segment was released",
                      raw_.name(), format_bytes(i64(segment_size(rounded))), segment_size(rounded));
    throw RuntimeError(fmt::format("caching allocator '{}': out of memory allocating {} bytes on stream {}: {}\n{}",
                                   name_, bytes, stream, why, summary_locked()));
  }
  size_t remaining = b->size - rounded;
  if (small ? remaining >= kMinBlockSize : remaining > kSmallSize) {
    auto* rest = new Block;
    rest->address = b->address + rounded, rest->size = remaining;
    rest->stream = b->stream, rest->small = b->small, rest->segment = b->segment;
    rest->prev = b, rest->next = b->next;
    if (b->next != nullptr) b->next->prev = rest;
    b->next = rest;
    b->size = rounded;
    pool(small).insert(rest);
  }
  b->state = BlockState::kAllocated;
  b->requested = bytes;
  b->stream_uses.clear();
  live_.emplace(b->address, b);
  update(small, &PoolMemoryStats::allocated_bytes, i64(b->size));
  update(small, &PoolMemoryStats::requested_bytes, i64(bytes));
  update(small, &PoolMemoryStats::active_bytes, i64(b->size));
  update(small, &PoolMemoryStats::allocations, 1);
  update(small, &PoolMemoryStats::active_blocks, 1);
  ++stats_.num_allocs;
  return as_ptr(b->address);
}

void CachingAllocator::free(void* p) {
  if (p == nullptr) return;
  std::lock_guard lock(mu_);
  auto it = live_.find(reinterpret_cast<uintptr_t>(p));
  if (it == live_.end()) fail(p, "free");
  Block* b = it->second;
  // Events first: if the backend throws, the block is still live and nothing has changed.
  std::vector<EventId> made;
  try {
    for (StreamId s : b->stream_uses) {
      made.push_back(events_.create());
      events_.record(made.back(), s);
    }
  } catch (...) {
    for (EventId e : made) events_.destroy(e);
    throw;
  }
  live_.erase(it);
  update(b->small, &PoolMemoryStats::allocated_bytes, -i64(b->size));
  update(b->small, &PoolMemoryStats::requested_bytes, -i64(b->requested));
  update(b->small, &PoolMemoryStats::allocations, -1);
  ++stats_.num_frees;
  b->stream_uses.clear();
  if (made.empty()) return return_block(b);
  b->state = BlockState::kPending;
  for (EventId e : made) pending_.emplace_back(e, b);
  b->pending_events = static_cast<int>(made.size());
}

void CachingAllocator::record_stream(void* p, StreamId stream) {
  std::lock_guard lock(mu_);
  auto it = live_.find(reinterpret_cast<uintptr_t>(p));
  if (it == live_.end()) fail(p, "record_stream");
  if (stream != it->second->stream) it->second->stream_uses.insert(stream);
}

size_t CachingAllocator::allocation_size(const void* p) const {
  std::lock_guard lock(mu_);
  auto it = live_.find(reinterpret_cast<uintptr_t>(p));
  if (it == live_.end()) fail(const_cast<void*>(p), "allocation_size");
  return it->second->size;
}

// b (allocated or pending) becomes free: merged with free neighbours and put in its pool.
void CachingAllocator::return_block(Block* b) {
  update(b->small, &PoolMemoryStats::active_bytes, -i64(b->size));
  update(b->small, &PoolMemoryStats::active_blocks, -1);
  b->state = BlockState::kFree;
  b->requested = 0;
  Pool& p = pool(b->small);
  if (Block* prev = b->prev; prev != nullptr && prev->state == BlockState::kFree) {
    p.erase(prev);
    prev->size += b->size;
    prev->next = b->next;
    if (b->next != nullptr) b->next->prev = prev;
    delete b;
    b = prev;
  }
  if (Block* next = b->next; next != nullptr && next->state == BlockState::kFree) {
    p.erase(next);
    b->size += next->size;
    b->next = next->next;
    if (next->next != nullptr) next->next->prev = b;
    delete next;
  }
  p.insert(b);
}

// Returns the pending blocks whose events have all completed; with `wait`, waits for all.
void CachingAllocator::process_events(bool wait) {
  if (pending_.empty()) return;
  std::vector<std::pair<EventId, Block*>> still;
  for (auto& [e, b] : pending_) {
    if (wait) events_.synchronize(e);
    else if (!events_.query(e)) {
      still.emplace_back(e, b);
      continue;
    }
    events_.destroy(e);
    if (--b->pending_events == 0) return_block(b);
  }
  pending_ = std::move(still);
}

void CachingAllocator::release_segment(Segment* s) {
  Block* b = s->head;
  pool(s->small).erase(b);
  uintptr_t address = s->address;
  bool small = s->small;
  int64_t size = i64(s->size);
  delete b;
  segments_.erase(address);
  raw_.free(as_ptr(address));
  update(small, &PoolMemoryStats::reserved_bytes, -size);
  update(small, &PoolMemoryStats::segments, -1);
  ++stats_.num_segment_frees;
}

void CachingAllocator::release_cached() {
  process_events(true);
  std::vector<Segment*> idle;
  for (auto& [address, seg] : segments_)
    if (seg->head->state == BlockState::kFree && seg->head->next == nullptr) idle.push_back(seg.get());
  for (Segment* s : idle) release_segment(s);
}

void CachingAllocator::empty_cache() {
  std::lock_guard lock(mu_);
  release_cached();
}

void CachingAllocator::fail(void* p, const char* op) const {
  auto a = reinterpret_cast<uintptr_t>(p);
  auto it = segments_.upper_bound(a);
  if (it != segments_.begin()) {
    const Segment& s = *std::prev(it)->second;
    if (a < s.address + s.size) {
      const Block* b = s.head;
      while (b->address + b->size <= a) b = b->next;
      const char* state = b->state == BlockState::kFree ? "free" : b->state == BlockState::kPending ? "pending" : "live";
      if (b->address == a)
        throw RuntimeError(fmt::format("caching allocator '{}': {} of {}, which was already freed (double free?); "
                                       "its block of {} bytes is {}",
                                       name_, op, p, b->size, state));
      throw RuntimeError(fmt::format("caching allocator '{}': {} of {}, which points {} bytes into a {} block of {} "
                                     "bytes at {}; only a pointer that allocate() returned can be given",
                                     name_, op, p, a - b->address, state, b->size, as_ptr(b->address)));
    }
  }
  throw RuntimeError(fmt::format("caching allocator '{}': {} of {}, which this allocator did not allocate", name_, op, p));
}

MemoryStats CachingAllocator::stats_locked() const {
  MemoryStats s = stats_;
  s.unallocated_reserved_bytes = s.all.reserved_bytes.current - s.all.allocated_bytes.current;
  for (const Pool* p : {&small_pool_, &large_pool_})
    for (const Block* b : *p) {
      s.free_bytes += i64(b->size);
      s.largest_free_block = std::max(s.largest_free_block, i64(b->size));
      ++s.free_blocks;
    }
  return s;
}

MemoryStats CachingAllocator::stats() const {
  std::lock_guard lock(mu_);
  return stats_locked();
}

void CachingAllocator::reset_peak() {
  std::lock_guard lock(mu_);
  for (PoolMemoryStats* p : {&stats_.all, &stats_.small, &stats_.large})
    for (MemoryStat PoolMemoryStats::* m :
         {&PoolMemoryStats::allocated_bytes, &PoolMemoryStats::requested_bytes, &PoolMemoryStats::active_bytes,
          &PoolMemoryStats::reserved_bytes, &PoolMemoryStats::allocations, &PoolMemoryStats::active_blocks,
          &PoolMemoryStats::segments})
      (p->*m).peak = (p->*m).current;
}

std::string CachingAllocator::summary_locked() const {
  MemoryStats s = stats_locked();
  std::string head = fmt::format("| {:<26}|{:>13} |{:>13} |{:>13} |{:>13} |", "Metric", "Current", "Peak",
                                 "Total alloc", "Total freed");
  size_t width = head.size();
  std::string rule = "|" + std::string(width - 2, '-') + "|", thick = "|" + std::string(width - 2, '=') + "|";
  auto line = [&](const std::string& text) {  // long texts (long names) wrap onto further rows
    std::string rows;
    for (size_t at = 0; at == 0 || at < text.size(); at += width - 3)
      rows += fmt::format("| {:<{}}|\n", text.substr(at, width - 3), width - 3);
    return rows;
  };
  std::string out = thick + "\n";
  out += line(fmt::format("Caching allocator '{}' over raw allocator '{}': memory summary", name_, raw_.name()));
  out += rule + "\n";
  out += line(fmt::format("allocs: {}  frees: {}  segment allocs: {}  segment frees: {}", s.num_allocs, s.num_frees,
                          s.num_segment_allocs, s.num_segment_frees));
  out += line(fmt::format("alloc retries: {}  OOMs: {}  pending events: {}", s.num_alloc_retries, s.num_ooms,
                          pending_.size()));
  out += thick + "\n" + head + "\n" + rule + "\n";
  auto rows = [&](const char* title, MemoryStat PoolMemoryStats::* m, bool bytes) {
    auto cell = [&](int64_t v) { return bytes ? format_bytes(v) : std::to_string(v); };
    for (auto [label, p] : {std::pair{title, &s.all}, std::pair{"  from large pool", &s.large},
                            std::pair{"  from small pool", &s.small}}) {
      const MemoryStat& st = p->*m;
      out += fmt::format("| {:<26}|{:>13} |{:>13} |{:>13} |{:>13} |\n", label, cell(st.current), cell(st.peak),
                         cell(st.allocated), cell(st.freed));
    }
    out += rule + "\n";
  };
  rows("Allocated memory", &PoolMemoryStats::allocated_bytes, true);
  rows("Requested memory", &PoolMemoryStats::requested_bytes, true);
  rows("Active memory", &PoolMemoryStats::active_bytes, true);
  rows("Reserved memory", &PoolMemoryStats::reserved_bytes, true);
  rows("Allocations", &PoolMemoryStats::allocations, false);
  rows("Active blocks", &PoolMemoryStats::active_blocks, false);
  rows("Segments", &PoolMemoryStats::segments, false);
  out += line(fmt::format("Fragmentation. Reserved - allocated: {}", format_bytes(s.unallocated_reserved_bytes)));
  out += line(fmt::format("Free blocks: {} holding {}, the largest {}", s.free_blocks, format_bytes(s.free_bytes),
                          format_bytes(s.largest_free_block)));
  out += thick + "\n";
  return out;
}

std::string CachingAllocator::memory_summary() const {
  std::lock_guard lock(mu_);
  return summary_locked();
}

std::vector<SegmentSnapshot> CachingAllocator::snapshot_locked() const {
  std::vector<SegmentSnapshot> out;
  for (auto& [address, seg] : segments_) {
    SegmentSnapshot& s = out.emplace_back();
    s.address = address, s.size = seg->size, s.stream = seg->stream, s.small = seg->small;
    for (const Block* b = seg->head; b != nullptr; b = b->next)
      s.blocks.push_back({b->address, b->size, b->requested, b->state});
  }
  return out;
}

std::vector<SegmentSnapshot> CachingAllocator::snapshot() const {
  std::lock_guard lock(mu_);
  return snapshot_locked();
}

// Long by design: one check per invariant of the allocator, listed.
void CachingAllocator::check_invariants() const {
  std::lock_guard lock(mu_);
  auto bad = [&](const std::string& what) {
    throw RuntimeError(fmt::format("caching allocator '{}': invariant broken: {}", name_, what));
  };
  std::map<const Block*, int> events_of;
  for (auto& [e, b] : pending_) ++events_of[b];
  PoolMemoryStats count_small, count_large;
  size_t free_in[2] = {0, 0}, live_seen = 0, pending_seen = 0;
  uintptr_t end_of_previous = 0;
  for (auto& [address, seg] : segments_) {
    if (address != seg->address) bad(fmt::format("segment keyed {} is at {}", as_ptr(address), as_ptr(seg->address)));
    if (address < end_of_previous) bad(fmt::format("segment {} overlaps the one before it", as_ptr(address)));
    end_of_previous = address + seg->size;
    PoolMemoryStats& c = seg->small ? count_small : count_large;
    c.reserved_bytes.current += i64(seg->size);
    c.segments.current += 1;
    uintptr_t at = address;
    const Block* prev = nullptr;
    for (const Block* b = seg->head; b != nullptr; prev = b, b = b->next) {
      std::string where = fmt::format("block {} of segment {}", as_ptr(b->address), as_ptr(address));
      if (b->prev != prev) bad(where + ": wrong prev link");
      if (b->segment != seg.get()) bad(where + ": wrong segment");
      if (b->address != at) bad(fmt::format("{}: expected at {} (blocks must tile the segment)", where, as_ptr(at)));
      if (b->size == 0 || b->size % kMinBlockSize != 0) bad(fmt::format("{}: size {}", where, b->size));
      if (b->stream != seg->stream || b->small != seg->small) bad(where + ": stream or pool differs from its segment");
      at += b->size;
      if (at > address + seg->size) bad(where + ": runs past the end of its segment");
      switch (b->state) {
        case BlockState::kFree:
          if (prev != nullptr && prev->state == BlockState::kFree) bad(where + ": free and not merged with free prev");
          if (!(b->small ? small_pool_ : large_pool_).contains(const_cast<Block*>(b))) bad(where + ": free, not in pool");
          if (b->pending_events != 0 || b->requested != 0) bad(where + ": free with events or a request");
          ++free_in[b->small];
          break;
        case BlockState::kAllocated: {
          auto it = live_.find(b->address);
          if (it == live_.end() || it->second != b) bad(where + ": allocated, not in the live map");
          if (b->requested > b->size || round_size(b->requested) > b->size) bad(where + ": requested > size");
          c.allocated_bytes.current += i64(b->size);
          c.requested_bytes.current += i64(b->requested);
          c.allocations.current += 1;
          ++live_seen;
          c.active_bytes.current += i64(b->size);
          c.active_blocks.current += 1;
          break;
        }
        case BlockState::kPending: {
          auto it = events_of.find(b);
          if (b->pending_events <= 0 || it == events_of.end() || it->second != b->pending_events)
            bad(where + ": pending without matching events");
          ++pending_seen;
          c.active_bytes.current += i64(b->size);
          c.active_blocks.current += 1;
          break;
        }
      }
    }
    if (at != address + seg->size)
      bad(fmt::format("blocks of segment {} cover {} of its {} bytes", as_ptr(address), at - address, seg->size));
  }
  if (free_in[1] != small_pool_.size() || free_in[0] != large_pool_.size())
    bad(fmt::format("pools hold {}+{} blocks, segments have {}+{} free ones", small_pool_.size(), large_pool_.size(),
                    free_in[1], free_in[0]));
  if (live_seen != live_.size()) bad(fmt::format("live map has {} entries, segments {}", live_.size(), live_seen));
  if (pending_seen != events_of.size()) bad("events refer to blocks that are not pending");
  auto compare = [&](const char* pool_name, const PoolMemoryStats& want, const PoolMemoryStats& have) {
    for (auto [field, m] : {std::pair{"allocated_bytes", &PoolMemoryStats::allocated_bytes},
                            std::pair{"requested_bytes", &PoolMemoryStats::requested_bytes},
                            std::pair{"active_bytes", &PoolMemoryStats::active_bytes},
                            std::pair{"reserved_bytes", &PoolMemoryStats::reserved_bytes},
                            std::pair{"allocations", &PoolMemoryStats::allocations},
                            std::pair{"active_blocks", &PoolMemoryStats::active_blocks},
                            std::pair{"segments", &PoolMemoryStats::segments}}) {
      const MemoryStat& h = have.*m;
      if ((want.*m).current != h.current)
        bad(fmt::format("stats.{}.{} is {}, recount {}", pool_name, field, h.current, (want.*m).current));
      if (h.peak < h.current || h.allocated - h.freed != h.current)
        bad(fmt::format("stats.{}.{}: peak/totals inconsistent", pool_name, field));
    }
  };
  PoolMemoryStats count_all;
  for (MemoryStat PoolMemoryStats::* m :
       {&PoolMemoryStats::allocated_bytes, &PoolMemoryStats::requested_bytes, &PoolMemoryStats::active_bytes,
        &PoolMemoryStats::reserved_bytes, &PoolMemoryStats::allocations, &PoolMemoryStats::active_blocks,
        &PoolMemoryStats::segments})
    (count_all.*m).current = (count_small.*m).current + (count_large.*m).current;
  compare("small", count_small, stats_.small);
  compare("large", count_large, stats_.large);
  compare("all", count_all, stats_.all);
  if (stats_.num_allocs - stats_.num_frees != stats_.all.allocations.current) bad("allocs - frees != live allocations");
  if (stats_.num_segment_allocs - stats_.num_segment_frees != stats_.all.segments.current)
    bad("segment allocs - segment frees != segments");
}

}  // namespace modelc::rt
