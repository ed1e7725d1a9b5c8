// A Program's GPU code on a device: its PTX loaded as one module (the driver's JIT compiles
// it for the device; its error and info logs are kept), kernels found by name and launched
// with the configuration the compiler chose (the GPU ABI in runtime/base/program.h).
#pragma once

#include <cstdint>
#include <string>
#include <unordered_map>

#include "runtime/device/cuda/context.h"
#include "runtime/base/program.h"

namespace modelc::rt::cuda {

// The grid of a launch over n = end - begin work items, as the ABI in runtime/base/program.h
// sets it: Thread: min(ceil(n / (4 * block)), 32 * SMs); Block: min(n, 32 * SMs); at least 1.
uint32_t launch_grid(GpuMapping mapping, uint32_t block, int64_t n, int multiprocessors);

// Checks that PTX compiled for `target` ("sm_80") can run on `device` (PTX for sm_XY runs on
// compute capability X.Y and later); throws RuntimeError saying which target to compile for.
void check_target(const std::string& target, const DeviceInfo& device);

class Module {
 public:
  // JIT-compiles `ptx` for the context's device. On failure throws CudaError whose message
  // holds the driver's error and the JIT's error log.
  Module(const Context& ctx, const std::string& ptx, const std::string& target);
  ~Module();
  Module(const Module&) = delete;
  Module& operator=(const Module&) = delete;

  // The entry point `name`; throws RuntimeError naming it when the module lacks it.
  CUfunction function(const std::string& name);
  // What the JIT said when it succeeded (often empty), and how long it took.
  const std::string& info_log() const { return info_log_; }
  float jit_ms() const { return jit_ms_; }

  // Launches kernel `k` over work items [begin, end) with the ABI's four parameters.
  void launch(const CodeletDesc& k, CUdeviceptr buffers, CUdeviceptr sizes, int64_t begin, int64_t end, CUstream stream);
  // Launches entry point `name` (a hand kernel with its own parameters: `params` points at
  // each parameter's value, as cuLaunchKernel takes them) on a 1-D grid.
  void launch_raw(const std::string& name, uint32_t grid, uint32_t block, void** params, CUstream stream);

 private:
  const Context& ctx_;
  CUmodule module_ = nullptr;
  std::string info_log_;
  float jit_ms_ = 0;
  std::unordered_map<std::string, CUfunction> functions_;
};

}  // namespace modelc::rt::cuda
