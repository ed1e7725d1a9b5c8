// The launches of the hand-kernel ops: the shared plans turned into parameter blocks.
#include "kernels/cuda/launches.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>

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

Launch fill_launch(const LibCall& c) {
  const FillPlan f = plan_fill(c);
  FillParams k{};
  k.dst = c.out(0).data;
  k.n = f.n;
  k.bits = f.bits;
  Launch l;
  l.kernel = f.elem_bytes == 1 ? HandKernel::FillU8 : f.elem_bytes == 2 ? HandKernel::FillU16 : HandKernel::FillU32;
  l.params = k;
  return l;
}

OpLaunches embedding_launches(const LibCall& c, unsigned long long* error_word, bool grad) {
  const EmbeddingPlan e = grad ? plan_embedding_grad(c) : plan_embedding(c);
  if (e.ids >= (int64_t{1} << 31)) c.fail(fmt::format("has {} ids; the CUDA kernel takes fewer than 2^31", e.ids));
  OpLaunches r;
  r.checks_ids = true;
  r.ids_shape = c.in(0).shape;
  r.rows = e.rows;
  EmbeddingParams k{};
  k.ids = c.in(0).i32();
  k.src = c.in(1).f32();
  k.out = c.out(0).f32();
  k.error = error_word;
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
  Launch l;
  l.kernel = grad ? HandKernel::EmbeddingGrad : HandKernel::Embedding;
  l.params = k;
  r.launches.push_back(l);
  return r;
}

Launch pool_launch(const LibCall& c, PoolOp op) {
  const PoolWindow w = plan_pool(c, op);
  PoolParams k{};
  k.kh = w.kh, k.kw = w.kw, k.sh = w.sh, k.sw = w.sw, k.ph = w.ph, k.pw = w.pw;
  k.N = w.N, k.C = w.C, k.H = w.H, k.W = w.W, k.HO = w.HO, k.WO = w.WO;
  k.inv = 1.0f / static_cast<float>(w.kh * w.kw);
  k.out = c.out(0).f32();
  Launch l;
  switch (op) {
    case PoolOp::MaxPool:
    case PoolOp::AvgPool:
      k.x = c.in(0).f32();
      k.n = w.N * w.C * w.HO * w.WO;
      l.kernel = op == PoolOp::MaxPool ? HandKernel::MaxPool : HandKernel::AvgPool;
      break;
    case PoolOp::MaxPoolGrad:
      k.x = c.in(0).f32();
      k.g = c.in(1).f32();
      k.n = w.N * w.C * w.H * w.W;
      l.kernel = HandKernel::MaxPoolGrad;
      break;
    case PoolOp::AvgPoolGrad:
      k.g = c.in(0).f32();
      k.n = w.N * w.C * w.H * w.W;
      l.kernel = HandKernel::AvgPoolGrad;
      break;
  }
  l.params = k;
  return l;
}

template <class P>
void each(const P& p, void (*body)(const P&, int64_t)) {
  for (int64_t i = 0; i < p.n; ++i) body(p, i);
}

}  // namespace

const char* hand_kernel_name(HandKernel k) {
  switch (k) {
    case HandKernel::CopyU8: return "modelc_copy_u8";
    case HandKernel::CopyU16: return "modelc_copy_u16";
    case HandKernel::CopyU32: return "modelc_copy_u32";
    case HandKernel::FillU8: return "modelc_fill_u8";
    case HandKernel::FillU16: return "modelc_fill_u16";
    case HandKernel::FillU32: return "modelc_fill_u32";
    case HandKernel::Embedding: return "modelc_embedding";
    case HandKernel::EmbeddingGrad: return "modelc_embedding_grad";
    case HandKernel::MaxPool: return "modelc_max_pool2d";
    case HandKernel::AvgPool: return "modelc_avg_pool2d";
    case HandKernel::MaxPoolGrad: return "modelc_max_pool2d_grad";
    case HandKernel::AvgPoolGrad: return "modelc_avg_pool2d_grad";
    case HandKernel::Epilogue: return "modelc_epilogue";
  }
  return "";
}

int64_t Launch::n() const {
  return std::visit([](const auto& p) { return p.n; }, params);
}

std::vector<std::string> hand_kernel_ops() {
  return {"avg_pool2d", "avg_pool2d_grad", "broadcast_to", "concat", "copy", "embedding", "embedding_grad", "fill",
          "max_pool2d", "max_pool2d_grad", "permute", "reshape", "slice", "split", "transpose"};
}

bool is_hand_kernel_op(const std::string& op) {
  const auto ops = hand_kernel_ops();
  return std::binary_search(ops.begin(), ops.end(), op);
}

OpLaunches plan_launches(const LibCall& c, unsigned long long* error_word) {
  OpLaunches r;
  if (is_strided_copy_op(c.op)) {
    for (const StridedCopy& p : plan_movement(c))
      if (!p.in_place(c.inputs[p.src].data, c.outputs[p.dst].data)) r.launches.push_back(copy_launch(c, p));
  } else if (c.op == "fill") {
    r.launches.push_back(fill_launch(c));
  } else if (c.op == "embedding" || c.op == "embedding_grad") {
    r = embedding_launches(c, error_word, c.op == "embedding_grad");
  } else if (c.op == "max_pool2d") {
    r.launches.push_back(pool_launch(c, PoolOp::MaxPool));
  } else if (c.op == "avg_pool2d") {
    r.launches.push_back(pool_launch(c, PoolOp::AvgPool));
  } else if (c.op == "max_pool2d_grad") {
    r.launches.push_back(pool_launch(c, PoolOp::MaxPoolGrad));
  } else if (c.op == "avg_pool2d_grad") {
    r.launches.push_back(pool_launch(c, PoolOp::AvgPoolGrad));
  } else {
    c.fail("has no hand kernel on CUDA");
  }
  std::erase_if(r.launches, [](const Launch& l) { return l.n() <= 0; });
  return r;
}

Launch plan_epilogue(void* out, ElemType type, const float* bias, rt::EpilogueActivation act, int64_t rows, int64_t L,
                     int64_t inner) {
  const auto code = static_cast<int64_t>(act);
  if (code < 0 || code >= rt::kEpilogueActivations)
    throw rt::RuntimeError(fmt::format("CUDA epilogue: unknown activation code {} (known: 0 to {})", code, rt::kEpilogueActivations - 1));
  EpilogueParams k{};
  switch (type) {
    case ElemType::F32: k.type = kEpF32; break;
    case ElemType::F16: k.type = kEpF16; break;
    case ElemType::BF16: k.type = kEpBF16; break;
    default: throw rt::RuntimeError(fmt::format("CUDA epilogue: the output must be f32, f16 or bf16, got {}", rt::elem_name(type)));
  }
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
    case HandKernel::CopyU8: return each(std::get<CopyParams>(l.params), copy_body<uint8_t>);
    case HandKernel::CopyU16: return each(std::get<CopyParams>(l.params), copy_body<uint16_t>);
    case HandKernel::CopyU32: return each(std::get<CopyParams>(l.params), copy_body<uint32_t>);
    case HandKernel::FillU8: return each(std::get<FillParams>(l.params), fill_body<uint8_t>);
    case HandKernel::FillU16: return each(std::get<FillParams>(l.params), fill_body<uint16_t>);
    case HandKernel::FillU32: return each(std::get<FillParams>(l.params), fill_body<uint32_t>);
    case HandKernel::Embedding: return each(std::get<EmbeddingParams>(l.params), embedding_body);
    case HandKernel::EmbeddingGrad: return each(std::get<EmbeddingParams>(l.params), embedding_grad_body);
    case HandKernel::MaxPool: return each(std::get<PoolParams>(l.params), pool_body<true>);
    case HandKernel::AvgPool: return each(std::get<PoolParams>(l.params), pool_body<false>);
    case HandKernel::MaxPoolGrad: return each(std::get<PoolParams>(l.params), pool_grad_body<true>);
    case HandKernel::AvgPoolGrad: return each(std::get<PoolParams>(l.params), pool_grad_body<false>);
    case HandKernel::Epilogue: return each(std::get<EpilogueParams>(l.params), epilogue_body);
  }
}

void fail_id_error(const LibCall& c, unsigned long long word, const std::vector<int64_t>& ids_shape, int64_t rows) {
  const auto position = static_cast<int64_t>(word >> 32);
  const auto id = static_cast<int32_t>(static_cast<uint32_t>(word & 0xffffffffu));
  c.fail(embedding_id_error(id, position, ids_shape, rows));
}

}  // namespace modelc::kernels::cuda
