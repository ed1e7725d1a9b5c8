// Data movement on the CPU: transpose, permute, reshape, broadcast_to, slice, concat, split,
// copy and fill. Every op but fill is a strided copy: the output is written in row-major
// order, reading the input through per-dim strides (0 for a broadcast dim). The copies move
// bytes, so they serve every element type.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "runtime/tensor.h"
#include "kernels/cpu/library.h"

namespace modelc::kernels {

namespace {

using rt::shape_str;

std::vector<int64_t> row_major_strides(const std::vector<int64_t>& shape) {
  std::vector<int64_t> s(shape.size(), 1);
  for (size_t k = shape.size(); k-- > 1;) s[k - 1] = s[k] * shape[k];
  return s;
}

// out (contiguous, shape `shape`) = src[base + sum idx[k] * stride[k]], element size `eb`.
void strided_copy(const LibCall& c, const uint8_t* src, int64_t base, const std::vector<int64_t>& stride,
                  uint8_t* dst, const std::vector<int64_t>& shape, size_t eb) {
  int64_t total = 1;
  for (int64_t d : shape) total *= d;
  if (total == 0) return;
  size_t D = shape.size();
  int64_t len = D ? shape[D - 1] : 1, inner = D ? stride[D - 1] : 1;
  int64_t rows = total / len;
  int64_t grain = std::max<int64_t>(1, 32768 / std::max<int64_t>(len, 1));
  c.pool->parallel_for(rows, grain, [&](int64_t r0, int64_t r1) {
    std::vector<int64_t> idx(D > 0 ? D - 1 : 0, 0);
    int64_t rem = r0;
    for (size_t k = idx.size(); k-- > 0;) idx[k] = rem % shape[k], rem /= shape[k];
    for (int64_t r = r0; r < r1; ++r) {
      int64_t off = base;
      for (size_t k = 0; k < idx.size(); ++k) off += idx[k] * stride[k];
      uint8_t* d = dst + static_cast<size_t>(r * len) * eb;
      const uint8_t* s = src + static_cast<size_t>(off) * eb;
      if (inner == 1) {
        std::memcpy(d, s, static_cast<size_t>(len) * eb);
      } else {
        for (int64_t j = 0; j < len; ++j) std::memcpy(d + static_cast<size_t>(j) * eb, s + static_cast<size_t>(j * inner) * eb, eb);
      }
      for (size_t k = idx.size(); k-- > 0;) {
        if (++idx[k] < shape[k]) break;
        idx[k] = 0;
      }
    }
  });
}

// The unary copies share: one input, one output of the same element type.
void unary(const LibCall& c) {
  c.expect_arity(1, 1, 1, 1);
  if (c.in(0).type != c.out(0).type)
    c.fail(fmt::format("input is {} but output is {}", rt::elem_name(c.in(0).type), rt::elem_name(c.out(0).type)));
}

int64_t norm_axis(const LibCall& c, int64_t axis, int rank, const char* name) {
  int64_t a = axis < 0 ? axis + rank : axis;
  if (a < 0 || a >= rank) c.fail(fmt::format("{} {} is out of range for rank {}", name, axis, rank));
  return a;
}

void permute_with(const LibCall& c, std::vector<int64_t> perm) {
  const TensorArg& x = c.in(0);
  const TensorArg& out = c.out(0);
  if (static_cast<int>(perm.size()) != x.rank())
    c.fail(fmt::format("needs {} dims for input {}, got {}", x.rank(), shape_str(x.shape), shape_str(perm)));
  std::vector<bool> seen(perm.size(), false);
  std::vector<int64_t> want, xs = row_major_strides(x.shape), st;
  for (int64_t& p : perm) {
    p = norm_axis(c, p, x.rank(), "dim");
    if (seen[static_cast<size_t>(p)]) c.fail(fmt::format("dims {} are not a permutation", shape_str(perm)));
    seen[static_cast<size_t>(p)] = true;
    want.push_back(x.shape[static_cast<size_t>(p)]);
    st.push_back(xs[static_cast<size_t>(p)]);
  }
  if (out.shape != want) c.fail(fmt::format("output has shape {}, expected {}", shape_str(out.shape), shape_str(want)));
  strided_copy(c, static_cast<const uint8_t*>(x.data), 0, st, static_cast<uint8_t*>(out.data), out.shape, rt::elem_bytes(x.type));
}

void transpose(const LibCall& c) {
  unary(c);
  int r = c.in(0).rank();
  std::vector<int64_t> perm(static_cast<size_t>(r));
  for (int i = 0; i < r; ++i) perm[static_cast<size_t>(i)] = i;
  if (r > 0) {
    int64_t d0 = norm_axis(c, c.int_or("dim0", -2 + (r < 2 ? 1 : 0)), r, "dim0");
    int64_t d1 = norm_axis(c, c.int_or("dim1", -1), r, "dim1");
    std::swap(perm[static_cast<size_t>(d0)], perm[static_cast<size_t>(d1)]);
  }
  permute_with(c, perm);
}

void permute(const LibCall& c) {
  unary(c);
  permute_with(c, c.ints_attr("dims"));
}

void copy_same(const LibCall& c) {
  const TensorArg& x = c.in(0);
  const TensorArg& out = c.out(0);
  if (x.numel() != out.numel())
    c.fail(fmt::format("cannot copy {} elements ({}) into {} ({})", x.numel(), shape_str(x.shape), out.numel(), shape_str(out.shape)));
  if (x.data != out.data) std::memmove(out.data, x.data, static_cast<size_t>(x.numel()) * rt::elem_bytes(x.type));
}

void reshape(const LibCall& c) {
  unary(c);
  copy_same(c);
}

void copy(const LibCall& c) {
  unary(c);
  if (c.in(0).shape != c.out(0).shape)
    c.fail(fmt::format("input has shape {} but output has {}", shape_str(c.in(0).shape), shape_str(c.out(0).shape)));
  copy_same(c);
}

void broadcast_to(const LibCall& c) {
  unary(c);
  const TensorArg& x = c.in(0);
  const TensorArg& out = c.out(0);
  if (x.rank() > out.rank()) c.fail(fmt::format("cannot broadcast {} to {}", shape_str(x.shape), shape_str(out.shape)));
  std::vector<int64_t> xs = row_major_strides(x.shape), st(out.shape.size(), 0);
  size_t lead = out.shape.size() - x.shape.size();
  for (size_t k = 0; k < x.shape.size(); ++k) {
    if (x.shape[k] == out.shape[lead + k]) st[lead + k] = x.shape[k] == 1 ? 0 : xs[k];
    else if (x.shape[k] != 1) c.fail(fmt::format("cannot broadcast {} to {}", shape_str(x.shape), shape_str(out.shape)));
  }
  strided_copy(c, static_cast<const uint8_t*>(x.data), 0, st, static_cast<uint8_t*>(out.data), out.shape, rt::elem_bytes(x.type));
}

void slice(const LibCall& c) {
  unary(c);
  const TensorArg& x = c.in(0);
  const TensorArg& out = c.out(0);
  if (x.rank() == 0) c.fail("cannot slice a scalar");
  auto axis = static_cast<size_t>(norm_axis(c, c.int_attr("axis"), x.rank(), "axis"));
  int64_t n = x.shape[axis], start = c.int_attr("start"), end = c.int_attr("end");
  int64_t s = start < 0 ? start + n : start, e = end < 0 ? end + n : end;
  if (s < 0 || s > n || e < s || e > n)
    c.fail(fmt::format("slice [{}:{}] is out of range for axis {} of {}", start, end, axis, shape_str(x.shape)));
  std::vector<int64_t> want = x.shape;
  want[axis] = e - s;
  if (out.shape != want) c.fail(fmt::format("output has shape {}, expected {}", shape_str(out.shape), shape_str(want)));
  std::vector<int64_t> xs = row_major_strides(x.shape);
  strided_copy(c, static_cast<const uint8_t*>(x.data), s * xs[axis], xs, static_cast<uint8_t*>(out.data), out.shape,
               rt::elem_bytes(x.type));
}

// Concat and split move blocks: `outer` rows (the dims before the axis), each holding
// extent * inner contiguous elements per tensor.
void block_sizes(const std::vector<int64_t>& shape, size_t axis, int64_t& outer, int64_t& inner) {
  outer = inner = 1;
  for (size_t k = 0; k < axis; ++k) outer *= shape[k];
  for (size_t k = axis + 1; k < shape.size(); ++k) inner *= shape[k];
}

// Checks that `parts` joined along `axis` make `whole`.
void check_parts(const LibCall& c, const std::vector<TensorArg>& parts, const TensorArg& whole, size_t axis) {
  int64_t sum = 0;
  for (size_t i = 0; i < parts.size(); ++i) {
    const TensorArg& p = parts[i];
    if (!p.present()) c.fail(fmt::format("operand {} is missing", i));
    if (p.type != whole.type) c.fail(fmt::format("operand {} is {}, expected {}", i, rt::elem_name(p.type), rt::elem_name(whole.type)));
    bool ok = p.rank() == whole.rank();
    for (size_t k = 0; ok && k < p.shape.size(); ++k) ok = k == axis || p.shape[k] == whole.shape[k];
    if (!ok) c.fail(fmt::format("operand {} has shape {}, which does not fit {} on axis {}", i, shape_str(p.shape),
                                shape_str(whole.shape), axis));
    sum += p.shape[axis];
  }
  if (sum != whole.shape[axis])
    c.fail(fmt::format("the parts sum to {} along axis {}, but {} has {}", sum, axis, shape_str(whole.shape), whole.shape[axis]));
}

void concat(const LibCall& c) {
  if (c.inputs.empty()) c.fail("needs at least one input");
  c.expect_arity(1, SIZE_MAX, 1, 1);
  const TensorArg& out = c.out(0);
  if (out.rank() == 0) c.fail("cannot concatenate scalars");
  auto axis = static_cast<size_t>(norm_axis(c, c.int_or("axis", 0), out.rank(), "axis"));
  check_parts(c, c.inputs, out, axis);
  int64_t outer = 0, inner = 0;
  block_sizes(out.shape, axis, outer, inner);
  size_t eb = rt::elem_bytes(out.type);
  int64_t row = out.shape[axis] * inner;
  c.pool->parallel_for(outer, std::max<int64_t>(1, 32768 / std::max<int64_t>(row, 1)), [&](int64_t o0, int64_t o1) {
    for (int64_t o = o0; o < o1; ++o) {
      int64_t at = 0;
      for (const TensorArg& x : c.inputs) {
        int64_t len = x.shape[axis] * inner;
        std::memcpy(static_cast<uint8_t*>(out.data) + static_cast<size_t>(o * row + at) * eb,
                    static_cast<const uint8_t*>(x.data) + static_cast<size_t>(o * len) * eb, static_cast<size_t>(len) * eb);
        at += len;
      }
    }
  });
}

void split(const LibCall& c) {
  c.expect_arity(1, 1, 1, SIZE_MAX);
  const TensorArg& x = c.in(0);
  if (x.rank() == 0) c.fail("cannot split a scalar");
  auto axis = static_cast<size_t>(norm_axis(c, c.int_or("axis", -1), x.rank(), "axis"));
  int64_t sections = c.int_or("sections", static_cast<int64_t>(c.outputs.size()));
  if (sections != static_cast<int64_t>(c.outputs.size()))
    c.fail(fmt::format("sections is {} but the instruction has {} outputs", sections, c.outputs.size()));
  check_parts(c, c.outputs, x, axis);
  int64_t outer = 0, inner = 0;
  block_sizes(x.shape, axis, outer, inner);
  size_t eb = rt::elem_bytes(x.type);
  int64_t row = x.shape[axis] * inner;
  c.pool->parallel_for(outer, std::max<int64_t>(1, 32768 / std::max<int64_t>(row, 1)), [&](int64_t o0, int64_t o1) {
    for (int64_t o = o0; o < o1; ++o) {
      int64_t at = 0;
      for (const TensorArg& y : c.outputs) {
        int64_t len = y.shape[axis] * inner;
        std::memcpy(static_cast<uint8_t*>(y.data) + static_cast<size_t>(o * len) * eb,
                    static_cast<const uint8_t*>(x.data) + static_cast<size_t>(o * row + at) * eb, static_cast<size_t>(len) * eb);
        at += len;
      }
    }
  });
}

// f32 -> bf16/f16 bits, rounding to nearest even (inf and nan kept).
uint16_t to_bf16(float f) {
  uint32_t u = 0;
  std::memcpy(&u, &f, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x40);
  u += 0x7fffu + ((u >> 16) & 1u);
  return static_cast<uint16_t>(u >> 16);
}

uint16_t to_f16(float f) {
  _Float16 h = static_cast<_Float16>(f);
  uint16_t u = 0;
  std::memcpy(&u, &h, 2);
  return u;
}

template <class T>
void fill_with(const LibCall& c, const TensorArg& out, T v) {
  T* p = static_cast<T*>(out.data);
  c.pool->parallel_for(out.numel(), 65536, [&](int64_t b, int64_t e) { std::fill(p + b, p + e, v); });
}

void fill(const LibCall& c) {
  c.expect_arity(0, 0, 1, 1);
  const TensorArg& out = c.out(0);
  // The value is a float attribute; an integral one may arrive among the ints.
  double v = c.floats && c.floats->count("value") ? c.float_attr("value")
             : c.ints && c.ints->count("value")   ? static_cast<double>(c.int_attr("value"))
                                                  : c.float_attr("value");
  switch (out.type) {
    case ElemType::F32: return fill_with(c, out, static_cast<float>(v));
    case ElemType::I32: return fill_with(c, out, static_cast<int32_t>(std::nearbyint(v)));
    case ElemType::Bool: return fill_with(c, out, static_cast<uint8_t>(v != 0));
    case ElemType::BF16: return fill_with(c, out, to_bf16(static_cast<float>(v)));
    case ElemType::F16: return fill_with(c, out, to_f16(static_cast<float>(v)));
  }
}

}  // namespace

void register_movement_ops(LibraryTable& t) {
  t["transpose"] = transpose;
  t["permute"] = permute;
  t["reshape"] = reshape;
  t["broadcast_to"] = broadcast_to;
  t["slice"] = slice;
  t["concat"] = concat;
  t["split"] = split;
  t["copy"] = copy;
  t["fill"] = fill;
}

}  // namespace modelc::kernels
