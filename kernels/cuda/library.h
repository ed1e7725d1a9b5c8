// The CUDA library ops: the opaque instructions of a Program (matmul, convolution, pooling,
// embedding, data movement, fill, cumsum) on a GPU. Each op is one entry in a table keyed by
// the IR's op name, read from kernels/library_ops.def beside its CPU twin
// (kernels/cpu/library.h): matmul through cuBLASLt (kernels/cuda/blaslt.cc), convolutions
// through cuDNN (kernels/cuda/dnn.cc), the rest hand kernels in kernels/cuda/. A call is the
// CPU's LibCall (kernels/cpu/library.h) whose tensor data are device addresses, plus the
// device and the stream to run on; ops run asynchronously on that stream.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "kernels/cpu/library.h"
#include "runtime/device/cuda/driver_api.h"

namespace modelc::rt::cuda {

class CudaDevice;

struct CudaLibCall {
  kernels::LibCall call;  // TensorArg::data: device addresses; pool: null
  CudaDevice* device = nullptr;
  CUstream stream = nullptr;
};

using CudaLibraryFn = void (*)(const CudaLibCall&);

// The op's CUDA function, or nullptr when the op has none: every op of
// kernels/library_ops.def has one, except that the hand-kernel ops (MODELC_CUDA_HAND) are
// registered only when the runtime was built with nvcc (hand_kernels_ptx() is not "").
CudaLibraryFn find_cuda_library_op(const std::string& name);
// The names find_cuda_library_op knows (sorted).
std::vector<std::string> cuda_library_op_names();

// The PTX of the hand kernels in kernels/cuda/ (nvcc compiles them for compute_80 at build
// time; the runtime loads it as a second module), or "" when the runtime was built without
// nvcc. Their entry points take their own parameters (Module::launch_raw).
const char* hand_kernels_ptx();

// "cuBLASLt 130100 (libcublasLt.so.13)" / "cuDNN 91900 (libcudnn.so.9)", or why the library
// cannot be loaded.
std::string blaslt_status();
std::string dnn_status();

}  // namespace modelc::rt::cuda
