// embedding and embedding_grad on the CPU. The ids are data, so an id out of range is the
// user's error: it is reported with its position before any row is copied. The gradient's
// scatter-add is split over column ranges of the table, each thread summing every id in
// order for its columns, so it is deterministic and race-free whatever the thread count.
#include <fmt/format.h>

#include <algorithm>
#include <cstring>

#include "runtime/tensor.h"
#include "kernels/cpu/library.h"

namespace modelc::kernels {

namespace {

using rt::shape_str;

void check_ids(const LibCall& c, const TensorArg& ids, int64_t rows) {
  const int32_t* p = ids.i32();
  for (int64_t i = 0; i < ids.numel(); ++i)
    if (p[i] < 0 || p[i] >= rows)
      c.fail(fmt::format("id {} at position {} of the ids {} is out of range for a table of {} rows", p[i], i,
                         shape_str(ids.shape), rows));
}

void embedding(const LibCall& c) {
  c.expect_arity(2, 2, 1, 1);
  const TensorArg& ids = c.in(0);
  const TensorArg& table = c.in(1);
  const TensorArg& out = c.out(0);
  c.expect_type(ids, ElemType::I32, "ids");
  c.expect_type(table, ElemType::F32, "table");
  c.expect_rank(table, 2, "table");
  int64_t rows = table.dim(0), width = table.dim(1);
  std::vector<int64_t> want = ids.shape;
  want.push_back(width);
  if (out.shape != want || out.type != ElemType::F32)
    c.fail(fmt::format("output is {}{}, expected f32{}", rt::elem_name(out.type), shape_str(out.shape), shape_str(want)));
  check_ids(c, ids, rows);
  const int32_t* id = ids.i32();
  c.pool->parallel_for(ids.numel(), std::max<int64_t>(1, 4096 / std::max<int64_t>(width, 1)), [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i)
      std::memcpy(out.f32() + i * width, table.f32() + id[i] * width, static_cast<size_t>(width) * sizeof(float));
  });
}

// embedding_grad(ids, grad [..., W]; rows) -> [rows, W].
void embedding_grad(const LibCall& c) {
  c.expect_arity(2, 2, 1, 1);
  const TensorArg& ids = c.in(0);
  const TensorArg& g = c.in(1);
  const TensorArg& out = c.out(0);
  c.expect_type(ids, ElemType::I32, "ids");
  c.expect_type(g, ElemType::F32, "gradient");
  c.expect_type(out, ElemType::F32, "output");
  c.expect_rank(out, 2, "output");
  int64_t rows = out.dim(0), width = out.dim(1);
  if (c.ints && c.ints->count("rows") && c.int_attr("rows") != rows)
    c.fail(fmt::format("rows is {} but the output has shape {}", c.int_attr("rows"), shape_str(out.shape)));
  std::vector<int64_t> want = ids.shape;
  want.push_back(width);
  if (g.shape != want)
    c.fail(fmt::format("gradient has shape {}, expected {} for ids {}", shape_str(g.shape), shape_str(want), shape_str(ids.shape)));
  check_ids(c, ids, rows);
  const int32_t* id = ids.i32();
  int64_t n = ids.numel();
  c.pool->parallel_for(width, 16, [&](int64_t k0, int64_t k1) {
    for (int64_t r = 0; r < rows; ++r) std::fill(out.f32() + r * width + k0, out.f32() + r * width + k1, 0.0f);
    for (int64_t i = 0; i < n; ++i) {
      float* dst = out.f32() + id[i] * width;
      const float* src = g.f32() + i * width;
      for (int64_t k = k0; k < k1; ++k) dst[k] += src[k];
    }
  });
}

}  // namespace

void register_embedding_ops(LibraryTable& t) {
  t["embedding"] = embedding;
  t["embedding_grad"] = embedding_grad;
}

}  // namespace modelc::kernels
