// cumsum on every device: the checks and geometry both devices share (plan_cumsum), the CPU
// kernel and the CUDA launch planner (its kernel's body is kernels/cuda/bodies.h,
// cumsum_body). kernels/library_ops.def names both; neither needs a header.
//
// cumsum(x) -> out of x's shape and type (f32, f16 or bf16); ints["axis"] = {a} with
// 0 <= a < rank (the compiler normalises it), ints["reverse"] = {0 or 1} (absent: 0).
// Viewing x as [outer, len, inner] with len the axis' extent, out[o, i, k] is the sum of
// x[o, j, k] over j <= i (reverse: j >= i), added one term at a time in f32 in that order
// (f16/bf16 terms widened exactly) and rounded once to the output's type. Every device sums
// in this order, so the results are the same bit for bit.
#include <fmt/format.h>

#include <algorithm>
#include <vector>

#include "kernels/cpu/library.h"
#include "kernels/cuda/launches.h"
#include "runtime/base/tensor.h"

namespace modelc::kernels {

namespace {

using rt::shape_str;

// The geometry of a scan: outer x inner lines of `len` terms, `inner` apart.
struct CumsumPlan {
  int64_t outer = 0, len = 0, inner = 0;  // lines: outer * inner, each len terms apart by inner
  bool reverse = false;
  ElemType type = ElemType::F32;
};


inline float widen(float v, ElemType) { return v; }
inline float widen(uint16_t v, ElemType t) { return low_to_f32(v, t); }
inline void store(float* p, float v, ElemType) { *p = v; }
inline void store(uint16_t* p, float v, ElemType t) { *p = f32_to_low(v, t); }

// Scans lines [b, e) (line o * inner + k). The lines of one o that sit side by side in
// memory are scanned together, one accumulator each, so that the inner loop runs over
// contiguous elements; every line still adds its terms one at a time in axis order.
template <class T>
void scan(const CumsumPlan& p, const T* x, T* out, int64_t b, int64_t e) {
  std::vector<float> acc;
  for (int64_t line = b; line < e;) {
    const int64_t o = line / p.inner, k0 = line - o * p.inner;
    const int64_t k1 = std::min(p.inner, k0 + (e - line));
    acc.assign(static_cast<size_t>(k1 - k0), 0.0f);
    for (int64_t s = 0; s < p.len; ++s) {
      const int64_t at = (o * p.len + (p.reverse ? p.len - 1 - s : s)) * p.inner;
      for (int64_t k = k0; k < k1; ++k) {
        float& a = acc[static_cast<size_t>(k - k0)];
        a += widen(x[at + k], p.type);
        store(out + at + k, a, p.type);
      }
    }
    line += k1 - k0;
  }
}

template <class T>
void run(const LibCall& c, const CumsumPlan& p) {
  const auto* x = static_cast<const T*>(c.in(0).data);
  auto* out = static_cast<T*>(c.out(0).data);
  const int64_t lines = p.outer * p.inner;
  if (lines == 0 || p.len == 0) return;  // no element
  c.pool->parallel_for(lines, std::max<int64_t>(1, 16384 / p.len), [&](int64_t b, int64_t e) { scan(p, x, out, b, e); });
}

// The checks of a cumsum call (the CPU kernel and the CUDA planner say the same words) and
// its geometry. Throws RuntimeError (LibCall::fail).
CumsumPlan plan_cumsum(const LibCall& c) {
  c.expect_arity(1, 1, 1, 1);
  const TensorArg& x = c.in(0);
  const TensorArg& out = c.out(0);
  if (x.type != ElemType::F32 && !is_low_float(x.type))
    c.fail(fmt::format("input must be f32, f16 or bf16, got {}{}", dtype_name(x.type), shape_str(x.shape)));
  if (out.type != x.type || out.shape != x.shape)
    c.fail(fmt::format("output is {}{}, expected the input's {}{}", dtype_name(out.type), shape_str(out.shape),
                       dtype_name(x.type), shape_str(x.shape)));
  if (x.rank() == 0) c.fail("cannot take the cumulative sum of a scalar");
  const int64_t axis = c.int_attr("axis");
  if (axis < 0 || axis >= x.rank()) c.fail(fmt::format("axis {} is out of range for rank {}", axis, x.rank()));
  const int64_t reverse = c.int_or("reverse", 0);
  if (reverse != 0 && reverse != 1) c.fail(fmt::format("reverse must be 0 or 1, got {}", reverse));
  CumsumPlan p;
  p.outer = p.inner = 1;
  for (int k = 0; k < x.rank(); ++k) {
    if (k < axis) p.outer *= x.dim(k);
    else if (k > axis) p.inner *= x.dim(k);
  }
  p.len = x.dim(static_cast<int>(axis));
  p.reverse = reverse == 1;
  p.type = x.type;
  return p;
}

}  // namespace

void cumsum_cpu(const LibCall& c) {
  const CumsumPlan p = plan_cumsum(c);
  if (p.type == ElemType::F32) run<float>(c, p);
  else run<uint16_t>(c, p);
}

}  // namespace modelc::kernels

namespace modelc::kernels::cuda {

// One work item per line, each a sequential scan (bodies.h).
OpLaunches cumsum_launches(const LibCall& c, const ErrorWordSource&) {
  const CumsumPlan p = plan_cumsum(c);
  CumsumParams k{};
  k.x = c.in(0).data;
  k.out = c.out(0).data;
  k.n = p.len == 0 ? 0 : p.outer * p.inner;
  k.len = p.len;
  k.inner = p.inner;
  k.type = float_type(p.type);
  k.reverse = p.reverse ? 1 : 0;
  return one(HandKernel::Cumsum, k);
}

}  // namespace modelc::kernels::cuda
