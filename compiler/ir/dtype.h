// Element types of tensors: the runtime's enum (runtime/base/dtype.h, shared across the
// wall), and what only the compiler's reference needs of them.
#pragma once

#include "runtime/base/dtype.h"

namespace modelc {

// Rounds a double to what a value of type t holds (f32, f16 and bf16 round to nearest
// even, i32 truncates toward zero and saturates, bool is x != 0).
double round_to_dtype(double x, DType t);

}  // namespace modelc
