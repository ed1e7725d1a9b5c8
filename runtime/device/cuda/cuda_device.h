// One GPU as a session uses it: the context, the caching allocators of device memory and of
// pinned host memory, the compute streams (stream 0, and the others a schedule asks for),
// the copy stream (uploads of the next batch), the Program's PTX module and the libraries'
// modules (the hand kernels'; loaded on first use), and the library handles (cuBLASLt, cuDNN) that library ops
// create on first use. Not thread-safe: one session drives it.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "runtime/device/cuda/context.h"
#include "runtime/device/cuda/memory.h"
#include "runtime/device/cuda/module.h"
#include "runtime/device/memory/caching_allocator.h"

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
  const CachingAllocator& allocator() const { return *alloc_; }  // its statistics and summary
  CachingAllocator& pinned() { return *pinned_; }
  // Compute stream 0, where a run starts and ends.
  CUstream stream() const { return stream_; }
  // Compute stream k (0: stream()), created on first use.
  CUstream compute_stream(uint32_t k);
  // The stream that uploads inputs from pinned memory, created on first use.
  CUstream copy_stream();
  // The module of `ptx` (compiled for `target`), loaded once and kept while the same text is
  // asked for.
  Module& program_module(const std::string& ptx, const std::string& target);
  // A library's own module (the hand kernels' PTX, kernels/cuda/), by name: loaded from `ptx`
  // (compiled for `target`) on first use and kept for the device's life.
  Module& library_module(const std::string& name, const char* ptx, const std::string& target);
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
  // A scratch block of at least `bytes` on the device for the library workspaces of work on
  // `stream`, kept and grown: one per stream, as ops on two streams may run at once.
  void* workspace(size_t bytes, CUstream stream);

 private:
  Context ctx_;
  DeviceRawAllocator raw_;
  CudaEventBackend events_;
  PinnedRawAllocator pinned_raw_;
  CudaEventBackend pinned_events_;  // a pinned block is reused once the copies from it are done
  std::unique_ptr<CachingAllocator> alloc_, pinned_;
  CUstream stream_ = nullptr, copy_stream_ = nullptr;
  std::vector<CUstream> streams_;  // compute streams 1.. (index k - 1)
  std::unique_ptr<Module> program_module_;
  std::map<std::string, std::unique_ptr<Module>> library_modules_;
  std::string module_text_;
  std::map<std::string, LibraryState> libraries_;
  struct Workspace {
    void* data = nullptr;
    size_t bytes = 0;
  };
  std::map<CUstream, Workspace> workspaces_;
  bool tf32_ = false;
};

}  // namespace modelc::rt::cuda
