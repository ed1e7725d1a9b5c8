// One GPU as a session uses it: the context, the caching allocators of device memory and of
// pinned host memory, the compute stream, the Program's PTX module and the hand kernels'
// module (loaded on first use), and the library handles (cuBLASLt, cuDNN) that library ops
// create on first use. Not thread-safe: one session drives it.
#pragma once

#include <map>
#include <memory>
#include <string>

#include "runtime/cuda/context.h"
#include "runtime/cuda/memory.h"
#include "runtime/cuda/module.h"
#include "runtime/memory/caching_allocator.h"

namespace modelc::rt::cuda {

class CudaDevice {
 public:
  CudaDevice(const Driver& driver, int ordinal);
  ~CudaDevice();
  CudaDevice(const CudaDevice&) = delete;
  CudaDevice& operator=(const CudaDevice&) = delete;

  const Context& context() const { return ctx_; }
  const Driver& driver() const { return ctx_.driver(); }
  CachingAllocator& allocator() { return *alloc_; }
  CachingAllocator& pinned() { return *pinned_; }
  CUstream stream() const { return stream_; }
  // The module of `ptx` (compiled for `target`), loaded once and kept while the same text is
  // asked for.
  Module& program_module(const std::string& ptx, const std::string& target);
  // The hand kernels of kernels/cuda/; RuntimeError when the runtime was built without them.
  Module& hand_kernels();
  void synchronize() const;
  // Whether f32 matmuls may use TF32 tensor cores (10-bit mantissa inputs, f32 accumulation;
  // off by default, as in PyTorch).
  bool allow_tf32() const { return tf32_; }
  void set_allow_tf32(bool on) { tf32_ = on; }

  // Library state: a slot per library (cuBLASLt, cuDNN) that its ops fill on first use and
  // that the device destroys (before the context) with the deleter given.
  struct LibraryState {
    void* handle = nullptr;
    void (*destroy)(void*) = nullptr;
  };
  LibraryState& library_state(const std::string& name) { return libraries_[name]; }
  // A scratch block of at least `bytes` on the device for library workspaces, kept and grown.
  void* workspace(size_t bytes);

 private:
  Context ctx_;
  DeviceRawAllocator raw_;
  CudaEventBackend events_;
  PinnedRawAllocator pinned_raw_;
  ImmediateEventBackend pinned_events_;
  std::unique_ptr<CachingAllocator> alloc_, pinned_;
  CUstream stream_ = nullptr;
  std::unique_ptr<Module> program_module_, hand_kernels_;
  std::string module_text_;
  std::map<std::string, LibraryState> libraries_;
  void* workspace_ = nullptr;
  size_t workspace_bytes_ = 0;
  bool tf32_ = false;
};

}  // namespace modelc::rt::cuda
