// The bias-and-activation epilogue on the GPU, for the matmul and convolution ops when
// cuBLASLt or cuDNN cannot apply it themselves: out[r, j, k] = act(out[r, j, k] + bias[j])
// for r < rows, j < L, k < inner (matmul: [rows, L] with inner = 1; an NCHW convolution:
// rows = N, L = C, inner = H * W), in place, computed in f32 and rounded back to the output's type (f32,
// f16 or bf16). The numerics are the CPU epilogue's (kernels/cpu/epilogue.h): the same
// operations in the same order, so the results agree bit for bit except gelu's erf form
// (the device's erff, within 2 ulp of glibc's). Asynchronous on c.stream.
#pragma once

#include <cstdint>

#include "kernels/cuda/library.h"

namespace modelc::kernels::cuda {

// `out` and `bias` are device addresses; `bias` may be null (no bias). Throws RuntimeError
// for another output type or an unknown activation; does nothing for an empty epilogue.
void cuda_epilogue(const rt::cuda::CudaLibCall& c, void* out, ElemType type, const float* bias, rt::EpilogueActivation act,
                   int64_t rows, int64_t L, int64_t inner = 1);

}  // namespace modelc::kernels::cuda
