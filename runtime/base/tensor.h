// A tensor in host memory, owned: what callers feed the runtime and get back from it, what
// data loaders produce and checkpoints hold.
#pragma once

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "runtime/base/program.h"

namespace modelc::rt {

// "[64,784]": how messages show a concrete shape.
inline std::string shape_str(const std::vector<int64_t>& s) {
  std::string r = "[";
  for (size_t i = 0; i < s.size(); ++i) r += (i ? "," : "") + std::to_string(s[i]);
  return r + "]";
}

struct HostTensor {
  ElemType type = ElemType::F32;
  std::vector<int64_t> shape;
  std::vector<uint8_t> bytes;  // row-major, numel() * dtype_bytes(type)

  HostTensor() = default;
  HostTensor(ElemType t, std::vector<int64_t> s) : type(t), shape(std::move(s)) {
    bytes.assign(static_cast<size_t>(numel()) * dtype_bytes(t), 0);
  }
  int64_t numel() const {
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    return n;
  }
  float* f32() { return reinterpret_cast<float*>(bytes.data()); }
  const float* f32() const { return reinterpret_cast<const float*>(bytes.data()); }
  int32_t* i32() { return reinterpret_cast<int32_t*>(bytes.data()); }
  const int32_t* i32() const { return reinterpret_cast<const int32_t*>(bytes.data()); }
  std::string shape_str() const { return rt::shape_str(shape); }
};

}  // namespace modelc::rt
