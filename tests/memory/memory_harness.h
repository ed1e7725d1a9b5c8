// Shared by the caching allocator tests: an allocator over a (possibly limited) host raw
// allocator and a fake event backend, and size literals.
#pragma once

#include <gtest/gtest.h>

#include <cstddef>
#include <cstdint>
#include <string>

#include "runtime/device/memory/caching_allocator.h"

namespace modelc::rt::test {

inline constexpr size_t KiB = size_t{1} << 10;
inline constexpr size_t MiB = size_t{1} << 20;

struct Harness {
  explicit Harness(size_t limit = 0) : raw(limit, "host-test"), alloc("test", raw, events) {}
  HostRawAllocator raw;
  FakeEventBackend events;
  CachingAllocator alloc;
};

inline uintptr_t addr(const void* p) { return reinterpret_cast<uintptr_t>(p); }

// The message of the RuntimeError f throws; fails the test if it throws nothing.
template <class F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const RuntimeError& e) {
    return e.what();
  }
  ADD_FAILURE() << "expected a RuntimeError";
  return "";
}

}  // namespace modelc::rt::test
