// The slice of cuDNN 9 the runtime uses (the convolution API of libcudnn, forward and both
// gradients), declared here as runtime/device/cuda/driver_api.h does for the driver and loaded with
// dlopen; tests/cuda/driver_api_test.cc checks it against <cudnn.h> where the toolkit has it.
#pragma once

#include <cstddef>

#include "runtime/device/cuda/driver_api.h"

namespace modelc::rt::cuda::dnn {

using Status = int;  // cudnnStatus_t
struct Context;
struct TensorStruct;
struct FilterStruct;
struct ConvolutionStruct;
using Handle = Context*;
using TensorDesc = TensorStruct*;
using FilterDesc = FilterStruct*;
using ConvDesc = ConvolutionStruct*;

// cudnnConvolution{Fwd,BwdData,BwdFilter}AlgoPerf_t: the same layout for the three.
struct AlgoPerf {
  int algo;
  Status status;
  float time;
  size_t memory;
  int determinism;
  int mathType;
  int reserved[3];
};

inline constexpr Status kSuccess = 0;
inline constexpr int kTensorNCHW = 0;
inline constexpr int kDataFloat = 0, kDataHalf = 2, kDataBfloat16 = 9;
inline constexpr int kCrossCorrelation = 1;
inline constexpr int kDefaultMath = 0, kTensorOpMath = 1, kFmaMath = 3;

#define MODELC_CUDNN_FUNCTIONS(X)                                                                                      \
  X(cudnnGetVersion, size_t (*)())                                                                                     \
  X(cudnnGetErrorString, const char* (*)(Status))                                                                      \
  X(cudnnCreate, Status (*)(Handle*))                                                                                  \
  X(cudnnDestroy, Status (*)(Handle))                                                                                  \
  X(cudnnSetStream, Status (*)(Handle, CUstream))                                                                      \
  X(cudnnCreateTensorDescriptor, Status (*)(TensorDesc*))                                                              \
  X(cudnnSetTensor4dDescriptor, Status (*)(TensorDesc, int, int, int, int, int, int))                                 \
  X(cudnnDestroyTensorDescriptor, Status (*)(TensorDesc))                                                              \
  X(cudnnAddTensor, Status (*)(Handle, const void*, TensorDesc, const void*, const void*, TensorDesc, void*))          \
  X(cudnnCreateFilterDescriptor, Status (*)(FilterDesc*))                                                              \
  X(cudnnSetFilter4dDescriptor, Status (*)(FilterDesc, int, int, int, int, int, int))                                 \
  X(cudnnDestroyFilterDescriptor, Status (*)(FilterDesc))                                                              \
  X(cudnnCreateConvolutionDescriptor, Status (*)(ConvDesc*))                                                           \
  X(cudnnSetConvolution2dDescriptor, Status (*)(ConvDesc, int, int, int, int, int, int, int, int))                    \
  X(cudnnSetConvolutionGroupCount, Status (*)(ConvDesc, int))                                                          \
  X(cudnnSetConvolutionMathType, Status (*)(ConvDesc, int))                                                            \
  X(cudnnDestroyConvolutionDescriptor, Status (*)(ConvDesc))                                                           \
  X(cudnnGetConvolutionForwardAlgorithm_v7,                                                                            \
    Status (*)(Handle, TensorDesc, FilterDesc, ConvDesc, TensorDesc, int, int*, AlgoPerf*))                           \
  X(cudnnGetConvolutionForwardWorkspaceSize, Status (*)(Handle, TensorDesc, FilterDesc, ConvDesc, TensorDesc, int, size_t*)) \
  X(cudnnConvolutionForward, Status (*)(Handle, const void*, TensorDesc, const void*, FilterDesc, const void*, ConvDesc, \
                                        int, void*, size_t, const void*, TensorDesc, void*))                          \
  X(cudnnGetConvolutionBackwardDataAlgorithm_v7,                                                                       \
    Status (*)(Handle, FilterDesc, TensorDesc, ConvDesc, TensorDesc, int, int*, AlgoPerf*))                           \
  X(cudnnGetConvolutionBackwardDataWorkspaceSize,                                                                      \
    Status (*)(Handle, FilterDesc, TensorDesc, ConvDesc, TensorDesc, int, size_t*))                                   \
  X(cudnnConvolutionBackwardData, Status (*)(Handle, const void*, FilterDesc, const void*, TensorDesc, const void*,    \
                                             ConvDesc, int, void*, size_t, const void*, TensorDesc, void*))           \
  X(cudnnGetConvolutionBackwardFilterAlgorithm_v7,                                                                     \
    Status (*)(Handle, TensorDesc, TensorDesc, ConvDesc, FilterDesc, int, int*, AlgoPerf*))                           \
  X(cudnnGetConvolutionBackwardFilterWorkspaceSize,                                                                    \
    Status (*)(Handle, TensorDesc, TensorDesc, ConvDesc, FilterDesc, int, size_t*))                                   \
  X(cudnnConvolutionBackwardFilter, Status (*)(Handle, const void*, TensorDesc, const void*, TensorDesc, const void*,  \
                                               ConvDesc, int, void*, size_t, const void*, FilterDesc, void*))

struct Api {
#define MODELC_CUDNN_DECLARE(name, type) \
  using name##_fn = type;                \
  name##_fn name = nullptr;
  MODELC_CUDNN_FUNCTIONS(MODELC_CUDNN_DECLARE)
#undef MODELC_CUDNN_DECLARE
};

}  // namespace modelc::rt::cuda::dnn
