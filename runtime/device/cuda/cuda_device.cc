#include "runtime/device/cuda/cuda_device.h"

#include <fmt/format.h>

namespace modelc::rt::cuda {

CudaDevice::CudaDevice(const Driver& driver, int ordinal)
    : ctx_(driver, ordinal), raw_(ctx_), events_(ctx_), pinned_raw_(ctx_), pinned_events_(ctx_) {
  alloc_ = std::make_unique<CachingAllocator>(raw_.name(), raw_, events_);
  pinned_ = std::make_unique<CachingAllocator>("pinned host", pinned_raw_, pinned_events_);
  stream_ = ctx_.create_stream();
}

CudaDevice::~CudaDevice() {
  try {
    ctx_.make_current();
    ctx_.synchronize();
  } catch (const RuntimeError&) {
    // Tearing down after a failure: free what can be freed.
  }
  for (auto& [name, lib] : libraries_)
    if (lib.handle != nullptr && lib.destroy != nullptr) lib.destroy(lib.handle);
  for (auto& [stream, w] : workspaces_)
    if (w.data != nullptr) alloc_->free(w.data);
  program_module_.reset();
  library_modules_.clear();
  alloc_.reset();
  pinned_.reset();
  ctx_.destroy_stream(stream_);
  ctx_.destroy_stream(copy_stream_);
  for (CUstream s : streams_) ctx_.destroy_stream(s);
}

CUstream CudaDevice::compute_stream(uint32_t k) {
  if (k == 0) return stream_;
  while (streams_.size() < k) streams_.push_back(ctx_.create_stream());
  return streams_[k - 1];
}

CUstream CudaDevice::copy_stream() {
  if (copy_stream_ == nullptr) copy_stream_ = ctx_.create_stream();
  return copy_stream_;
}

Module& CudaDevice::program_module(const std::string& ptx, const std::string& target) {
  if (!program_module_ || module_text_ != ptx) {
    program_module_.reset();
    program_module_ = std::make_unique<Module>(ctx_, ptx, target);
    module_text_ = ptx;
  }
  return *program_module_;
}

Module& CudaDevice::library_module(const std::string& name, const char* ptx, const std::string& target) {
  std::unique_ptr<Module>& m = library_modules_[name];
  if (!m) m = std::make_unique<Module>(ctx_, ptx, target);
  return *m;
}

void CudaDevice::synchronize() const { MODELC_CU(ctx_.driver(), cuStreamSynchronize(stream_)); }

void* CudaDevice::workspace(size_t bytes, CUstream stream) {
  Workspace& w = workspaces_[stream];
  if (bytes > w.bytes) {
    // Freed on its stream: the allocator hands the block only to later work there.
    if (w.data != nullptr) alloc_->free(w.data);
    w = {};
    w.data = alloc_->allocate(bytes, stream_id(stream));
    w.bytes = bytes;
  }
  return w.data;
}

}  // namespace modelc::rt::cuda
