// Shared by the shape rules of the window ops (conv2d, the pools and their gradients).
#pragma once

#include "compiler/ir/op_registry.h"

namespace modelc {

// Reads the window attribute `name` as (height, width): one entry means both. Fails unless
// it has 1 or 2 entries of at least `min`; sets it to its two-entry form.
bool pair_attr(InferCtx& c, const char* op, const char* name, int64_t min, Ints& hw);

}  // namespace modelc
