// The data-movement ops planned once for every device: transpose, permute, reshape,
// broadcast_to, slice, concat, split and copy are checked here and become a list of strided
// copies, and fill becomes a bit pattern. The CPU twin (kernels/cpu/movement.cc) and the CUDA
// ops (kernels/cuda/) run exactly these plans, so the checks, their messages and the
// strides each op copies with are written once.
//
// A copy is given in elements of `elem_bytes` bytes, with its dims coalesced (dims of 1
// dropped, neighbours that are contiguous in both source and destination merged), so
// that a copy of contiguous memory has rank 1 whatever the op.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "kernels/cpu/library.h"

namespace modelc::kernels {

// dst[dst_base + sum idx[k] * dst_stride[k]] = src[src_base + sum idx[k] * src_stride[k]]
// for every idx < shape; `src` is the index of an input of the call, `dst` of an output.
struct StridedCopy {
  size_t src = 0, dst = 0;
  std::vector<int64_t> shape, src_stride, dst_stride;
  int64_t src_base = 0, dst_base = 0;
  size_t elem_bytes = 0;

  int64_t numel() const {
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    return n;
  }
  // True when the copy moves every element onto itself (same buffer, same layout): a
  // reshape in place.
  bool in_place(const void* src_data, const void* dst_data) const {
    return src_data == dst_data && src_base == dst_base && src_stride == dst_stride;
  }
};

// Merges what can be merged (see above); the same elements move in the same order.
StridedCopy coalesce(StridedCopy c);

// The planners of the strided-copy ops, one per op (kernels/library_ops.def names them): each
// checks call `c` (arity, types, shapes, attributes) and returns its copies, coalesced, with
// empty ones left out. Throws RuntimeError (LibCall::fail).
using MovementPlanner = std::vector<StridedCopy> (*)(const LibCall& c);
std::vector<StridedCopy> plan_transpose(const LibCall& c);
std::vector<StridedCopy> plan_permute(const LibCall& c);
std::vector<StridedCopy> plan_reshape(const LibCall& c);
std::vector<StridedCopy> plan_broadcast_to(const LibCall& c);
std::vector<StridedCopy> plan_slice(const LibCall& c);
std::vector<StridedCopy> plan_concat(const LibCall& c);
std::vector<StridedCopy> plan_split(const LibCall& c);
std::vector<StridedCopy> plan_copy(const LibCall& c);

// The strided-copy ops, each its plan (plan_<op>) run by the CPU kernel <op>_cpu
// (movement.cc) and the CUDA planner <op>_launches (kernels/cuda/launches.cc), the names
// kernels/library_ops.def gives them: X(op) for each.
#define MODELC_MOVEMENT_OPS(X) X(transpose) X(permute) X(reshape) X(broadcast_to) X(slice) X(concat) X(split) X(copy)

// Runs `copies` of call `c` on its pool (a copy in place is skipped).
void run_copies(const LibCall& c, const std::vector<StridedCopy>& copies);

// The CPU kernel of a strided-copy op: its plan, run.
template <MovementPlanner P>
void movement_cpu(const LibCall& c) {
  run_copies(c, P(c));
}

// fill: `n` elements of `elem_bytes` bytes, each holding the low bytes of `bits`.
struct FillPlan {
  size_t elem_bytes = 4;
  uint32_t bits = 0;
  int64_t n = 0;
};
FillPlan plan_fill(const LibCall& c);
// The CPU kernel of fill.
void fill_cpu(const LibCall& c);

}  // namespace modelc::kernels
