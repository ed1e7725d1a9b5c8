// runtime/device/cuda/driver_api.h declares the driver's ABI itself; this checks its constants
// against the toolkit's <cuda.h> where the toolkit is installed (at compile time).
#include <gtest/gtest.h>

#include "runtime/device/cuda/driver_api.h"

#if MODELC_HAVE_CUDA_H
#include <cuda.h>

#include <cstddef>

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

TEST(CudaDriverApi, MatchesTheToolkitsHeader) { SUCCEED() << "checked at compile time against <cuda.h>"; }

// cuBLASLt (runtime/device/cuda/blaslt_api.h) against <cublasLt.h>.
#include <cublasLt.h>

#include "runtime/device/cuda/blaslt_api.h"
namespace lt = modelc::rt::cuda::lt;
static_assert(lt::kR32F == CUDA_R_32F && lt::kR16F == CUDA_R_16F && lt::kR16BF == CUDA_R_16BF);
static_assert(lt::kCompute32F == CUBLAS_COMPUTE_32F && lt::kCompute32FFastTF32 == CUBLAS_COMPUTE_32F_FAST_TF32);
static_assert(lt::kDescComputeType == CUBLASLT_MATMUL_DESC_COMPUTE_TYPE && lt::kDescScaleType == CUBLASLT_MATMUL_DESC_SCALE_TYPE);
static_assert(lt::kDescTransA == CUBLASLT_MATMUL_DESC_TRANSA && lt::kDescEpilogue == CUBLASLT_MATMUL_DESC_EPILOGUE);
static_assert(lt::kDescBiasPointer == CUBLASLT_MATMUL_DESC_BIAS_POINTER &&
              lt::kDescBiasDataType == CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE);
static_assert(lt::kEpilogueDefault == CUBLASLT_EPILOGUE_DEFAULT && lt::kEpilogueBias == CUBLASLT_EPILOGUE_BIAS);
static_assert(lt::kLayoutBatchCount == CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT &&
              lt::kLayoutStridedBatchOffset == CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET);
static_assert(lt::kPrefMaxWorkspaceBytes == CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES);
static_assert(lt::kSuccess == CUBLAS_STATUS_SUCCESS);
static_assert(sizeof(lt::MatmulAlgo) == sizeof(cublasLtMatmulAlgo_t));
static_assert(sizeof(lt::HeuristicResult) == sizeof(cublasLtMatmulHeuristicResult_t));
static_assert(offsetof(lt::HeuristicResult, workspaceSize) == offsetof(cublasLtMatmulHeuristicResult_t, workspaceSize));
static_assert(offsetof(lt::HeuristicResult, state) == offsetof(cublasLtMatmulHeuristicResult_t, state));
#define MODELC_CHECK_LT(name, type) static_assert(arity(lt::Api::name##_fn{}) == arity(&::name), #name);
MODELC_CUBLASLT_FUNCTIONS(MODELC_CHECK_LT)

// cuDNN (runtime/device/cuda/dnn_api.h) against <cudnn.h>, when the toolkit has it.
#if __has_include(<cudnn.h>)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"  // the convolution API is deprecated in cuDNN 9
#include <cudnn.h>

#include "runtime/device/cuda/dnn_api.h"
namespace dnn = modelc::rt::cuda::dnn;
static_assert(dnn::kSuccess == CUDNN_STATUS_SUCCESS && dnn::kTensorNCHW == CUDNN_TENSOR_NCHW);
static_assert(dnn::kDataFloat == CUDNN_DATA_FLOAT && dnn::kDataHalf == CUDNN_DATA_HALF &&
              dnn::kDataBfloat16 == CUDNN_DATA_BFLOAT16);
static_assert(dnn::kCrossCorrelation == CUDNN_CROSS_CORRELATION);
static_assert(dnn::kDefaultMath == CUDNN_DEFAULT_MATH && dnn::kTensorOpMath == CUDNN_TENSOR_OP_MATH &&
              dnn::kFmaMath == CUDNN_FMA_MATH);
static_assert(sizeof(dnn::AlgoPerf) == sizeof(cudnnConvolutionFwdAlgoPerf_t) &&
              sizeof(dnn::AlgoPerf) == sizeof(cudnnConvolutionBwdDataAlgoPerf_t) &&
              sizeof(dnn::AlgoPerf) == sizeof(cudnnConvolutionBwdFilterAlgoPerf_t));
static_assert(offsetof(dnn::AlgoPerf, memory) == offsetof(cudnnConvolutionFwdAlgoPerf_t, memory));
static_assert(offsetof(dnn::AlgoPerf, status) == offsetof(cudnnConvolutionBwdFilterAlgoPerf_t, status));
#define MODELC_CHECK_DNN(name, type) static_assert(arity(dnn::Api::name##_fn{}) == arity(&::name), #name);
MODELC_CUDNN_FUNCTIONS(MODELC_CHECK_DNN)
#pragma GCC diagnostic pop
#endif
#else
TEST(CudaDriverApi, MatchesTheToolkitsHeader) { GTEST_SKIP() << "no CUDA toolkit: <cuda.h> is not there to compare with"; }
#endif
