#include "runtime/cuda/cuda_device.h"

#include <fmt/format.h>

#include "runtime/cuda/library.h"

namespace modelc::rt::cuda {

CudaDevice::CudaDevice(const Driver& driver, int ordinal)
    : ctx_(driver, ordinal), raw_(ctx_), events_(ctx_), pinned_raw_(ctx_) {
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
  if (workspace_ != nullptr) alloc_->free(workspace_);
  program_module_.reset();
  hand_kernels_.reset();
  alloc_.reset();
  pinned_.reset();
  ctx_.destroy_stream(stream_);
}

Module& CudaDevice::program_module(const std::string& ptx, const std::string& target) {
  if (!program_module_ || module_text_ != ptx) {
    program_module_.reset();
    program_module_ = std::make_unique<Module>(ctx_, ptx, target);
    module_text_ = ptx;
  }
  return *program_module_;
}

Module& CudaDevice::hand_kernels() {
  if (!hand_kernels_) {
    const char* ptx = hand_kernels_ptx();
    if (ptx == nullptr || *ptx == '\0')
      throw RuntimeError("this runtime was built without nvcc, so it has no CUDA kernels for its library ops (kernels/cuda/)");
    hand_kernels_ = std::make_unique<Module>(ctx_, ptx, "sm_80");
  }
  return *hand_kernels_;
}

void CudaDevice::synchronize() const { MODELC_CU(ctx_.driver(), cuStreamSynchronize(stream_)); }

void* CudaDevice::workspace(size_t bytes) {
  if (bytes > workspace_bytes_) {
    if (workspace_ != nullptr) alloc_->free(workspace_);
    workspace_ = nullptr;
    workspace_bytes_ = 0;
    workspace_ = alloc_->allocate(bytes, stream_id(stream_));
    workspace_bytes_ = bytes;
  }
  return workspace_;
}

}  // namespace modelc::rt::cuda
