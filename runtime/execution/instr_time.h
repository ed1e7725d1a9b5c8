// The figures of one instruction in a function's profile (Backend::profile): only the CUDA
// backend measures them (CudaExecutor::set_profiling), but the Backend interface names the
// type, so it lives apart from the CUDA executor.
#pragma once

#include <cstdint>
#include <string>

namespace modelc::rt::cuda {

// The time one instruction of a function took on the GPU (CudaExecutor::set_profiling).
struct InstrTime {
  std::string name;   // the codelet's name, or the library op's
  std::string where;  // the source location
  double ms = 0;      // total over the runs
  int64_t runs = 0;
  int64_t bytes = 0;  // read and written by one run (inputs + outputs at the last layout)
  bool codelet = false;  // a generated codelet (else a library op)
  uint32_t nodes = 1;  // IR nodes fused into the codelet
};

}  // namespace modelc::rt::cuda
