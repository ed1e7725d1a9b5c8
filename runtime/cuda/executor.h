// The CUDA executor: runs one Function of a Program on a GPU, the twin of the CPU executor
// (runtime/cpu/executor.h). Binding and layout are the shared FunctionLayout's; then, for
// each run: the arena of temps and outputs, the fed inputs and a table block are taken from
// the device's caching allocator; the inputs are copied up; each kernel instruction gets its
// buffer-address and size tables (the GPU ABI in runtime/program.h) in the table block, which
// is copied up once per run; instructions are issued in order on the device's stream
// (kernels from the Program's PTX module with the configuration the compiler chose, library
// ops through runtime/cuda/library.h); updates are device-to-device copies; outputs are
// copied back, and the run ends when the stream is idle. Parameters and optimizer state
// live on the device in the caller's DeviceTensors, indexed by buffer id.
#pragma once

#include <cstdint>
#include <map>
#include <span>
#include <string>
#include <vector>

#include "runtime/cuda/driver_api.h"
#include "runtime/function_layout.h"
#include "runtime/program.h"
#include "runtime/tensor.h"

namespace modelc::rt::cuda {

class CudaDevice;

// A tensor in device memory (from the device's caching allocator).
struct DeviceTensor {
  ElemType type = ElemType::F32;
  std::vector<int64_t> shape;
  void* data = nullptr;  // a device address
  size_t bytes() const;
};

// Why `program` cannot run on CUDA ("" when it can): it has kernels but no GPU code, or a
// library op without a CUDA implementation.
std::string cuda_unsupported(const Program& program);

// The time one instruction of a function took on the GPU (CudaExecutor::set_profiling).
struct InstrTime {
  std::string name;   // the kernel's name, or the library op's
  std::string where;  // the source location
  double ms = 0;      // total over the runs
  int64_t runs = 0;
  int64_t bytes = 0;  // read and written by one run (inputs + outputs at the last layout)
  bool kernel = false;
  uint32_t nodes = 1;  // IR nodes fused into the kernel
};

class CudaExecutor {
 public:
  // `persistent` is indexed by buffer id and must hold a DeviceTensor for every Param and
  // State buffer the function touches, and outlive the executor. Checks the function (as
  // the CPU executor does, plus: the Program has PTX when it has kernels, and every library
  // op has a CUDA implementation) and throws RuntimeError naming what is wrong.
  CudaExecutor(const Program& program, const Function& fn, CudaDevice& device, std::vector<DeviceTensor>& persistent);
  ~CudaExecutor();
  CudaExecutor(const CudaExecutor&) = delete;
  CudaExecutor& operator=(const CudaExecutor&) = delete;

  // As Executor::run: feeds in Function::feeds order, named symbol values; returns the
  // outputs by name, on the host.
  std::map<std::string, HostTensor> run(std::span<const HostTensor* const> feeds,
                                        const std::map<std::string, int64_t>& symbols);

  // Per-instruction timing with CUDA events (off by default: it adds two event records per
  // instruction). The figures accumulate over the runs since it was turned on.
  void set_profiling(bool on);
  const std::vector<InstrTime>& profile() const { return profile_; }

  const Function& function() const { return layout_.function(); }
  int64_t layouts() const { return layout_.layouts(); }
  int64_t arena_bytes() const { return arena_bytes_; }
  int64_t planned_arena_bytes() const { return layout_.plan().size; }

 private:
  void prepare_tables();

  const Program& program_;
  const Function& fn_;
  CudaDevice& device_;
  std::vector<DeviceTensor>& persistent_;
  FunctionLayout layout_;
  std::vector<size_t> table_offset_;  // per instruction: byte offset of its tables (kernels)
  size_t table_bytes_ = 0;
  int64_t arena_bytes_ = 0;
  bool profiling_ = false;
  std::vector<CUevent> events_;  // two per instruction while profiling
  std::vector<InstrTime> profile_;
};

}  // namespace modelc::rt::cuda
