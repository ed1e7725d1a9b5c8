#include "runtime/base/dtype.h"

namespace modelc {

std::string_view dtype_name(DType t) {
  switch (t) {
    case DType::F32: return "f32";
    case DType::F16: return "f16";
    case DType::BF16: return "bf16";
    case DType::I32: return "i32";
    case DType::Bool: return "bool";
  }
  return "?";
}

std::optional<DType> parse_dtype(std::string_view n) {
  for (DType t : {DType::F32, DType::F16, DType::BF16, DType::I32, DType::Bool})
    if (dtype_name(t) == n) return t;
  return std::nullopt;
}

size_t dtype_bytes(DType t) {
  switch (t) {
    case DType::F32: case DType::I32: return 4;
    case DType::F16: case DType::BF16: return 2;
    case DType::Bool: return 1;
  }
  return 0;
}

}  // namespace modelc
