// The CPU backend (runtime/execution/backend.h): one CPU executor per function
// (runtime/execution/cpu/executor.h), made on first use, running on the caller's persistent
// store in place and on the caller's thread pool. A run is done when start() returns. The
// arenas come from the backend's own caching allocator over host memory, capped at
// BackendOptions::memory_limit; the input peak is the most bytes one run was fed (inputs
// are read in place, so they are not the allocator's). A run flushes subnormal floats to zero
// unless the backend was made to keep them; the caller's thread gets its own mode back after.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "runtime/device/memory/caching_allocator.h"
#include "runtime/device/memory/raw_allocator.h"
#include "runtime/execution/backend.h"
#include "runtime/execution/cpu/executor.h"

namespace modelc::rt {

class CpuBackend final : public Backend {
 public:
  CpuBackend(const Program& program, std::vector<HostTensor>& persistent, ThreadPool& pool, bool arena,
             size_t memory_limit, bool flush_subnormals = true);
  ~CpuBackend() override;

  std::unique_ptr<BackendRun> start(const Function& fn, std::span<const HostTensor* const> feeds,
                                    const std::map<std::string, int64_t>& symbols) override;
  HostTensor read_persistent(uint32_t b) const override { return persistent_[b]; }
  void write_persistent(uint32_t) override {}  // the executors run on the store itself
  MemoryUsage memory_usage() const override;
  std::string memory_summary() const override { return memory_.memory_summary(); }
  void reset_peak_memory() override;
  void set_profiling(bool on) override;
  std::vector<cuda::InstrTime> profile(const std::string& fn) const override;
  std::string description() const override { return "cpu"; }
  bool is_cuda() const override { return false; }

 private:
  const Program& program_;
  std::vector<HostTensor>& persistent_;
  ThreadPool& pool_;
  bool arena_;
  bool flush_subnormals_;  // each run's subnormal mode (runtime/device/cpu/float_env.h)
  bool profiling_ = false;
  // Declared before the executors, which free their arenas into it.
  HostRawAllocator raw_memory_;
  ImmediateEventBackend events_;
  CachingAllocator memory_;
  int64_t input_peak_ = 0;
  std::map<std::string, std::unique_ptr<Executor>> executors_;  // by function name
};

}  // namespace modelc::rt
