#include "runtime/device/cuda/memory.h"

#include <fmt/format.h>

namespace modelc::rt::cuda {

void* DeviceRawAllocator::allocate(size_t bytes) {
  CUdeviceptr p = 0;
  CUresult r = ctx_.driver().api().cuMemAlloc_v2(&p, bytes);
  if (r == CUDA_ERROR_OUT_OF_MEMORY) return nullptr;
  ctx_.driver().check(r, "cuMemAlloc_v2", __FILE__, __LINE__);
  return reinterpret_cast<void*>(p);
}

void DeviceRawAllocator::free(void* p) { MODELC_CU(ctx_.driver(), cuMemFree_v2(reinterpret_cast<CUdeviceptr>(p))); }

std::string DeviceRawAllocator::name() const { return fmt::format("cuda:{}", ctx_.info().ordinal); }

void* PinnedRawAllocator::allocate(size_t bytes) {
  void* p = nullptr;
  CUresult r = ctx_.driver().api().cuMemAllocHost_v2(&p, bytes);
  if (r == CUDA_ERROR_OUT_OF_MEMORY) return nullptr;
  ctx_.driver().check(r, "cuMemAllocHost_v2", __FILE__, __LINE__);
  return p;
}

void PinnedRawAllocator::free(void* p) { MODELC_CU(ctx_.driver(), cuMemFreeHost(p)); }

CudaEventBackend::~CudaEventBackend() {
  for (auto& [id, ev] : events_) ctx_.driver().api().cuEventDestroy_v2(ev);
}

CUevent CudaEventBackend::get(EventId e) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = events_.find(e);
  if (it == events_.end()) throw RuntimeError(fmt::format("CUDA event backend: unknown event {}", e));
  return it->second;
}

EventId CudaEventBackend::create() {
  CUevent ev = nullptr;
  MODELC_CU(ctx_.driver(), cuEventCreate(&ev, CU_EVENT_DISABLE_TIMING));
  std::lock_guard<std::mutex> lock(mu_);
  events_[++next_] = ev;
  return next_;
}

void CudaEventBackend::record(EventId e, StreamId stream) { MODELC_CU(ctx_.driver(), cuEventRecord(get(e), cu_stream(stream))); }

bool CudaEventBackend::query(EventId e) {
  CUresult r = ctx_.driver().api().cuEventQuery(get(e));
  if (r == CUDA_ERROR_NOT_READY) return false;
  ctx_.driver().check(r, "cuEventQuery", __FILE__, __LINE__);
  return true;
}

void CudaEventBackend::synchronize(EventId e) { MODELC_CU(ctx_.driver(), cuEventSynchronize(get(e))); }

void CudaEventBackend::destroy(EventId e) {
  CUevent ev = get(e);
  {
    std::lock_guard<std::mutex> lock(mu_);
    events_.erase(e);
  }
  MODELC_CU(ctx_.driver(), cuEventDestroy_v2(ev));
}

}  // namespace modelc::rt::cuda
