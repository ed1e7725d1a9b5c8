// Scaled dot-product attention on every device: the checks and parameter block both devices
// share (plan_sdpa), the CPU kernels and the CUDA launch planners. The kernels are the
// bodies of kernels/cuda/bodies_sdpa.h (the CPU runs them over its thread pool, the GPU one
// thread per row), so both devices compute the same numbers bit for bit. kernels/library_ops.def
// names them; none needs a header.
//
// sdpa(q, k, v) -> out, stats and sdpa_grad(q, k, v, dout, stats, delta) -> dq, dk, dv, all
// f32: q [..., T, D], k [..., S, D], v [..., S, E] with equal leading dims (bh rows of heads
// in all), out and dout [..., T, E], stats [..., T, 2], delta [..., T]. Attributes:
// floats["scale"], floats["dropout"] (absent: 0), ints["causal"] (0 or 1), ints["key"]; with
// dropout, the instruction's size table gives the run's seed and step (LibCall::sizes).
#include <fmt/format.h>

#include <algorithm>
#include <vector>

#include "kernels/cpu/library.h"
#include "kernels/cuda/launches.h"
#include "runtime/base/tensor.h"

namespace modelc::kernels {

namespace {

using cuda::SdpaParams;
using rt::shape_str;

struct SdpaPlan {
  SdpaParams p{};
  int64_t bh = 1;
};

// `t` must be f32 of shape lead + tail.
void expect_shape(const LibCall& c, const TensorArg& t, const std::vector<int64_t>& lead, std::vector<int64_t> tail,
                  const char* role) {
  std::vector<int64_t> want = lead;
  want.insert(want.end(), tail.begin(), tail.end());
  if (t.type != ElemType::F32 || t.shape != want)
    c.fail(fmt::format("{} is {}{}, expected f32{}", role, dtype_name(t.type), shape_str(t.shape), shape_str(want)));
}

// The random draws of the call: its Philox site and step, from the size table.
void plan_dropout(const LibCall& c, SdpaParams& p) {
  p.dropout = c.floats && c.floats->count("dropout") ? c.float_attr("dropout") : 0.0;
  if (!(p.dropout >= 0 && p.dropout < 1)) c.fail(fmt::format("dropout must be in [0, 1), got {}", p.dropout));
  p.keep_scale = static_cast<float>(1.0 / (1.0 - p.dropout));
  if (p.dropout == 0) return;
  if (!c.sizes || c.sizes->size() != 2)
    c.fail("draws dropout but was not given the run's seed and step (its instruction's size table)");
  const PhiloxKey site = dropout_key(static_cast<uint64_t>((*c.sizes)[0]), static_cast<uint64_t>(c.int_or("key", 0)));
  p.site0 = site[0];
  p.site1 = site[1];
  p.step = static_cast<uint64_t>((*c.sizes)[1]);
}

// The checks of an sdpa or sdpa_grad call (the CPU kernels and the CUDA planners say the same
// words) and its parameter block, n left for the caller. Throws RuntimeError (LibCall::fail).
SdpaPlan plan_sdpa(const LibCall& c, bool grad) {
  if (grad) c.expect_arity(6, 6, 3, 3);
  else c.expect_arity(3, 3, 2, 2);
  const TensorArg &q = c.in(0), &k = c.in(1), &v = c.in(2);
  const int r = q.rank();
  if (r < 2) c.fail(fmt::format("q must be [..., T, D], got {}", shape_str(q.shape)));
  const std::vector<int64_t> lead(q.shape.begin(), q.shape.end() - 2);
  SdpaPlan pl;
  SdpaParams& p = pl.p;
  for (int64_t d : lead) pl.bh *= d;
  p.T = q.dim(r - 2), p.D = q.dim(r - 1);
  if (k.rank() != r || v.rank() != r) c.fail(fmt::format("k {} and v {} must have q's rank {}", shape_str(k.shape), shape_str(v.shape), r));
  p.S = k.dim(r - 2), p.E = v.dim(r - 1);
  expect_shape(c, q, lead, {p.T, p.D}, "q");
  expect_shape(c, k, lead, {p.S, p.D}, "k");
  expect_shape(c, v, lead, {p.S, p.E}, "v");
  if (p.D > kSdpaMaxHead || p.E > kSdpaMaxHead)
    c.fail(fmt::format("head sizes {} and {} must be at most {}", p.D, p.E, kSdpaMaxHead));
  if (p.S == 0 && p.T > 0) c.fail("attends to no keys (k has 0 rows)");
  if (grad) {
    expect_shape(c, c.in(3), lead, {p.T, p.E}, "dout");
    expect_shape(c, c.in(4), lead, {p.T, 2}, "stats");
    expect_shape(c, c.in(5), lead, {p.T}, "delta");
    for (int i = 0; i < 3; ++i) expect_shape(c, c.out(static_cast<size_t>(i)), {}, c.in(static_cast<size_t>(i)).shape, "a gradient");
    p.dout = static_cast<const float*>(c.in(3).data);
    p.stats = static_cast<const float*>(c.in(4).data);
    p.delta = static_cast<const float*>(c.in(5).data);
    p.dq = static_cast<float*>(c.out(0).data);
    p.dk = static_cast<float*>(c.out(1).data);
    p.dv = static_cast<float*>(c.out(2).data);
  } else {
    expect_shape(c, c.out(0), lead, {p.T, p.E}, "out");
    expect_shape(c, c.out(1), lead, {p.T, 2}, "stats");
    p.out = static_cast<float*>(c.out(0).data);
    p.stats_out = static_cast<float*>(c.out(1).data);
  }
  p.q = static_cast<const float*>(q.data);
  p.k = static_cast<const float*>(k.data);
  p.v = static_cast<const float*>(v.data);
  p.scale = static_cast<float>(c.float_attr("scale"));
  const int64_t causal = c.int_or("causal", 0);
  if (causal != 0 && causal != 1) c.fail(fmt::format("causal must be 0 or 1, got {}", causal));
  p.causal = static_cast<int32_t>(causal);
  plan_dropout(c, p);
  return pl;
}

// body(p, i) for i in [0, n) on the pool, rows of about 16k multiply-adds per chunk.
template <void (*Body)(const SdpaParams&, int64_t)>
void rows(const LibCall& c, SdpaParams p, int64_t n) {
  if (n == 0) return;
  p.n = n;
  const int64_t work = std::max<int64_t>(1, std::max(p.S, p.T) * (p.D + p.E));
  c.pool->parallel_for(n, std::max<int64_t>(1, 16384 / work), [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) Body(p, i);
  });
}

}  // namespace

void sdpa_cpu(const LibCall& c) {
  const SdpaPlan pl = plan_sdpa(c, false);
  rows<cuda::sdpa_forward_body>(c, pl.p, pl.bh * pl.p.T);
}

void sdpa_grad_cpu(const LibCall& c) {
  const SdpaPlan pl = plan_sdpa(c, true);
  rows<cuda::sdpa_grad_q_body>(c, pl.p, pl.bh * pl.p.T);
  rows<cuda::sdpa_grad_kv_body>(c, pl.p, pl.bh * pl.p.S);
}

}  // namespace modelc::kernels

namespace modelc::kernels::cuda {

// One thread per query row.
OpLaunches sdpa_launches(const LibCall& c, const ErrorWordSource&) {
  SdpaPlan pl = plan_sdpa(c, false);
  pl.p.n = pl.bh * pl.p.T;
  return one(HandKernel::SdpaForward, pl.p);
}

// Two launches: one thread per query row (dq), then one per key row (dk, dv).
OpLaunches sdpa_grad_launches(const LibCall& c, const ErrorWordSource&) {
  SdpaPlan pl = plan_sdpa(c, true);
  OpLaunches r;
  pl.p.n = pl.bh * pl.p.T;
  r.launches.push_back(Launch{HandKernel::SdpaGradQ, pl.p});
  pl.p.n = pl.bh * pl.p.S;
  r.launches.push_back(Launch{HandKernel::SdpaGradKV, pl.p});
  return r;
}

}  // namespace modelc::kernels::cuda
