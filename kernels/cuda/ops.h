// Running the hand kernels on a GPU: one launch, and one whole library op (the function the
// CUDA library table holds for every op of kernels/cuda/launches.h's hand_kernel_ops, when
// the runtime was built with nvcc).
#pragma once

#include "kernels/cuda/launches.h"
#include "kernels/cuda/library.h"

namespace modelc::kernels::cuda {

// Issues launch `l` on c's device (its hand-kernel module) and stream: blocks of 256
// threads, a grid of at most 32 blocks per multiprocessor (the kernels loop over the rest).
void launch(const rt::cuda::CudaLibCall& c, const Launch& l);

// Checks and runs library op c.call.op (asynchronously; an embedding op checks its ids as
// kernels/cuda/errors.h says). Throws RuntimeError or CudaError.
void run_hand_kernel_op(const rt::cuda::CudaLibCall& c);

}  // namespace modelc::kernels::cuda
