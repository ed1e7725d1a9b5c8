// Shared by the shape rules of the window ops (conv2d, the pools and their gradients).
#pragma once

#include <optional>

#include "compiler/ir/op_registry.h"

namespace modelc {

// Reads the window attribute `name` as (height, width): one entry means both. Fails unless
// it has 1 or 2 entries of at least `min`; sets it to its two-entry form.
bool pair_attr(InferCtx& c, const char* op, const char* name, int64_t min, Ints& hw);

// The output extent of a window sweep: (in + 2*pad - dilation*(kernel-1) - 1) / stride + 1,
// floor division (a negative numerator means no window fits); nullopt when a symbolic
// extent does not divide exactly (e.g. 16*P - 16 by 16 does, B by 2 does not).
std::optional<Dim> window_sweep(const Dim& in, const Dim& kernel, int64_t stride, int64_t pad, int64_t dilation);

// The test domains of conv2d and the pools (conv.cc), from which their gradient ops'
// domains are made (grad_ops.cc).
std::vector<OpExample> conv2d_examples(ExampleRng& rng);
std::vector<OpExample> pool_examples(ExampleRng& rng);

}  // namespace modelc
