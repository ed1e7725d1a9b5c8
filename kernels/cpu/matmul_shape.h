// The shape side of a matmul library call, shared by the CPU op (kernels/cpu/matmul.cc) and
// the CUDA op (kernels/cuda/blaslt.cc): numpy semantics (batch dims broadcast, right-aligned;
// a rank-1 left operand is a row, a rank-1 right operand a column), checked with the same
// messages whatever the device.
#pragma once

#include <cstdint>
#include <vector>

#include "kernels/cpu/library.h"

namespace modelc::kernels {

struct MatmulShape {
  bool vec_a = false, vec_b = false;
  int64_t M = 0, K = 0, N = 0;
  std::vector<int64_t> batch;             // the broadcast batch dims of the output
  std::vector<int64_t> stride_a, stride_b;  // per batch dim, in elements (0 where broadcast)
  int64_t nbatch = 1;                     // product of batch
  bool a_folds = false;  // b has no batch dims and a is not broadcast: one [nbatch*M, K] @ [K, N]
  int64_t channels = 1;  // the epilogue's channels: the output's last dim (N, or M when b is a vector)

  // Element offsets of batch element bi in a and b.
  void offsets(int64_t bi, int64_t& oa, int64_t& ob) const;
};

// Checks operands 0 and 1 and output 0 of `c` (ranks, inner dims, batch broadcast, the
// output's shape; not the element types) and fails with a message naming them.
MatmulShape analyze_matmul(const LibCall& c);

}  // namespace modelc::kernels
