// Data movement on the CPU: transpose, permute, reshape, broadcast_to, slice, concat, split,
// copy and fill. Each op is planned (checked, and turned into strided copies or a fill
// pattern) by its planner of kernels/cpu/movement_plan.h, which lives here and which the CUDA
// ops (kernels/cuda/) share; the CPU then runs the plan: a strided copy is split over its
// rows (every dim but the last), each row one memcpy when it is contiguous on both sides.
// The copies move bytes, so they serve every element type.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>

#include "kernels/cpu/movement_plan.h"
#include "runtime/base/tensor.h"

namespace modelc::kernels {

namespace {

using rt::shape_str;

std::vector<int64_t> row_major_strides(const std::vector<int64_t>& shape) {
  std::vector<int64_t> s(shape.size(), 1);
  for (size_t k = shape.size(); k-- > 1;) s[k - 1] = s[k] * shape[k];
  return s;
}

// The copy of input `src` into output `dst` (shape `shape`, written row-major).
StridedCopy gather(size_t src, const std::vector<int64_t>& shape, std::vector<int64_t> src_stride, int64_t src_base,
                   ElemType type) {
  StridedCopy p;
  p.src = src;
  p.dst = 0;
  p.shape = shape;
  p.src_stride = std::move(src_stride);
  p.dst_stride = row_major_strides(shape);
  p.src_base = src_base;
  p.elem_bytes = dtype_bytes(type);
  return p;
}

// The unary copies share: one input, one output of the same element type.
void unary(const LibCall& c) {
  c.expect_arity(1, 1, 1, 1);
  if (c.in(0).type != c.out(0).type)
    c.fail(fmt::format("input is {} but output is {}", dtype_name(c.in(0).type), dtype_name(c.out(0).type)));
}

int64_t norm_axis(const LibCall& c, int64_t axis, int rank, const char* name) {
  int64_t a = axis < 0 ? axis + rank : axis;
  if (a < 0 || a >= rank) c.fail(fmt::format("{} {} is out of range for rank {}", name, axis, rank));
  return a;
}

StridedCopy permute_with(const LibCall& c, std::vector<int64_t> perm) {
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
  return gather(0, out.shape, st, 0, x.type);
}

StridedCopy transpose(const LibCall& c) {
  unary(c);
  int r = c.in(0).rank();
  std::vector<int64_t> perm(static_cast<size_t>(r));
  for (int i = 0; i < r; ++i) perm[static_cast<size_t>(i)] = i;
  if (r > 0) {
    int64_t d0 = norm_axis(c, c.int_or("dim0", -2 + (r < 2 ? 1 : 0)), r, "dim0");
    int64_t d1 = norm_axis(c, c.int_or("dim1", -1), r, "dim1");
    std::swap(perm[static_cast<size_t>(d0)], perm[static_cast<size_t>(d1)]);
  }
  return permute_with(c, perm);
}

StridedCopy permute(const LibCall& c) {
  unary(c);
  return permute_with(c, c.ints_attr("dims"));
}

// The input's elements into the output in order: a rank-1 copy.
StridedCopy copy_same(const LibCall& c) {
  const TensorArg& x = c.in(0);
  const TensorArg& out = c.out(0);
  if (x.numel() != out.numel())
    c.fail(fmt::format("cannot copy {} elements ({}) into {} ({})", x.numel(), shape_str(x.shape), out.numel(), shape_str(out.shape)));
  return gather(0, {x.numel()}, {1}, 0, x.type);
}

StridedCopy reshape(const LibCall& c) {
  unary(c);
  return copy_same(c);
}

StridedCopy copy(const LibCall& c) {
  unary(c);
  if (c.in(0).shape != c.out(0).shape)
    c.fail(fmt::format("input has shape {} but output has {}", shape_str(c.in(0).shape), shape_str(c.out(0).shape)));
  return copy_same(c);
}

StridedCopy broadcast_to(const LibCall& c) {
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
  return gather(0, out.shape, st, 0, x.type);
}

StridedCopy slice(const LibCall& c) {
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
  return gather(0, out.shape, xs, s * xs[axis], x.type);
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
    if (p.type != whole.type) c.fail(fmt::format("operand {} is {}, expected {}", i, dtype_name(p.type), dtype_name(whole.type)));
    bool ok = p.rank() == whole.rank();
    for (size_t k = 0; ok && k < p.shape.size(); ++k) ok = k == axis || p.shape[k] == whole.shape[k];
    if (!ok) c.fail(fmt::format("operand {} has shape {}, which does not fit {} on axis {}", i, shape_str(p.shape),
                                shape_str(whole.shape), axis));
    sum += p.shape[axis];
  }
  if (sum != whole.shape[axis])
    c.fail(fmt::format("the parts sum to {} along axis {}, but {} has {}", sum, axis, shape_str(whole.shape), whole.shape[axis]));
}

// One copy per part: part k's rows of `len` elements sit at offset `at` of the whole's rows
// of `row` elements. `join`: the parts are the inputs (concat), else the outputs (split).
std::vector<StridedCopy> blocks(const std::vector<TensorArg>& parts, const TensorArg& whole, size_t axis, bool join) {
  int64_t outer = 0, inner = 0;
  block_sizes(whole.shape, axis, outer, inner);
  const int64_t row = whole.shape[axis] * inner;
  std::vector<StridedCopy> r;
  int64_t at = 0;
  for (size_t k = 0; k < parts.size(); ++k) {
    const int64_t len = parts[k].shape[axis] * inner;
    StridedCopy p;
    p.src = join ? k : 0;
    p.dst = join ? 0 : k;
    p.shape = {outer, len};
    p.src_stride = {join ? len : row, 1};
    p.dst_stride = {join ? row : len, 1};
    (join ? p.dst_base : p.src_base) = at;
    p.elem_bytes = dtype_bytes(whole.type);
    r.push_back(std::move(p));
    at += len;
  }
  return r;
}

std::vector<StridedCopy> concat(const LibCall& c) {
  if (c.inputs.empty()) c.fail("needs at least one input");
  c.expect_arity(1, SIZE_MAX, 1, 1);
  const TensorArg& out = c.out(0);
  if (out.rank() == 0) c.fail("cannot concatenate scalars");
  auto axis = static_cast<size_t>(norm_axis(c, c.int_or("axis", 0), out.rank(), "axis"));
  check_parts(c, c.inputs, out, axis);
  return blocks(c.inputs, out, axis, true);
}

std::vector<StridedCopy> split(const LibCall& c) {
  c.expect_arity(1, 1, 1, SIZE_MAX);
  const TensorArg& x = c.in(0);
  if (x.rank() == 0) c.fail("cannot split a scalar");
  auto axis = static_cast<size_t>(norm_axis(c, c.int_or("axis", -1), x.rank(), "axis"));
  int64_t sections = c.int_or("sections", static_cast<int64_t>(c.outputs.size()));
  if (sections != static_cast<int64_t>(c.outputs.size()))
    c.fail(fmt::format("sections is {} but the instruction has {} outputs", sections, c.outputs.size()));
  check_parts(c, c.outputs, x, axis);
  return blocks(c.outputs, x, axis, false);
}

// One row of a strided copy, elements of EB bytes (a fixed-size memcpy: one load and store).
template <size_t EB>
inline void strided_row(uint8_t* d, const uint8_t* s, int64_t len, int64_t s_in, int64_t d_in) {
  for (int64_t j = 0; j < len; ++j) std::memcpy(d + static_cast<size_t>(j * d_in) * EB, s + static_cast<size_t>(j * s_in) * EB, EB);
}

// Runs copy `p` of call `c` on the pool.
void run_copy(const LibCall& c, const StridedCopy& p) {
  const auto* src = static_cast<const uint8_t*>(c.inputs[p.src].data);
  auto* dst = static_cast<uint8_t*>(c.outputs[p.dst].data);
  if (p.in_place(src, dst)) return;
  const size_t eb = p.elem_bytes, D = p.shape.size();
  const int64_t len = D ? p.shape[D - 1] : 1, s_in = D ? p.src_stride[D - 1] : 1, d_in = D ? p.dst_stride[D - 1] : 1;
  const int64_t rows = p.numel() / len;
  const int64_t grain = std::max<int64_t>(1, 32768 / std::max<int64_t>(len, 1));
  c.pool->parallel_for(rows, grain, [&](int64_t r0, int64_t r1) {
    std::vector<int64_t> idx(D > 0 ? D - 1 : 0, 0);
    int64_t rem = r0;
    for (size_t k = idx.size(); k-- > 0;) idx[k] = rem % p.shape[k], rem /= p.shape[k];
    for (int64_t r = r0; r < r1; ++r) {
      int64_t so = p.src_base, doff = p.dst_base;
      for (size_t k = 0; k < idx.size(); ++k) so += idx[k] * p.src_stride[k], doff += idx[k] * p.dst_stride[k];
      uint8_t* d = dst + static_cast<size_t>(doff) * eb;
      const uint8_t* s = src + static_cast<size_t>(so) * eb;
      if (s_in == 1 && d_in == 1) std::memcpy(d, s, static_cast<size_t>(len) * eb);
      else if (eb == 4) strided_row<4>(d, s, len, s_in, d_in);
      else if (eb == 2) strided_row<2>(d, s, len, s_in, d_in);
      else if (eb == 1) strided_row<1>(d, s, len, s_in, d_in);
      else
        for (int64_t j = 0; j < len; ++j)
          std::memcpy(d + static_cast<size_t>(j * d_in) * eb, s + static_cast<size_t>(j * s_in) * eb, eb);
      for (size_t k = idx.size(); k-- > 0;) {
        if (++idx[k] < p.shape[k]) break;
        idx[k] = 0;
      }
    }
  });
}

// The planned copies, coalesced, without the empty ones.
std::vector<StridedCopy> finish(std::vector<StridedCopy> copies) {
  std::vector<StridedCopy> r;
  for (StridedCopy& p : copies)
    if (p.numel() > 0) r.push_back(coalesce(std::move(p)));
  return r;
}

template <class T>
void fill_with(const LibCall& c, const TensorArg& out, T v) {
  T* p = static_cast<T*>(out.data);
  c.pool->parallel_for(out.numel(), 65536, [&](int64_t b, int64_t e) { std::fill(p + b, p + e, v); });
}

}  // namespace

std::vector<StridedCopy> plan_transpose(const LibCall& c) { return finish({transpose(c)}); }
std::vector<StridedCopy> plan_permute(const LibCall& c) { return finish({permute(c)}); }
std::vector<StridedCopy> plan_reshape(const LibCall& c) { return finish({reshape(c)}); }
std::vector<StridedCopy> plan_broadcast_to(const LibCall& c) { return finish({broadcast_to(c)}); }
std::vector<StridedCopy> plan_slice(const LibCall& c) { return finish({slice(c)}); }
std::vector<StridedCopy> plan_concat(const LibCall& c) { return finish(concat(c)); }
std::vector<StridedCopy> plan_split(const LibCall& c) { return finish(split(c)); }
std::vector<StridedCopy> plan_copy(const LibCall& c) { return finish({copy(c)}); }

void run_copies(const LibCall& c, const std::vector<StridedCopy>& copies) {
  for (const StridedCopy& p : copies) run_copy(c, p);
}

// The CPU kernels kernels/library_ops.def names: each strided-copy op's plan, run.
#define MODELC_MOVEMENT(op) \
  void op##_cpu(const LibCall& c) { movement_cpu<plan_##op>(c); }
MODELC_MOVEMENT_OPS(MODELC_MOVEMENT)
#undef MODELC_MOVEMENT

void fill_cpu(const LibCall& c) {
  const FillPlan f = plan_fill(c);
  const TensorArg& out = c.out(0);
  switch (f.elem_bytes) {
    case 1: return fill_with(c, out, static_cast<uint8_t>(f.bits));
    case 2: return fill_with(c, out, static_cast<uint16_t>(f.bits));
    default: return fill_with(c, out, f.bits);
  }
}

StridedCopy coalesce(StridedCopy c) {
  std::vector<int64_t> shape, ss, ds;
  for (size_t k = 0; k < c.shape.size(); ++k) {
    if (c.shape[k] == 1) continue;
    if (!shape.empty() && ss.back() == c.src_stride[k] * c.shape[k] && ds.back() == c.dst_stride[k] * c.shape[k]) {
      shape.back() *= c.shape[k];
      ss.back() = c.src_stride[k];
      ds.back() = c.dst_stride[k];
      continue;
    }
    shape.push_back(c.shape[k]);
    ss.push_back(c.src_stride[k]);
    ds.push_back(c.dst_stride[k]);
  }
  c.shape = std::move(shape);
  c.src_stride = std::move(ss);
  c.dst_stride = std::move(ds);
  return c;
}

FillPlan plan_fill(const LibCall& c) {
  c.expect_arity(0, 0, 1, 1);
  const TensorArg& out = c.out(0);
  // The value is a float attribute; an integral one may arrive among the ints.
  double v = c.floats && c.floats->count("value") ? c.float_attr("value")
             : c.ints && c.ints->count("value")   ? static_cast<double>(c.int_attr("value"))
                                                  : c.float_attr("value");
  FillPlan f;
  f.n = out.numel();
  f.elem_bytes = dtype_bytes(out.type);
  switch (out.type) {
    case ElemType::F32: {
      const float x = static_cast<float>(v);
      std::memcpy(&f.bits, &x, 4);
      break;
    }
    case ElemType::I32: f.bits = static_cast<uint32_t>(static_cast<int32_t>(std::nearbyint(v))); break;
    case ElemType::Bool: f.bits = v != 0 ? 1u : 0u; break;
    case ElemType::BF16:
    case ElemType::F16: f.bits = f32_to_low(static_cast<float>(v), out.type); break;
  }
  return f;
}

}  // namespace modelc::kernels
