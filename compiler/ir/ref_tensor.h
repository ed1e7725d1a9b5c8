// A dense tensor of doubles with a concrete shape: the values the reference interpreter
// computes with. Row-major; a rank-0 tensor holds one element.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "compiler/ir/dtype.h"

namespace modelc {

struct RefTensor {
  DType dtype = DType::F32;
  std::vector<int64_t> shape;
  std::vector<double> data;

  RefTensor() : data(1, 0.0) {}
  RefTensor(DType t, std::vector<int64_t> s, double fill = 0.0)
      : dtype(t), shape(std::move(s)), data(static_cast<size_t>(numel_of(shape)), fill) {}

  static int64_t numel_of(const std::vector<int64_t>& s) {
    int64_t n = 1;
    for (int64_t d : s) n *= d;
    return n;
  }
  int64_t numel() const { return static_cast<int64_t>(data.size()); }
  int rank() const { return static_cast<int>(shape.size()); }
  std::vector<int64_t> strides() const {
    std::vector<int64_t> st(shape.size(), 1);
    for (int i = rank() - 2; i >= 0; --i) st[i] = st[i + 1] * shape[i + 1];
    return st;
  }
  double& operator[](int64_t i) { return data[static_cast<size_t>(i)]; }
  double operator[](int64_t i) const { return data[static_cast<size_t>(i)]; }
  std::string shape_str() const;
};

}  // namespace modelc
