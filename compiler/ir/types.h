// The type of a tensor value: element type and (possibly symbolic) shape.
#pragma once

#include <string>

#include "compiler/ir/dim.h"
#include "compiler/ir/dtype.h"

namespace modelc {

struct TensorType {
  DType dtype = DType::F32;
  Shape shape;
  int rank() const { return static_cast<int>(shape.size()); }
  friend bool operator==(const TensorType&, const TensorType&) = default;
  std::string str() const;  // "f32[B,128,192]", "f32[]"
};

}  // namespace modelc
