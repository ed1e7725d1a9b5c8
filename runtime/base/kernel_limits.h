// Limits of the hand kernels that the compiler's shape rules check too, so a model over one
// fails at its own line (compiler/ir/ops/attention.cc) rather than when the kernel is planned
// (kernels/sdpa.cc). Plain C++17: nvcc compiles it into the hand kernels' PTX.
#pragma once

#include <cstdint>

namespace modelc {

constexpr int64_t kSdpaMaxHead = 256;  // the largest head size (D and E) fused attention takes

}  // namespace modelc
