// The CUDA halves of the caching allocator (runtime/device/memory/caching_allocator.h): device
// memory through cuMemAlloc, pinned host memory through cuMemAllocHost, and events through
// cuEvent*. The allocator's algorithm is the one tested on host memory in CI.
#pragma once

#include <mutex>
#include <unordered_map>

#include "runtime/device/cuda/context.h"
#include "runtime/device/memory/raw_allocator.h"

namespace modelc::rt::cuda {

// Device memory of the context's device. allocate() returns null on
// CUDA_ERROR_OUT_OF_MEMORY (the caching allocator then releases its cache and retries) and
// throws CudaError on any other failure.
class DeviceRawAllocator final : public RawAllocator {
 public:
  explicit DeviceRawAllocator(const Context& ctx) : ctx_(ctx) {}
  void* allocate(size_t bytes) override;
  void free(void* p) override;
  std::string name() const override;
  size_t capacity() const override { return ctx_.info().total_memory; }

 private:
  const Context& ctx_;
};

// Page-locked host memory (cuMemAllocHost), the source of asynchronous copies.
class PinnedRawAllocator final : public RawAllocator {
 public:
  explicit PinnedRawAllocator(const Context& ctx) : ctx_(ctx) {}
  void* allocate(size_t bytes) override;
  void free(void* p) override;
  std::string name() const override { return "pinned host"; }

 private:
  const Context& ctx_;
};

// cuEvent* behind the allocator's EventBackend; events are created without timing.
class CudaEventBackend final : public EventBackend {
 public:
  explicit CudaEventBackend(const Context& ctx) : ctx_(ctx) {}
  ~CudaEventBackend() override;
  EventId create() override;
  void record(EventId e, StreamId stream) override;
  bool query(EventId e) override;
  void synchronize(EventId e) override;
  void destroy(EventId e) override;

 private:
  CUevent get(EventId e);
  const Context& ctx_;
  std::mutex mu_;
  EventId next_ = 0;
  std::unordered_map<EventId, CUevent> events_;
};

}  // namespace modelc::rt::cuda
