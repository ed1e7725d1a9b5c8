// The two interfaces the caching allocator (runtime/device/memory/caching_allocator.h) stands on,
// and their host implementations:
//
//   RawAllocator  hands out and takes back whole segments: cuMemAlloc/cuMemFree for device
//                 memory, cuMemHostAlloc/cuMemFreeHost for pinned host memory, and here
//                 HostRawAllocator (aligned operator new, optionally limited so that tests
//                 can run out of memory). allocate() returns null when memory is exhausted;
//                 it never throws for that.
//   EventBackend  create/record/query/synchronize/destroy of events on streams: cuEvent* on
//                 CUDA. ImmediateEventBackend is for host streams that run synchronously
//                 (every event is complete when recorded); FakeEventBackend lets a test decide
//                 when each event completes.
//
// Streams are opaque ids (StreamId); 0 is the default stream. The allocator never
// interprets an id, it only hands it to the EventBackend.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <unordered_map>
#include <utility>

#include "runtime/base/error.h"

namespace modelc::rt {

using StreamId = uint64_t;
inline constexpr StreamId kDefaultStream = 0;
using EventId = uint64_t;

class RawAllocator {
 public:
  virtual ~RawAllocator() = default;
  // A fresh region of at least `bytes` bytes, or null when there is no memory for it.
  virtual void* allocate(size_t bytes) = 0;
  // Gives back a region allocate() returned. Anything else is a RuntimeError.
  virtual void free(void* p) = 0;
  virtual std::string name() const = 0;
  // The most bytes that can be live at once; SIZE_MAX when there is no known limit.
  virtual size_t capacity() const { return SIZE_MAX; }
  // The bytes that can still be allocated under that limit; SIZE_MAX when there is none.
  virtual size_t available() const { return SIZE_MAX; }
};

// Host memory aligned to kAlignment bytes. `limit` (0: none) caps the bytes live at once,
// so that out-of-memory can be simulated; the region sizes are counted as requested.
class HostRawAllocator final : public RawAllocator {
 public:
  static constexpr size_t kAlignment = 256;

  explicit HostRawAllocator(size_t limit = 0, std::string name = "host") : limit_(limit), name_(std::move(name)) {}
  ~HostRawAllocator() override;
  HostRawAllocator(const HostRawAllocator&) = delete;
  HostRawAllocator& operator=(const HostRawAllocator&) = delete;

  void* allocate(size_t bytes) override;
  void free(void* p) override;
  std::string name() const override { return name_; }
  size_t capacity() const override { return limit_ == 0 ? SIZE_MAX : limit_; }
  size_t available() const override;

  size_t in_use() const;
  size_t live_regions() const;
  // Successful allocate() calls so far.
  size_t allocations() const;

 private:
  mutable std::mutex mu_;
  size_t limit_;
  std::string name_;
  size_t in_use_ = 0, allocations_ = 0;
  std::unordered_map<void*, size_t> live_;
};

class EventBackend {
 public:
  virtual ~EventBackend() = default;
  virtual EventId create() = 0;
  // Completes once the work submitted to `stream` so far has completed.
  virtual void record(EventId e, StreamId stream) = 0;
  // True once the recorded work has completed.
  virtual bool query(EventId e) = 0;
  // Blocks until query(e) would be true.
  virtual void synchronize(EventId e) = 0;
  virtual void destroy(EventId e) = 0;
};

// Host streams that run their work before record() returns: every event is complete.
class ImmediateEventBackend final : public EventBackend {
 public:
  EventId create() override { return ++next_; }
  void record(EventId, StreamId) override {}
  bool query(EventId) override { return true; }
  void synchronize(EventId) override {}
  void destroy(EventId) override {}

 private:
  std::atomic<EventId> next_{0};
};

// Events that complete when the test says so: complete(e), complete_stream(s) (every event
// recorded on s so far) or complete_all(). synchronize(e) completes e, as waiting for the
// stream would. Unknown ids are a RuntimeError.
class FakeEventBackend final : public EventBackend {
 public:
  EventId create() override;
  void record(EventId e, StreamId stream) override;
  bool query(EventId e) override;
  void synchronize(EventId e) override;
  void destroy(EventId e) override;

  void complete(EventId e);
  void complete_stream(StreamId s);
  void complete_all();
  // Events created and not yet destroyed.
  size_t live_events() const;
  // Recorded on `s`, not destroyed and not complete.
  size_t pending_on(StreamId s) const;
  size_t synchronize_calls() const;

 private:
  struct Event {
    StreamId stream = kDefaultStream;
    bool recorded = false, done = false;
  };
  Event& get(EventId e, const char* what);
  mutable std::mutex mu_;
  EventId next_ = 0;
  size_t synchronized_ = 0;
  std::map<EventId, Event> events_;
};

}  // namespace modelc::rt
