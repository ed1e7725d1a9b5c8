// The CUDA library ops: the opaque instructions of a Program (matmul, convolution, pooling,
// embedding, data movement, fill) on a GPU. Each op is one entry in a table keyed by the
// IR's op name, beside its CPU twin in kernels/cpu/library.h: matmul through cuBLASLt
// (kernels/cuda/blaslt.cc), convolutions through cuDNN (kernels/cuda/dnn.cc), the rest hand
// kernels in kernels/cuda/. A call is the CPU's LibCall (kernels/cpu/library.h) whose tensor
// data are device addresses, plus the device and the stream to run on; ops run
// asynchronously on that stream.
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
using CudaLibraryTable = std::map<std::string, CudaLibraryFn>;

// The op's CUDA function, or nullptr when the op has none.
CudaLibraryFn find_cuda_library_op(const std::string& name);
std::vector<std::string> cuda_library_op_names();

// The PTX of the hand kernels in kernels/cuda/ (nvcc compiles them for compute_80 at build
// time; the runtime loads it as a second module), or "" when the runtime was built without
// nvcc. Their entry points take their own parameters (Module::launch_raw).
const char* hand_kernels_ptx();

// "cuBLASLt 130100 (libcublasLt.so.13)" / "cuDNN 91900 (libcudnn.so.9)", or why the library
// cannot be loaded.
std::string blaslt_status();
std::string dnn_status();

// Registration hooks of the op families.
void register_cuda_matmul_ops(CudaLibraryTable& t);  // kernels/cuda/blaslt.cc
void register_cuda_dnn_ops(CudaLibraryTable& t);     // kernels/cuda/dnn.cc
void register_cuda_kernel_ops(CudaLibraryTable& t);  // kernels/cuda/ (movement, fill, embedding, pooling)

}  // namespace modelc::rt::cuda
