// Pooling on the CPU: max_pool2d, avg_pool2d and their gradients over NCHW f32 images,
// PyTorch's semantics (as the compiler's reference, compiler/ir/ops/conv.cc): padding is
// never the maximum, the average divides by the full window (padding counted), and the
// gradient of a max window goes to its FIRST maximum in row-major scan order, and a NaN is
// the maximum of its window (NaN propagates, as in PyTorch). The work is
// split over the N*C planes, so every output element is written by one thread and the
// gradients' scatter-adds are deterministic. The geometry and the checks are plan_pool's
// (kernels/cpu/pool_plan.h, here), which the CUDA ops share.
#include <fmt/format.h>

#include <cstring>
#include <limits>

#include "kernels/cpu/pool_plan.h"
#include "runtime/base/tensor.h"

namespace modelc::kernels {

namespace {

using rt::shape_str;

using Window = PoolWindow;

// Reads kernel/stride/padding and checks that `in` (the image) and `pooled` (the pooled
// shape) agree with them.
Window window(const LibCall& c, const TensorArg& in, const TensorArg& pooled) {
  c.expect_type(in, ElemType::F32, "image");
  c.expect_type(pooled, ElemType::F32, "pooled tensor");
  c.expect_rank(in, 4, "image");
  c.expect_rank(pooled, 4, "pooled tensor");
  Window w{};
  auto k = c.pair_attr("kernel", {0, 0});
  if (k.first < 1 || k.second < 1) c.fail(fmt::format("kernel must be positive, got {}x{}", k.first, k.second));
  auto s = c.pair_attr("stride", k);
  auto p = c.pair_attr("padding", {0, 0});
  if (s.first < 1 || s.second < 1) c.fail(fmt::format("stride must be positive, got {}x{}", s.first, s.second));
  if (p.first < 0 || p.second < 0 || p.first > k.first / 2 || p.second > k.second / 2)
    c.fail(fmt::format("padding {}x{} must be non-negative and at most half the kernel {}x{}", p.first, p.second, k.first, k.second));
  w.kh = k.first, w.kw = k.second, w.sh = s.first, w.sw = s.second, w.ph = p.first, w.pw = p.second;
  w.N = in.dim(0), w.C = in.dim(1), w.H = in.dim(2), w.W = in.dim(3);
  int64_t ho = (w.H + 2 * w.ph - w.kh) / w.sh + 1, wo = (w.W + 2 * w.pw - w.kw) / w.sw + 1;
  std::vector<int64_t> want{w.N, w.C, ho, wo};
  if (ho < 1 || wo < 1 || pooled.shape != want)
    c.fail(fmt::format("pooled tensor has shape {}, expected {} for image {} (kernel {}x{}, stride {}x{}, padding {}x{})",
                       shape_str(pooled.shape), shape_str(want), shape_str(in.shape), w.kh, w.kw, w.sh, w.sw, w.ph, w.pw));
  w.HO = ho, w.WO = wo;
  return w;
}

// Calls f(i, j, h, v) for every image position (h, v) inside window (i, j), row-major.
template <class F>
inline void each_in_window(const Window& w, int64_t i, int64_t j, F f) {
  for (int64_t a = 0; a < w.kh; ++a) {
    int64_t h = i * w.sh - w.ph + a;
    if (h < 0 || h >= w.H) continue;
    for (int64_t b = 0; b < w.kw; ++b) {
      int64_t v = j * w.sw - w.pw + b;
      if (v >= 0 && v < w.W) f(h * w.W + v);
    }
  }
}

// Whether x takes over as the maximum from m: when larger, or NaN (a NaN is the maximum
// of its window and stays it, as in PyTorch; x != x is the NaN test the GPU body shares).
inline bool takes_max(float x, float m) { return m == m && (x > m || x != x); }

// The offset in the plane of the window's first maximum.
inline int64_t argmax(const Window& w, const float* x, int64_t i, int64_t j) {
  int64_t best_at = -1;
  float best = -std::numeric_limits<float>::infinity();
  each_in_window(w, i, j, [&](int64_t at) {
    if (best_at < 0) best_at = at;  // a window of -inf: its first element
    if (takes_max(x[at], best)) best = x[at], best_at = at;
  });
  return best_at;
}

}  // namespace

void max_pool2d_cpu(const LibCall& c) {
  Window w = plan_pool(c, PoolOp::MaxPool);
  const float* x = c.in(0).f32();
  float* out = c.out(0).f32();
  c.pool->parallel_for(w.N * w.C, 1, [&](int64_t p0, int64_t p1) {
    for (int64_t p = p0; p < p1; ++p) {
      const float* xp = x + p * w.H * w.W;
      float* op = out + p * w.HO * w.WO;
      for (int64_t i = 0; i < w.HO; ++i)
        for (int64_t j = 0; j < w.WO; ++j) {
          float m = -std::numeric_limits<float>::infinity();
          each_in_window(w, i, j, [&](int64_t at) { m = takes_max(xp[at], m) ? xp[at] : m; });
          op[i * w.WO + j] = m;
        }
    }
  });
}

void avg_pool2d_cpu(const LibCall& c) {
  Window w = plan_pool(c, PoolOp::AvgPool);
  const float* x = c.in(0).f32();
  float* out = c.out(0).f32();
  float inv = 1.0f / static_cast<float>(w.kh * w.kw);
  c.pool->parallel_for(w.N * w.C, 1, [&](int64_t p0, int64_t p1) {
    for (int64_t p = p0; p < p1; ++p) {
      const float* xp = x + p * w.H * w.W;
      float* op = out + p * w.HO * w.WO;
      for (int64_t i = 0; i < w.HO; ++i)
        for (int64_t j = 0; j < w.WO; ++j) {
          float s = 0;
          each_in_window(w, i, j, [&](int64_t at) { s += xp[at]; });
          op[i * w.WO + j] = s * inv;
        }
    }
  });
}

// max_pool2d_grad(x, grad) -> dx: each window's gradient to its first maximum.
void max_pool2d_grad_cpu(const LibCall& c) {
  Window w = plan_pool(c, PoolOp::MaxPoolGrad);
  const TensorArg& x = c.in(0);
  const TensorArg& g = c.in(1);
  const TensorArg& dx = c.out(0);
  c.pool->parallel_for(w.N * w.C, 1, [&](int64_t p0, int64_t p1) {
    for (int64_t p = p0; p < p1; ++p) {
      const float* xp = x.f32() + p * w.H * w.W;
      const float* gp = g.f32() + p * w.HO * w.WO;
      float* dp = dx.f32() + p * w.H * w.W;
      std::memset(dp, 0, static_cast<size_t>(w.H * w.W) * sizeof(float));
      for (int64_t i = 0; i < w.HO; ++i)
        for (int64_t j = 0; j < w.WO; ++j) dp[argmax(w, xp, i, j)] += gp[i * w.WO + j];
    }
  });
}

// avg_pool2d_grad(grad) -> dx of the output's shape (the attribute input_shape, when given,
// must agree with it).
void avg_pool2d_grad_cpu(const LibCall& c) {
  Window w = plan_pool(c, PoolOp::AvgPoolGrad);
  const TensorArg& g = c.in(0);
  const TensorArg& dx = c.out(0);
  float inv = 1.0f / static_cast<float>(w.kh * w.kw);
  c.pool->parallel_for(w.N * w.C, 1, [&](int64_t p0, int64_t p1) {
    for (int64_t p = p0; p < p1; ++p) {
      const float* gp = g.f32() + p * w.HO * w.WO;
      float* dp = dx.f32() + p * w.H * w.W;
      std::memset(dp, 0, static_cast<size_t>(w.H * w.W) * sizeof(float));
      for (int64_t i = 0; i < w.HO; ++i)
        for (int64_t j = 0; j < w.WO; ++j) {
          float v = gp[i * w.WO + j] * inv;
          each_in_window(w, i, j, [&](int64_t at) { dp[at] += v; });
        }
    }
  });
}

PoolWindow plan_pool(const LibCall& c, PoolOp op) {
  if (op == PoolOp::MaxPool || op == PoolOp::AvgPool) {
    c.expect_arity(1, 1, 1, 1);
    return window(c, c.in(0), c.out(0));
  }
  if (op == PoolOp::MaxPoolGrad) {
    c.expect_arity(2, 2, 1, 1);
    const TensorArg& x = c.in(0);
    const TensorArg& dx = c.out(0);
    PoolWindow w = window(c, x, c.in(1));
    if (dx.shape != x.shape || dx.type != x.type)
      c.fail(fmt::format("output has shape {}, expected the input's {}", shape_str(dx.shape), shape_str(x.shape)));
    return w;
  }
  c.expect_arity(1, 1, 1, 1);
  const TensorArg& g = c.in(0);
  const TensorArg& dx = c.out(0);
  std::vector<int64_t> given = c.ints_or("input_shape", {});
  if (!given.empty() && given != dx.shape)
    c.fail(fmt::format("input_shape {} disagrees with the output's shape {}", shape_str(given), shape_str(dx.shape)));
  return window(c, dx, g);
}

}  // namespace modelc::kernels
