// embedding and embedding_grad on the CPU. The ids are data, so an id out of range is the
// user's error: it is reported with its position before any row is copied. The gradient's
// scatter-add is split over column ranges of the table, each thread summing every id in
// order for its columns, so it is deterministic and race-free whatever the thread count.
// The checks are the plans of kernels/cpu/embedding_plan.h (here), which the CUDA ops share.
#include <fmt/format.h>

#include <algorithm>
#include <cstring>

#include "kernels/cpu/embedding_plan.h"
#include "runtime/base/tensor.h"

namespace modelc::kernels {

namespace {

using rt::shape_str;

void check_ids(const LibCall& c, const TensorArg& ids, int64_t rows) {
  const int32_t* p = ids.i32();
  for (int64_t i = 0; i < ids.numel(); ++i)
    if (p[i] < 0 || p[i] >= rows) c.fail(embedding_id_error(p[i], i, ids.shape, rows));
}

}  // namespace

void embedding_cpu(const LibCall& c) {
  const EmbeddingPlan plan = plan_embedding(c);
  const TensorArg& ids = c.in(0);
  const TensorArg& table = c.in(1);
  const TensorArg& out = c.out(0);
  const int64_t width = plan.width;
  check_ids(c, ids, plan.rows);
  const int32_t* id = ids.i32();
  c.pool->parallel_for(ids.numel(), std::max<int64_t>(1, 4096 / std::max<int64_t>(width, 1)), [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i)
      std::memcpy(out.f32() + i * width, table.f32() + id[i] * width, static_cast<size_t>(width) * sizeof(float));
  });
}

void embedding_grad_cpu(const LibCall& c) {
  const EmbeddingPlan plan = plan_embedding_grad(c);
  const TensorArg& ids = c.in(0);
  const TensorArg& g = c.in(1);
  const TensorArg& out = c.out(0);
  const int64_t rows = plan.rows, width = plan.width;
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

EmbeddingPlan plan_embedding(const LibCall& c) {
  c.expect_arity(2, 2, 1, 1);
  const TensorArg& ids = c.in(0);
  const TensorArg& table = c.in(1);
  const TensorArg& out = c.out(0);
  c.expect_type(ids, ElemType::I32, "ids");
  c.expect_type(table, ElemType::F32, "table");
  c.expect_rank(table, 2, "table");
  EmbeddingPlan e{ids.numel(), table.dim(0), table.dim(1)};
  std::vector<int64_t> want = ids.shape;
  want.push_back(e.width);
  if (out.shape != want || out.type != ElemType::F32)
    c.fail(fmt::format("output is {}{}, expected f32{}", dtype_name(out.type), shape_str(out.shape), shape_str(want)));
  return e;
}

// embedding_grad(ids, grad [..., W]; rows) -> [rows, W].
EmbeddingPlan plan_embedding_grad(const LibCall& c) {
  c.expect_arity(2, 2, 1, 1);
  const TensorArg& ids = c.in(0);
  const TensorArg& g = c.in(1);
  const TensorArg& out = c.out(0);
  c.expect_type(ids, ElemType::I32, "ids");
  c.expect_type(g, ElemType::F32, "gradient");
  c.expect_type(out, ElemType::F32, "output");
  c.expect_rank(out, 2, "output");
  EmbeddingPlan e{ids.numel(), out.dim(0), out.dim(1)};
  if (c.ints && c.ints->count("rows") && c.int_attr("rows") != e.rows)
    c.fail(fmt::format("rows is {} but the output has shape {}", c.int_attr("rows"), shape_str(out.shape)));
  std::vector<int64_t> want = ids.shape;
  want.push_back(e.width);
  if (g.shape != want)
    c.fail(fmt::format("gradient has shape {}, expected {} for ids {}", shape_str(g.shape), shape_str(want), shape_str(ids.shape)));
  return e;
}

std::string embedding_id_error(int64_t id, int64_t position, const std::vector<int64_t>& ids_shape, int64_t rows) {
  return fmt::format("id {} at position {} of the ids {} is out of range for a table of {} rows", id, position,
                     shape_str(ids_shape), rows);
}

}  // namespace modelc::kernels
