// The hand kernels: one extern "C" entry point per line of kernels/cuda/hand_kernels.def,
// each a grid-stride loop of its body (kernels/cuda/bodies.h) over [0, params.n) on a 1-D
// grid, taking its parameter block by value. nvcc compiles this file to PTX for compute_80
// (kernels/cuda/hand_kernels.cmake); the runtime embeds the PTX and launches the entry points
// through the driver by the names launches.cc reads from the same .def, so they agree by
// construction (tests/cuda_kernels checks that the PTX has every entry point).
#include "kernels/cuda/bodies.h"

using namespace modelc::kernels::cuda;

#define MODELC_GRID_LOOP(P, BODY)                                                                          \
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < (P).n;                 \
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)                                                  \
  BODY((P), i)

#define MODELC_HAND_KERNEL(kernel, entry, Params, body) \
  extern "C" __global__ void entry(const Params p) { MODELC_GRID_LOOP(p, body); }
#include "kernels/cuda/hand_kernels.def"
