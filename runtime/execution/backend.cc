// Choosing the backend: the device spec, the driver's devices, and whether the program can
// run on CUDA.
#include "runtime/execution/backend.h"

#include <fmt/format.h>

#include "runtime/base/error.h"
#include "runtime/device/cuda/device.h"
#include "runtime/device/cuda/driver.h"
#include "runtime/execution/cpu/cpu_backend.h"
#include "runtime/execution/cuda/cuda_backend.h"

namespace modelc::rt {

std::unique_ptr<Backend> make_backend(const Program& program, std::vector<HostTensor>& persistent, ThreadPool& pool,
                                      const BackendOptions& options, std::string& note) {
  auto cpu = [&] { return std::make_unique<CpuBackend>(program, persistent, pool, options.arena, options.memory_limit,
                                                      options.flush_subnormals); };
  const cuda::DeviceSpec spec = cuda::parse_device(options.device);
  if (spec.kind == cuda::DeviceSpec::Kind::Cpu) return cpu();
  const cuda::Driver& driver = cuda::Driver::instance();
  cuda::DeviceChoice choice = cuda::choose_device(spec, driver);  // an explicit cuda that cannot be used throws
  std::string why = choice.cuda ? cuda::cuda_unsupported(program) : choice.reason;
  if (!why.empty()) {
    if (spec.kind == cuda::DeviceSpec::Kind::Cuda)
      throw RuntimeError(fmt::format("model '{}' cannot run on {}: {}", program.model, spec.str(), why));
    note = why;
    return cpu();
  }
  return std::make_unique<cuda::CudaBackend>(program, driver, choice.device->ordinal, persistent, options.allow_tf32);
}

}  // namespace modelc::rt
