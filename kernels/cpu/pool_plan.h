// Pooling planned once for every device: the window geometry of max_pool2d, avg_pool2d and
// their gradients, read from the attributes and checked against the operands (arity,
// types, shapes, with the messages users see). The CPU twin (kernels/cpu/pool.cc) and the
// CUDA ops (kernels/cuda/) both start from plan_pool.
#pragma once

#include <cstdint>

#include "kernels/cpu/library.h"

namespace modelc::kernels {

// An NCHW image [N, C, H, W] pooled to [N, C, HO, WO] by a kh x kw window moved by sh x sw
// over the image padded by ph x pw on each side.
struct PoolWindow {
  int64_t kh = 0, kw = 0, sh = 0, sw = 0, ph = 0, pw = 0;
  int64_t N = 0, C = 0, H = 0, W = 0, HO = 0, WO = 0;
};

enum class PoolOp : uint8_t { MaxPool, AvgPool, MaxPoolGrad, AvgPoolGrad };

// Checks call `c` of pooling op `op` and returns its geometry. Operands: max_pool2d and
// avg_pool2d (x) -> y; max_pool2d_grad (x, dy) -> dx; avg_pool2d_grad (dy) -> dx, all NCHW
// f32. Throws RuntimeError (LibCall::fail).
PoolWindow plan_pool(const LibCall& c, PoolOp op);

// The CPU kernels (kernels/library_ops.def).
void max_pool2d_cpu(const LibCall& c);
void avg_pool2d_cpu(const LibCall& c);
void max_pool2d_grad_cpu(const LibCall& c);
void avg_pool2d_grad_cpu(const LibCall& c);

}  // namespace modelc::kernels
