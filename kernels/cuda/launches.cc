// The launches of the hand-kernel ops: the shared plans turned into parameter blocks, one
// planner per op of kernels/library_ops.def's MODELC_CUDA_HAND entries, and the kernels of
// kernels/cuda/hand_kernels.def by name and on the host.
#include "kernels/cuda/launches.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#include <map>

#include "kernels/cpu/embedding_plan.h"
#include "kernels/cpu/movement_plan.h"
#include "kernels/cpu/pool_plan.h"

namespace modelc::kernels::cuda {

namespace {

bool aligned4(const void* p) { return reinterpret_cast<uintptr_t>(p) % 4 == 0; }

// A copy of 1- or 2-byte elements moves 4-byte words instead when its last dim is
// contiguous on both sides and every offset is a whole number of aligned words.
void widen(StridedCopy& p, const void* src, const void* dst) {
  if (p.elem_bytes >= 4 || p.shape.empty()) return;
  const auto f = static_cast<int64_t>(4 / p.elem_bytes);
  const size_t last = p.shape.size() - 1;
  bool ok = p.src_stride[last] == 1 && p.dst_stride[last] == 1 && p.shape[last] % f == 0 && p.src_base % f == 0 &&
            p.dst_base % f == 0 && aligned4(src) && aligned4(dst);
  for (size_t k = 0; ok && k < last; ++k) ok = p.src_stride[k] % f == 0 && p.dst_stride[k] % f == 0;
  if (!ok) return;
  p.shape[last] /= f;
  for (size_t k = 0; k < last; ++k) p.src_stride[k] /= f, p.dst_stride[k] /= f;
  p.src_base /= f;
  p.dst_base /= f;
  p.elem_bytes = 4;
}

Launch copy_launch(const LibCall& c, StridedCopy p) {
  const void* src = c.inputs[p.src].data;
  void* dst = c.outputs[p.dst].data;
  widen(p, src, dst);
  if (p.shape.size() > static_cast<size_t>(kMaxCopyRank))
    c.fail(fmt::format("copies {} dims that cannot be merged; the CUDA copy takes at most {}", p.shape.size(), kMaxCopyRank));
  CopyParams k{};
  k.src = src;
  k.dst = dst;
  k.n = p.numel();
  k.rank = static_cast<int64_t>(p.shape.size());
  for (size_t d = 0; d < p.shape.size(); ++d) {
    k.shape[d] = p.shape[d];
    k.src_stride[d] = p.src_stride[d];
    k.dst_stride[d] = p.dst_stride[d];
  }
  k.src_base = p.src_base;
  k.dst_base = p.dst_base;
  Launch l;
  l.kernel = p.elem_bytes == 1 ? HandKernel::CopyU8 : p.elem_bytes == 2 ? HandKernel::CopyU16 : HandKernel::CopyU32;
  l.params = k;
  return l;
}

// ---- the planners of kernels/library_ops.def (HandPlanner) ----------------------------------

template <MovementPlanner P>
OpLaunches strided_copy_launches(const LibCall& c, const ErrorWordSource&) {
  OpLaunches r;
  for (const StridedCopy& p : P(c))
    if (!p.in_place(c.inputs[p.src].data, c.outputs[p.dst].data)) r.launches.push_back(copy_launch(c, p));
  return r;
}

OpLaunches fill_launches(const LibCall& c, const ErrorWordSource&) {
  const FillPlan f = plan_fill(c);
  FillParams k{};
  k.dst = c.out(0).data;
  k.n = f.n;
  k.bits = f.bits;
  return one(f.elem_bytes == 1 ? HandKernel::FillU8 : f.elem_bytes == 2 ? HandKernel::FillU16 : HandKernel::FillU32, k);
}

template <bool grad>
OpLaunches embedding_op_launches(const LibCall& c, const ErrorWordSource& error_word) {
  const EmbeddingPlan e = grad ? plan_embedding_grad(c) : plan_embedding(c);
  if (e.ids >= (int64_t{1} << 31)) c.fail(fmt::format("has {} ids; the CUDA kernel takes fewer than 2^31", e.ids));
  if (!error_word) c.fail("has no error word for its id check (plan_launches needs an ErrorWordSource)");
  OpLaunches r;
  r.checks_ids = true;
  r.ids_shape = c.in(0).shape;
  r.rows = e.rows;
  EmbeddingParams k{};
  k.ids = c.in(0).i32();
  k.src = c.in(1).f32();
  k.out = c.out(0).f32();
  k.error = error_word();
  k.ids_count = e.ids;
  k.rows = e.rows;
  k.width = e.width;
  if (grad) {
    // Enough (range, column) owners to fill a GPU, never more ranges than rows.
    k.parts = std::clamp<int64_t>((65536 + std::max<int64_t>(e.width, 1) - 1) / std::max<int64_t>(e.width, 1), 1,
                                  std::max<int64_t>(e.rows, 1));
    k.n = k.parts * e.width;
  } else {
    k.parts = 1;
    k.n = e.ids * e.width;
  }
  r.launches.push_back({grad ? HandKernel::EmbeddingGrad : HandKernel::Embedding, k});
  return r;
}

template <PoolOp op>
OpLaunches pool_launches(const LibCall& c, const ErrorWordSource&) {
  const PoolWindow w = plan_pool(c, op);
  PoolParams k{};
  k.kh = w.kh, k.kw = w.kw, k.sh = w.sh, k.sw = w.sw, k.ph = w.ph, k.pw = w.pw;
  k.N = w.N, k.C = w.C, k.H = w.H, k.W = w.W, k.HO = w.HO, k.WO = w.WO;
  k.inv = 1.0f / static_cast<float>(w.kh * w.kw);
  k.out = c.out(0).f32();
  HandKernel kernel = HandKernel::MaxPool;
  switch (op) {
    case PoolOp::MaxPool:
    case PoolOp::AvgPool:
      k.x = c.in(0).f32();
      k.n = w.N * w.C * w.HO * w.WO;
      kernel = op == PoolOp::MaxPool ? HandKernel::MaxPool : HandKernel::AvgPool;
      break;
    case PoolOp::MaxPoolGrad:
      k.x = c.in(0).f32();
      k.g = c.in(1).f32();
      k.n = w.N * w.C * w.H * w.W;
      kernel = HandKernel::MaxPoolGrad;
      break;
    case PoolOp::AvgPoolGrad:
      k.g = c.in(0).f32();
      k.n = w.N * w.C * w.H * w.W;
      kernel = HandKernel::AvgPoolGrad;
      break;
  }
  return one(kernel, k);
}

}  // namespace

// The planners kernels/library_ops.def names (a template instance each).
#define MODELC_MOVEMENT(op)                                               \
  OpLaunches op##_launches(const LibCall& c, const ErrorWordSource& w) {  \
    return strided_copy_launches<plan_##op>(c, w);                        \
  }
MODELC_MOVEMENT_OPS(MODELC_MOVEMENT)
#undef MODELC_MOVEMENT
OpLaunches max_pool2d_launches(const LibCall& c, const ErrorWordSource& w) { return pool_launches<PoolOp::MaxPool>(c, w); }
OpLaunches avg_pool2d_launches(const LibCall& c, const ErrorWordSource& w) { return pool_launches<PoolOp::AvgPool>(c, w); }
OpLaunches max_pool2d_grad_launches(const LibCall& c, const ErrorWordSource& w) {
  return pool_launches<PoolOp::MaxPoolGrad>(c, w);
}
OpLaunches avg_pool2d_grad_launches(const LibCall& c, const ErrorWordSource& w) {
  return pool_launches<PoolOp::AvgPoolGrad>(c, w);
}
OpLaunches embedding_launches(const LibCall& c, const ErrorWordSource& w) { return embedding_op_launches<false>(c, w); }
OpLaunches embedding_grad_launches(const LibCall& c, const ErrorWordSource& w) { return embedding_op_launches<true>(c, w); }

// Every planner of the table is declared by it (those defined elsewhere, such as
// cumsum_launches in kernels/cumsum.cc, need no header).
#define MODELC_CUDA_HAND(planner) OpLaunches planner(const LibCall&, const ErrorWordSource&);
#define MODELC_CUDA_LIBRARY(fn)
#define MODELC_LIBRARY_OP(name, cpu, cuda) cuda
#include "kernels/library_ops.def"

namespace {

template <class P>
void each(const P& p, void (*body)(const P&, int64_t)) {
  for (int64_t i = 0; i < p.n; ++i) body(p, i);
}

void add(std::map<std::string, HandPlanner>& t, const char* op, HandPlanner planner) {
  if (planner != nullptr) t.emplace(op, planner);
}

// kernels/library_ops.def's hand-kernel ops, by name.
const std::map<std::string, HandPlanner>& planners() {
  static const std::map<std::string, HandPlanner> t = [] {
    std::map<std::string, HandPlanner> r;
#define MODELC_CUDA_HAND(planner) planner
#define MODELC_CUDA_LIBRARY(fn) nullptr
#define MODELC_LIBRARY_OP(name, cpu, cuda) add(r, #name, cuda);
#include "kernels/library_ops.def"
    return r;
  }();
  return t;
}

#define MODELC_HAND_KERNEL(kernel, entry, Params, body) \
  static_assert(std::is_trivially_copyable_v<Params>, #Params " is passed to " #entry " by value");
#include "kernels/cuda/hand_kernels.def"

}  // namespace

// The FloatType (bodies.h) of `t`; -1 for a type that is not f32, f16 or bf16.
int32_t float_type(ElemType t) {
  switch (t) {
    case ElemType::F32: return kFloatF32;
    case ElemType::F16: return kFloatF16;
    case ElemType::BF16: return kFloatBF16;
    default: return -1;
  }
}

OpLaunches one(HandKernel kernel, LaunchParams params) {
  OpLaunches r;
  r.launches.push_back({kernel, params});
  return r;
}

const char* hand_kernel_name(HandKernel k) {
  static constexpr const char* names[] = {
#define MODELC_HAND_KERNEL(kernel, entry, Params, body) #entry,
#include "kernels/cuda/hand_kernels.def"
  };
  const auto i = static_cast<size_t>(k);
  return i < std::size(names) ? names[i] : "";
}

int64_t Launch::n() const {
  return std::visit([](const auto& p) { return p.n; }, params);
}

std::vector<std::string> hand_kernel_ops() {
  std::vector<std::string> names;
  for (const auto& [op, planner] : planners()) names.push_back(op);
  return names;
}

OpLaunches plan_launches(const LibCall& c, const ErrorWordSource& error_word) {
  auto it = planners().find(c.op);
  if (it == planners().end()) c.fail("has no hand kernel on CUDA");
  OpLaunches r = it->second(c, error_word);
  std::erase_if(r.launches, [](const Launch& l) { return l.n() <= 0; });
  return r;
}

Launch plan_epilogue(void* out, ElemType type, const float* bias, rt::EpilogueActivation act, int64_t rows, int64_t L,
                     int64_t inner) {
  const auto code = static_cast<int64_t>(act);
  if (code < 0 || code >= rt::kEpilogueActivations)
    throw rt::RuntimeError(fmt::format("CUDA epilogue: unknown activation code {} (known: 0 to {})", code, rt::kEpilogueActivations - 1));
  EpilogueParams k{};
  k.type = float_type(type);
  if (k.type < 0)
    throw rt::RuntimeError(fmt::format("CUDA epilogue: the output must be f32, f16 or bf16, got {}", dtype_name(type)));
  if (rows < 0 || L < 0 || inner < 1)
    throw rt::RuntimeError(fmt::format("CUDA epilogue: bad extent {} x {} x {}", rows, L, inner));
  k.out = out;
  k.bias = bias;
  k.n = rows * L * inner;
  k.L = L;
  k.inner = inner;
  k.act = static_cast<int32_t>(code);
  Launch l;
  l.kernel = HandKernel::Epilogue;
  l.params = k;
  return l;
}

void run_on_host(const Launch& l) {
  switch (l.kernel) {
#define MODELC_HAND_KERNEL(kernel, entry, Params, body) \
  case HandKernel::kernel: return each(std::get<Params>(l.params), body);
#include "kernels/cuda/hand_kernels.def"
  }
}

void fail_id_error(const LibCall& c, unsigned long long word, const std::vector<int64_t>& ids_shape, int64_t rows) {
  const auto position = static_cast<int64_t>(word >> 32);
  const auto id = static_cast<int32_t>(static_cast<uint32_t>(word & 0xffffffffu));
  c.fail(embedding_id_error(id, position, ids_shape, rows));
}

}  // namespace modelc::kernels::cuda
