// runtime/cuda/driver_api.h declares the driver's ABI itself; this checks its constants
// against the toolkit's <cuda.h> where the toolkit is installed (at compile time).
#include <gtest/gtest.h>

#include "runtime/cuda/driver_api.h"

#if MODELC_HAVE_CUDA_H
#include <cuda.h>

namespace mc = modelc::rt::cuda;
static_assert(mc::CUDA_SUCCESS == ::CUDA_SUCCESS);
static_assert(mc::CUDA_ERROR_OUT_OF_MEMORY == ::CUDA_ERROR_OUT_OF_MEMORY);
static_assert(mc::CUDA_ERROR_NOT_INITIALIZED == ::CUDA_ERROR_NOT_INITIALIZED);
static_assert(mc::CUDA_ERROR_NO_DEVICE == ::CUDA_ERROR_NO_DEVICE);
static_assert(mc::CUDA_ERROR_INVALID_DEVICE == ::CUDA_ERROR_INVALID_DEVICE);
static_assert(mc::CUDA_ERROR_INVALID_PTX == ::CUDA_ERROR_INVALID_PTX);
static_assert(mc::CUDA_ERROR_NOT_FOUND == ::CUDA_ERROR_NOT_FOUND);
static_assert(mc::CUDA_ERROR_NOT_READY == ::CUDA_ERROR_NOT_READY);
static_assert(mc::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT == ::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT);
static_assert(mc::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR == ::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR);
static_assert(mc::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR == ::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR);
static_assert(mc::CU_JIT_WALL_TIME == ::CU_JIT_WALL_TIME);
static_assert(mc::CU_JIT_INFO_LOG_BUFFER == ::CU_JIT_INFO_LOG_BUFFER);
static_assert(mc::CU_JIT_INFO_LOG_BUFFER_SIZE_BYTES == ::CU_JIT_INFO_LOG_BUFFER_SIZE_BYTES);
static_assert(mc::CU_JIT_ERROR_LOG_BUFFER == ::CU_JIT_ERROR_LOG_BUFFER);
static_assert(mc::CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES == ::CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES);
static_assert(mc::CU_JIT_LOG_VERBOSE == ::CU_JIT_LOG_VERBOSE);
static_assert(mc::CU_STREAM_NON_BLOCKING == ::CU_STREAM_NON_BLOCKING);
static_assert(mc::CU_EVENT_DISABLE_TIMING == ::CU_EVENT_DISABLE_TIMING);
static_assert(sizeof(mc::CUdeviceptr) == sizeof(::CUdeviceptr));
static_assert(sizeof(mc::CUresult) == sizeof(::CUresult));
static_assert(sizeof(mc::CUdevice) == sizeof(::CUdevice));
// Each entry point exists in <cuda.h> under the name the runtime loads, with as many
// parameters as the runtime passes.
template <typename R, typename... A>
constexpr size_t arity(R (*)(A...)) { return sizeof...(A); }
#define MODELC_CHECK_ENTRY(name, type) \
  static_assert(arity(static_cast<type>(nullptr)) == arity(&::name), #name);
MODELC_CUDA_DRIVER_FUNCTIONS(MODELC_CHECK_ENTRY)
#undef MODELC_CHECK_ENTRY

TEST(CudaDriverApi, MatchesTheToolkitsHeader) { SUCCEED() << "checked at compile time against <cuda.h>"; }
#else
TEST(CudaDriverApi, MatchesTheToolkitsHeader) { GTEST_SKIP() << "no CUDA toolkit: <cuda.h> is not there to compare with"; }
#endif
