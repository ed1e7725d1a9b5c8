// The CUDA backend (runtime/execution/backend.h): one GPU (runtime/device/cuda/cuda_device.h),
// the device copies of the parameters and optimizer state (uploaded from the caller's store
// when the backend is made; the store then holds the initial values and serves as the host
// staging area of write_persistent), and one CUDA executor per function
// (runtime/execution/cuda/executor.h), made on first use. A run is launched by start() and
// waited for by its finish(), so several may be in flight.
//
// Memory: the device copies of the persistent buffers come from the device's caching
// allocator too; memory_usage() takes them out of its peak, as the caller counts its store.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "runtime/device/cuda/cuda_device.h"
#include "runtime/execution/backend.h"
#include "runtime/execution/cuda/executor.h"

namespace modelc::rt::cuda {

class CudaBackend final : public Backend {
 public:
  // Opens device `ordinal` and uploads every Param and State buffer of `persistent`.
  CudaBackend(const Program& program, const Driver& driver, int ordinal, const std::vector<HostTensor>& persistent,
              bool allow_tf32);
  // Destroys the executors, then frees the device copies, then closes the device.
  ~CudaBackend() override;

  std::unique_ptr<BackendRun> start(const Function& fn, std::span<const HostTensor* const> feeds,
                                    const std::map<std::string, int64_t>& symbols) override;
  HostTensor read_persistent(uint32_t b) const override;
  void write_persistent(uint32_t b) override { upload(b); }
  MemoryUsage memory_usage() const override;
  std::string memory_summary() const override;
  void reset_peak_memory() override;
  void set_profiling(bool on) override;
  std::vector<InstrTime> profile(const std::string& fn) const override;
  std::string description() const override;
  bool is_cuda() const override { return true; }

 private:
  void upload(uint32_t b);
  void release();

  const Program& program_;
  const std::vector<HostTensor>& store_;  // the caller's: the staging area of upload()
  CudaDevice device_;                     // declared first: destroyed last
  std::vector<DeviceTensor> persistent_;  // by buffer id
  std::map<std::string, std::unique_ptr<CudaExecutor>> executors_;  // by function name
  bool profiling_ = false;
};

}  // namespace modelc::rt::cuda
