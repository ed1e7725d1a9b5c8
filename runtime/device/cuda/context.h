// A CUDA device made ready for work: its primary context retained and current on the
// threads that use it, and the device's facts (runtime/device/cuda/device.h). Streams are the
// driver's; a StreamId (runtime/device/memory/raw_allocator.h) is a CUstream's bits, 0 the
// default stream.
#pragma once

#include "runtime/device/cuda/device.h"
#include "runtime/device/cuda/driver.h"
#include "runtime/device/memory/raw_allocator.h"

namespace modelc::rt::cuda {

class Context {
 public:
  // Retains device `ordinal`'s primary context and makes it current on this thread; throws
  // CudaError (or RuntimeError for an ordinal the driver does not have).
  Context(const Driver& driver, int ordinal);
  ~Context();
  Context(const Context&) = delete;
  Context& operator=(const Context&) = delete;

  // Makes the context current on the calling thread (each thread that calls the driver
  // for this device does this first).
  void make_current() const;
  void synchronize() const;
  const Driver& driver() const { return driver_; }
  const DeviceInfo& info() const { return info_; }

  // A non-blocking stream, owned by the caller (destroy_stream).
  CUstream create_stream() const;
  void destroy_stream(CUstream s) const noexcept;

 private:
  const Driver& driver_;
  DeviceInfo info_;
  CUdevice device_ = 0;
  CUcontext ctx_ = nullptr;
};

inline StreamId stream_id(CUstream s) { return reinterpret_cast<StreamId>(s); }
inline CUstream cu_stream(StreamId s) { return reinterpret_cast<CUstream>(s); }

}  // namespace modelc::rt::cuda
