// Access to the fake CUDA driver (tests/cuda/fake/fake_cuda.cc) from the tests: its path, a
// Driver loaded from it, its test-side entry points, a scoped environment variable (the
// fake reads its settings from the environment at each call), and the message of an error.
#pragma once

#include <dlfcn.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <cstdlib>
#include <exception>
#include <functional>
#include <optional>
#include <string>

#include "runtime/device/cuda/driver.h"

namespace modelc::test {

inline const char* fake_libcuda() { return MODELC_FAKE_LIBCUDA; }

// Sets (or with nullopt unsets) an environment variable for the scope.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, std::optional<std::string> value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = old;
    if (value) ::setenv(name, value->c_str(), 1);
    else ::unsetenv(name);
  }
  ~ScopedEnv() {
    if (old_) ::setenv(name_, old_->c_str(), 1);
    else ::unsetenv(name_);
  }
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;

 private:
  const char* name_;
  std::optional<std::string> old_;
};

// A test-side entry point of the fake driver.
template <typename Fn>
Fn fake_entry(const char* name) {
  void* lib = dlopen(fake_libcuda(), RTLD_NOW | RTLD_LOCAL | RTLD_NODELETE);
  if (lib == nullptr) throw std::runtime_error(std::string("cannot load the fake driver: ") + dlerror());
  void* f = dlsym(lib, name);
  if (f == nullptr) throw std::runtime_error(std::string("the fake driver lacks ") + name);
  return reinterpret_cast<Fn>(f);
}

struct FakeCounts {
  size_t device_bytes = 0, pinned = 0;
  int streams = 0, events = 0, contexts = 0;
};
inline FakeCounts fake_counts() {
  FakeCounts c;
  fake_entry<void (*)(size_t*, size_t*, int*, int*, int*)>("fake_cuda_counts")(&c.device_bytes, &c.pinned, &c.streams,
                                                                              &c.events, &c.contexts);
  return c;
}

struct FakeLaunch {
  std::string name;
  unsigned grid = 0, block = 0;
  int64_t begin = 0, end = 0;
};
inline std::vector<FakeLaunch> fake_launches() {
  auto get = fake_entry<bool (*)(size_t, char*, size_t, unsigned*, unsigned*, int64_t*, int64_t*)>("fake_cuda_launch");
  std::vector<FakeLaunch> out;
  for (size_t i = 0;; ++i) {
    FakeLaunch l;
    char name[256];
    if (!get(i, name, sizeof(name), &l.grid, &l.block, &l.begin, &l.end)) break;
    l.name = name;
    out.push_back(l);
  }
  return out;
}
inline void fake_reset() { fake_entry<void (*)()>("fake_cuda_reset")(); }
inline void fake_register(const char* name, void (*fn)(void* const*, const int64_t*, int64_t, int64_t)) {
  fake_entry<void (*)(const char*, void (*)(void* const*, const int64_t*, int64_t, int64_t))>("fake_cuda_register_kernel")(name, fn);
}

// A stand-in for a kernel with its own parameters: it gets cuLaunchKernel's parameter array.
inline void fake_register_raw(const char* name, void (*fn)(void**)) {
  fake_entry<void (*)(const char*, void (*)(void**))>("fake_cuda_register_raw_kernel")(name, fn);
}

// What `f` threw (its what()), or "(no exception)".
inline std::string message_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const std::exception& e) {
    return e.what();
  }
  return "(no exception)";
}

}  // namespace modelc::test
