// cumsum planned once for every device: the operands' checks (with the messages users see)
// and the geometry of the scan. The CPU twin (kernels/cpu/cumsum.cc) and the CUDA op
// (kernels/cuda/launches.cc) both start from plan_cumsum, so the messages are the same word
// for word.
//
// cumsum(x) -> out of x's shape and type (f32, f16 or bf16); ints["axis"] = {a} with
// 0 <= a < rank (the compiler normalises it), ints["reverse"] = {0 or 1} (absent: 0).
// Viewing x as [outer, len, inner] with len the axis' extent, out[o, i, k] is the sum of
// x[o, j, k] over j <= i (reverse: j >= i), added one term at a time in f32 in that order
// (f16/bf16 terms widened exactly) and rounded once to the output's type. Every device sums
// in this order, so the results are the same bit for bit.
#pragma once

#include <cstdint>

#include "kernels/cpu/library.h"

namespace modelc::kernels {

struct CumsumPlan {
  int64_t outer = 0, len = 0, inner = 0;  // lines: outer * inner, each len terms apart by inner
  bool reverse = false;
  ElemType type = ElemType::F32;
};

// Checks call `c` of cumsum and returns its geometry. Throws RuntimeError (LibCall::fail).
CumsumPlan plan_cumsum(const LibCall& c);

// The CPU kernel (kernels/library_ops.def): the lines split over the pool.
void cumsum_cpu(const LibCall& c);

}  // namespace modelc::kernels
