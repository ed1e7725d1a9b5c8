// The hand kernels: one extern "C" entry point per body of kernels/cuda/bodies.h, each a
// grid-stride loop over [0, params.n) on a 1-D grid, taking its parameter block by value.
// nvcc compiles this file to PTX for compute_80 (kernels/cuda/hand_kernels.cmake); the
// runtime embeds the PTX and launches the entry points through the driver
// (kernels/cuda/launches.h names them). The names here and in launches.cc must agree:
// tests/cuda_kernels checks that the PTX has every entry point the ops launch.
#include "kernels/cuda/bodies.h"

using namespace modelc::kernels::cuda;

#define MODELC_GRID_LOOP(P, BODY)                                                                          \
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < (P).n;                 \
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)                                                  \
  BODY((P), i)

extern "C" __global__ void modelc_copy_u8(const CopyParams p) { MODELC_GRID_LOOP(p, copy_body<uint8_t>); }
extern "C" __global__ void modelc_copy_u16(const CopyParams p) { MODELC_GRID_LOOP(p, copy_body<uint16_t>); }
extern "C" __global__ void modelc_copy_u32(const CopyParams p) { MODELC_GRID_LOOP(p, copy_body<uint32_t>); }
extern "C" __global__ void modelc_fill_u8(const FillParams p) { MODELC_GRID_LOOP(p, fill_body<uint8_t>); }
extern "C" __global__ void modelc_fill_u16(const FillParams p) { MODELC_GRID_LOOP(p, fill_body<uint16_t>); }
extern "C" __global__ void modelc_fill_u32(const FillParams p) { MODELC_GRID_LOOP(p, fill_body<uint32_t>); }
extern "C" __global__ void modelc_embedding(const EmbeddingParams p) { MODELC_GRID_LOOP(p, embedding_body); }
extern "C" __global__ void modelc_embedding_grad(const EmbeddingParams p) { MODELC_GRID_LOOP(p, embedding_grad_body); }
extern "C" __global__ void modelc_max_pool2d(const PoolParams p) { MODELC_GRID_LOOP(p, pool_body<true>); }
extern "C" __global__ void modelc_avg_pool2d(const PoolParams p) { MODELC_GRID_LOOP(p, pool_body<false>); }
extern "C" __global__ void modelc_max_pool2d_grad(const PoolParams p) { MODELC_GRID_LOOP(p, pool_grad_body<true>); }
extern "C" __global__ void modelc_avg_pool2d_grad(const PoolParams p) { MODELC_GRID_LOOP(p, pool_grad_body<false>); }
extern "C" __global__ void modelc_epilogue(const EpilogueParams p) { MODELC_GRID_LOOP(p, epilogue_body); }
