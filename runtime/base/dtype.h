// Element types of tensors: one enum for the compiler (its IR types) and the runtime (its
// buffers and tensors), so a type crosses the wall unconverted.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>

namespace modelc {

enum class DType : uint8_t { F32, F16, BF16, I32, Bool };

// "f32", "f16", "bf16", "i32", "bool"; "?" for a value outside the enum (a corrupt plan).
std::string_view dtype_name(DType t);
std::optional<DType> parse_dtype(std::string_view name);  // inverse of dtype_name
// 4, 2, 2, 4, 1 (bool is one byte, 0 or 1); 0 outside the enum.
size_t dtype_bytes(DType t);
inline bool is_float(DType t) { return t == DType::F32 || t == DType::F16 || t == DType::BF16; }

namespace rt {
using ElemType = DType;  // the runtime's name for it
}  // namespace rt

}  // namespace modelc
