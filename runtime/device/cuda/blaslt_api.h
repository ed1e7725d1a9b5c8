// The slice of cuBLASLt the runtime uses, declared here (as runtime/device/cuda/driver_api.h does for
// the driver) and loaded with dlopen, so that the runtime neither links nor needs cuBLAS to
// build; tests/cuda/blaslt_api_test.cc checks it against <cublasLt.h> where the toolkit is.
#pragma once

#include <cstddef>
#include <cstdint>

#include "runtime/device/cuda/driver_api.h"

namespace modelc::rt::cuda::lt {

using Status = int;  // cublasStatus_t
struct Handle_st;
struct MatmulDesc_st;
struct MatrixLayout_st;
struct MatmulPreference_st;
using Handle = Handle_st*;
using MatmulDesc = MatmulDesc_st*;
using MatrixLayout = MatrixLayout_st*;
using MatmulPreference = MatmulPreference_st*;
struct MatmulAlgo {
  uint64_t data[8];
};
struct HeuristicResult {
  MatmulAlgo algo;
  size_t workspaceSize;
  Status state;
  float wavesCount;
  int reserved[4];
};

inline constexpr Status kSuccess = 0;
// cudaDataType_t
inline constexpr int kR32F = 0, kR16F = 2, kR16BF = 14;
// cublasComputeType_t
inline constexpr int kCompute32F = 68, kCompute32FFastTF32 = 77;
// cublasLtMatmulDescAttributes_t
inline constexpr int kDescComputeType = 0, kDescScaleType = 1, kDescTransA = 3, kDescEpilogue = 7, kDescBiasPointer = 8,
                     kDescBiasDataType = 26;
// cublasLtEpilogue_t
inline constexpr uint32_t kEpilogueDefault = 1, kEpilogueBias = 4;
// cublasLtMatrixLayoutAttribute_t
inline constexpr int kLayoutBatchCount = 5, kLayoutStridedBatchOffset = 6;
// cublasLtMatmulPreferenceAttributes_t
inline constexpr int kPrefMaxWorkspaceBytes = 1;

#define MODELC_CUBLASLT_FUNCTIONS(X)                                                                                   \
  X(cublasLtCreate, Status (*)(Handle*))                                                                               \
  X(cublasLtDestroy, Status (*)(Handle))                                                                               \
  X(cublasLtGetStatusName, const char* (*)(Status))                                                                    \
  X(cublasLtGetStatusString, const char* (*)(Status))                                                                  \
  X(cublasLtGetVersion, size_t (*)())                                                                                  \
  X(cublasLtMatmulDescCreate, Status (*)(MatmulDesc*, int, int))                                                       \
  X(cublasLtMatmulDescDestroy, Status (*)(MatmulDesc))                                                                 \
  X(cublasLtMatmulDescSetAttribute, Status (*)(MatmulDesc, int, const void*, size_t))                                  \
  X(cublasLtMatrixLayoutCreate, Status (*)(MatrixLayout*, int, uint64_t, uint64_t, int64_t))                           \
  X(cublasLtMatrixLayoutDestroy, Status (*)(MatrixLayout))                                                             \
  X(cublasLtMatrixLayoutSetAttribute, Status (*)(MatrixLayout, int, const void*, size_t))                              \
  X(cublasLtMatmulPreferenceCreate, Status (*)(MatmulPreference*))                                                     \
  X(cublasLtMatmulPreferenceDestroy, Status (*)(MatmulPreference))                                                     \
  X(cublasLtMatmulPreferenceSetAttribute, Status (*)(MatmulPreference, int, const void*, size_t))                      \
  X(cublasLtMatmulAlgoGetHeuristic, Status (*)(Handle, MatmulDesc, MatrixLayout, MatrixLayout, MatrixLayout,          \
                                                MatrixLayout, MatmulPreference, int, HeuristicResult*, int*))           \
  X(cublasLtMatmul, Status (*)(Handle, MatmulDesc, const void*, const void*, MatrixLayout, const void*, MatrixLayout,  \
                               const void*, const void*, MatrixLayout, void*, MatrixLayout, const MatmulAlgo*, void*,  \
                               size_t, CUstream))

struct Api {
#define MODELC_CUBLASLT_DECLARE(name, type) \
  using name##_fn = type;                   \
  name##_fn name = nullptr;
  MODELC_CUBLASLT_FUNCTIONS(MODELC_CUBLASLT_DECLARE)
#undef MODELC_CUBLASLT_DECLARE
};

}  // namespace modelc::rt::cuda::lt
