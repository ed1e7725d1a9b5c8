// One library op on host tensors, three ways, for tests that compare them: on a GPU through
// the CUDA library table (the CudaLibCall path the executor takes), on the host through the
// GPU kernels' own launches and bodies (run_on_host: the index math of the GPU kernels, in
// CI), and through the CPU twin (kernels/cpu/library.h). The operands are the same host
// tensors each way: `inputs` are read; `outputs` give each output's type and shape and are
// overwritten with the result.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "runtime/base/tensor.h"

namespace modelc::rt::cuda {
class CudaDevice;
}

namespace modelc::kernels::cuda {

using OpInts = std::map<std::string, std::vector<int64_t>>;
using OpFloats = std::map<std::string, double>;
// An instruction's evaluated size table: [$seed, $step] for an op that draws random numbers.
using OpSizes = std::vector<int64_t>;

// Copies the operands to `device`, runs the op's CUDA implementation (find_cuda_library_op)
// on the device's stream, synchronizes, checks kernel errors (kernels/cuda/errors.h) and
// copies the outputs back. RuntimeError when the op has no CUDA implementation or fails.
void run_cuda_op(rt::cuda::CudaDevice& device, const std::string& op, const std::vector<const rt::HostTensor*>& inputs,
                 std::vector<rt::HostTensor>& outputs, const OpInts& ints = {}, const OpFloats& floats = {},
                 const OpSizes& sizes = {});

// The op's CUDA launches (plan_launches) run by run_on_host on the operands in place; an
// id out of range is reported as the GPU path reports it.
void run_emulated_op(const std::string& op, const std::vector<const rt::HostTensor*>& inputs,
                     std::vector<rt::HostTensor>& outputs, const OpInts& ints = {}, const OpFloats& floats = {},
                     const OpSizes& sizes = {});

// The CPU twin, on a pool of `threads` threads.
void run_cpu_op(const std::string& op, const std::vector<const rt::HostTensor*>& inputs, std::vector<rt::HostTensor>& outputs,
                const OpInts& ints = {}, const OpFloats& floats = {}, int threads = 2, const OpSizes& sizes = {});

// The location run_*_op put in messages: "test.model:1:1".
inline constexpr const char* kRunOpWhere = "test.model:1:1";

}  // namespace modelc::kernels::cuda
