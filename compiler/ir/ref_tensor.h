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

// The multi-index of flat offset `flat` in a row-major tensor of shape `shape`, and back.
inline void unravel(int64_t flat, const std::vector<int64_t>& shape, std::vector<int64_t>& idx) {
  idx.assign(shape.size(), 0);
  for (size_t i = shape.size(); i-- > 0;) {
    if (shape[i] == 0) return;
    idx[i] = flat % shape[i];
    flat /= shape[i];
  }
}
inline int64_t ravel(const std::vector<int64_t>& idx, const std::vector<int64_t>& shape) {
  int64_t at = 0;
  for (size_t k = 0; k < shape.size(); ++k) at = at * shape[k] + idx[k];
  return at;
}

// The flat index, in a tensor of shape `in` that broadcasts to `out` (numpy rules), of the
// element that output element `i` reads.
inline int64_t broadcast_index(const std::vector<int64_t>& out, const std::vector<int64_t>& in, int64_t i) {
  int64_t at = 0, stride = 1;
  for (size_t k = 0; k < out.size() && k < in.size(); ++k) {
    const int64_t idx = i % out[out.size() - 1 - k];
    i /= out[out.size() - 1 - k];
    const int64_t extent = in[in.size() - 1 - k];
    if (extent != 1) at += idx * stride;
    stride *= extent;
  }
  return at;
}

}  // namespace modelc
