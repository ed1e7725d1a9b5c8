// Element types of tensors.
#pragma once

#include <optional>
#include <string_view>

namespace modelc {

enum class DType : unsigned char { F32, F16, BF16, I32, Bool };

std::string_view dtype_name(DType t);                       // "f32", "bf16", "i32", "bool"
std::optional<DType> parse_dtype(std::string_view name);    // inverse of dtype_name
inline bool is_float(DType t) { return t == DType::F32 || t == DType::F16 || t == DType::BF16; }
int dtype_bytes(DType t);

// Rounds a double to what a value of type t holds (f32, f16 and bf16 round to nearest
// even, i32 truncates toward zero and saturates, bool is x != 0).
double round_to_dtype(double x, DType t);

}  // namespace modelc
