// The slice of the CUDA driver API the runtime uses, declared here rather than taken from
// <cuda.h> so that the runtime compiles, and says why it cannot use a GPU, on machines
// without the CUDA toolkit. The driver itself is loaded at run time (runtime/device/cuda/driver.h);
// nothing links libcuda. The types are the driver's ABI: handles are opaque pointers,
// CUdeviceptr is 64-bit, CUresult an int. tests/cuda/driver_api_test.cc checks every
// constant and signature here against <cuda.h> where the toolkit is installed.
#pragma once

#include <cstddef>
#include <cstdint>

namespace modelc::rt::cuda {

using CUresult = int;
using CUdevice = int;
using CUdeviceptr = unsigned long long;
struct CUctx_st;
struct CUmod_st;
struct CUfunc_st;
struct CUstream_st;
struct CUevent_st;
using CUcontext = CUctx_st*;
using CUmodule = CUmod_st*;
using CUfunction = CUfunc_st*;
using CUstream = CUstream_st*;
using CUevent = CUevent_st*;
using CUjit_option = int;

inline constexpr CUresult CUDA_SUCCESS = 0;
inline constexpr CUresult CUDA_ERROR_OUT_OF_MEMORY = 2;
inline constexpr CUresult CUDA_ERROR_NOT_INITIALIZED = 3;
inline constexpr CUresult CUDA_ERROR_NO_DEVICE = 100;
inline constexpr CUresult CUDA_ERROR_INVALID_DEVICE = 101;
inline constexpr CUresult CUDA_ERROR_INVALID_PTX = 218;
inline constexpr CUresult CUDA_ERROR_NOT_FOUND = 500;
inline constexpr CUresult CUDA_ERROR_NOT_READY = 600;

inline constexpr int CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT = 16;
inline constexpr int CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR = 75;
inline constexpr int CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR = 76;

inline constexpr CUjit_option CU_JIT_WALL_TIME = 2;
inline constexpr CUjit_option CU_JIT_INFO_LOG_BUFFER = 3;
inline constexpr CUjit_option CU_JIT_INFO_LOG_BUFFER_SIZE_BYTES = 4;
inline constexpr CUjit_option CU_JIT_ERROR_LOG_BUFFER = 5;
inline constexpr CUjit_option CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES = 6;
inline constexpr CUjit_option CU_JIT_LOG_VERBOSE = 12;

inline constexpr unsigned CU_STREAM_NON_BLOCKING = 0x1;
inline constexpr unsigned CU_EVENT_DISABLE_TIMING = 0x2;

// The entry points, by the symbol the driver exports (the _v2 names are what <cuda.h>'s
// macros map the plain names to).
#define MODELC_CUDA_DRIVER_FUNCTIONS(X)                                                            \
  X(cuGetErrorName, CUresult (*)(CUresult, const char**))                                         \
  X(cuGetErrorString, CUresult (*)(CUresult, const char**))                                       \
  X(cuInit, CUresult (*)(unsigned))                                                               \
  X(cuDriverGetVersion, CUresult (*)(int*))                                                       \
  X(cuDeviceGetCount, CUresult (*)(int*))                                                         \
  X(cuDeviceGet, CUresult (*)(CUdevice*, int))                                                    \
  X(cuDeviceGetName, CUresult (*)(char*, int, CUdevice))                                          \
  X(cuDeviceGetAttribute, CUresult (*)(int*, int, CUdevice))                                      \
  X(cuDeviceTotalMem_v2, CUresult (*)(size_t*, CUdevice))                                         \
  X(cuDevicePrimaryCtxRetain, CUresult (*)(CUcontext*, CUdevice))                                 \
  X(cuDevicePrimaryCtxRelease_v2, CUresult (*)(CUdevice))                                         \
  X(cuCtxSetCurrent, CUresult (*)(CUcontext))                                                     \
  X(cuCtxSynchronize, CUresult (*)())                                                             \
  X(cuMemGetInfo_v2, CUresult (*)(size_t*, size_t*))                                              \
  X(cuMemAlloc_v2, CUresult (*)(CUdeviceptr*, size_t))                                            \
  X(cuMemFree_v2, CUresult (*)(CUdeviceptr))                                                      \
  X(cuMemAllocHost_v2, CUresult (*)(void**, size_t))                                              \
  X(cuMemFreeHost, CUresult (*)(void*))                                                           \
  X(cuMemcpyHtoDAsync_v2, CUresult (*)(CUdeviceptr, const void*, size_t, CUstream))               \
  X(cuMemcpyDtoHAsync_v2, CUresult (*)(void*, CUdeviceptr, size_t, CUstream))                     \
  X(cuMemcpyDtoDAsync_v2, CUresult (*)(CUdeviceptr, CUdeviceptr, size_t, CUstream))               \
  X(cuMemsetD8Async, CUresult (*)(CUdeviceptr, unsigned char, size_t, CUstream))                  \
  X(cuModuleLoadDataEx, CUresult (*)(CUmodule*, const void*, unsigned, CUjit_option*, void**))    \
  X(cuModuleUnload, CUresult (*)(CUmodule))                                                       \
  X(cuModuleGetFunction, CUresult (*)(CUfunction*, CUmodule, const char*))                        \
  X(cuLaunchKernel, CUresult (*)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned,   \
                                 unsigned, unsigned, CUstream, void**, void**))                   \
  X(cuStreamCreate, CUresult (*)(CUstream*, unsigned))                                            \
  X(cuStreamDestroy_v2, CUresult (*)(CUstream))                                                   \
  X(cuStreamSynchronize, CUresult (*)(CUstream))                                                  \
  X(cuStreamWaitEvent, CUresult (*)(CUstream, CUevent, unsigned))                                 \
  X(cuEventCreate, CUresult (*)(CUevent*, unsigned))                                              \
  X(cuEventDestroy_v2, CUresult (*)(CUevent))                                                     \
  X(cuEventRecord, CUresult (*)(CUevent, CUstream))                                               \
  X(cuEventQuery, CUresult (*)(CUevent))                                                          \
  X(cuEventSynchronize, CUresult (*)(CUevent))                                                    \
  X(cuEventElapsedTime, CUresult (*)(float*, CUevent, CUevent))

// One pointer per entry point, filled by Driver (runtime/device/cuda/driver.cc).
struct DriverApi {
#define MODELC_CUDA_DECLARE(name, type) \
  using name##_fn = type;               \
  name##_fn name = nullptr;
  MODELC_CUDA_DRIVER_FUNCTIONS(MODELC_CUDA_DECLARE)
#undef MODELC_CUDA_DECLARE
};

}  // namespace modelc::rt::cuda
