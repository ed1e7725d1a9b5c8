// HostRawAllocator and FakeEventBackend (runtime/device/memory/raw_allocator.h).
#include "runtime/device/memory/raw_allocator.h"

#include <fmt/format.h>

#include <new>

namespace modelc::rt {

HostRawAllocator::~HostRawAllocator() {
  for (auto& [p, bytes] : live_) ::operator delete(p, std::align_val_t{kAlignment});
}

void* HostRawAllocator::allocate(size_t bytes) {
  std::lock_guard lock(mu_);
  if (bytes == 0) bytes = 1;
  if (limit_ != 0 && (bytes > limit_ || in_use_ > limit_ - bytes)) return nullptr;
  void* p = ::operator new(bytes, std::align_val_t{kAlignment}, std::nothrow);
  if (p == nullptr) return nullptr;
  live_.emplace(p, bytes);
  in_use_ += bytes;
  ++allocations_;
  return p;
}

void HostRawAllocator::free(void* p) {
  std::lock_guard lock(mu_);
  auto it = live_.find(p);
  if (it == live_.end())
    throw RuntimeError(fmt::format("raw allocator '{}': free of {} which it did not allocate", name_, p));
  in_use_ -= it->second;
  live_.erase(it);
  ::operator delete(p, std::align_val_t{kAlignment});
}

size_t HostRawAllocator::in_use() const {
  std::lock_guard lock(mu_);
  return in_use_;
}

size_t HostRawAllocator::available() const {
  std::lock_guard lock(mu_);
  return limit_ == 0 ? SIZE_MAX : limit_ - in_use_;
}

size_t HostRawAllocator::live_regions() const {
  std::lock_guard lock(mu_);
  return live_.size();
}

size_t HostRawAllocator::allocations() const {
  std::lock_guard lock(mu_);
  return allocations_;
}

FakeEventBackend::Event& FakeEventBackend::get(EventId e, const char* what) {
  auto it = events_.find(e);
  if (it == events_.end()) throw RuntimeError(fmt::format("fake event backend: {} of unknown event {}", what, e));
  return it->second;
}

EventId FakeEventBackend::create() {
  std::lock_guard lock(mu_);
  events_.emplace(++next_, Event{});
  return next_;
}

void FakeEventBackend::record(EventId e, StreamId stream) {
  std::lock_guard lock(mu_);
  Event& ev = get(e, "record");
  ev.stream = stream, ev.recorded = true, ev.done = false;
}

bool FakeEventBackend::query(EventId e) {
  std::lock_guard lock(mu_);
  Event& ev = get(e, "query");
  return !ev.recorded || ev.done;
}

void FakeEventBackend::synchronize(EventId e) {
  std::lock_guard lock(mu_);
  get(e, "synchronize").done = true;
  ++synchronized_;
}

void FakeEventBackend::destroy(EventId e) {
  std::lock_guard lock(mu_);
  get(e, "destroy");
  events_.erase(e);
}

void FakeEventBackend::complete(EventId e) {
  std::lock_guard lock(mu_);
  get(e, "complete").done = true;
}

void FakeEventBackend::complete_stream(StreamId s) {
  std::lock_guard lock(mu_);
  for (auto& [id, ev] : events_)
    if (ev.recorded && ev.stream == s) ev.done = true;
}

void FakeEventBackend::complete_all() {
  std::lock_guard lock(mu_);
  for (auto& [id, ev] : events_) ev.done = true;
}

size_t FakeEventBackend::live_events() const {
  std::lock_guard lock(mu_);
  return events_.size();
}

size_t FakeEventBackend::pending_on(StreamId s) const {
  std::lock_guard lock(mu_);
  size_t n = 0;
  for (auto& [id, ev] : events_) n += ev.recorded && !ev.done && ev.stream == s;
  return n;
}

size_t FakeEventBackend::synchronize_calls() const {
  std::lock_guard lock(mu_);
  return synchronized_;
}

}  // namespace modelc::rt
