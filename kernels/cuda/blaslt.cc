// matmul on CUDA through cuBLASLt (runtime/device/cuda/blaslt_api.h, loaded with dlopen).
//
// The operands are row-major; cuBLASLt is column-major. A row-major X[r, c] is the
// column-major X^T with leading dimension c, so C = A @ B is computed as C^T = B^T A^T:
// cuBLASLt's A is our b (N x K, ld N), its B our a (K x M, ld K), its D our out (N x M,
// ld N), no transposes. The shape rules are the CPU op's (kernels/cpu/matmul_shape.h):
//  - a stack of matrices times one matrix folds into one tall product ([batch*M, K] @ [K, N]);
//  - batch dims where each operand is either full or absent run as one strided-batched call
//    (stride 0 for the absent side);
//  - anything else (e.g. [2,1,M,K] @ [1,3,K,N]) one call per batch element.
// Types: f32 (compute f32, or tf32 where the device allows it: CudaMatmulOptions), f16 and
// bf16 inputs with f32 accumulation and an f32 or same-type output. Epilogues: a bias alone
// is cuBLASLt's (CUBLASLT_EPILOGUE_BIAS), on a single product with an f32 output; every
// other epilogue, every activation included (NaN must stay NaN), runs as a hand kernel after
// the product (kernels/cuda/epilogue.h).
#include <fmt/format.h>

#include <mutex>

#include "kernels/cpu/epilogue.h"
#include "kernels/cpu/matmul_shape.h"
#include "kernels/cuda/epilogue.h"
#include "runtime/device/cuda/blaslt_api.h"
#include "runtime/device/cuda/cuda_device.h"
#include "runtime/device/cuda/dynlib.h"
#include "kernels/cuda/library.h"

namespace modelc::rt::cuda {
namespace {

using kernels::Epilogue;
using kernels::LibCall;
using kernels::MatmulShape;
using kernels::TensorArg;

constexpr size_t kWorkspaceBytes = size_t{32} << 20;

struct BlasLt {
  DynLib lib;
  lt::Api api;
  std::string reason;  // "" when usable
};

const BlasLt& blaslt() {
  static const BlasLt* b = [] {
    auto* r = new BlasLt;
    r->lib = load_library("cuBLASLt", "MODELC_LIBCUBLASLT", {"libcublasLt.so.13", "libcublasLt.so.12", "libcublasLt.so"});
    if (!r->lib.handle) {
      r->reason = r->lib.reason;
      return r;
    }
    std::string missing;
#define MODELC_CUBLASLT_RESOLVE(name, type) resolve(r->lib, #name, r->api.name, missing);
    MODELC_CUBLASLT_FUNCTIONS(MODELC_CUBLASLT_RESOLVE)
#undef MODELC_CUBLASLT_RESOLVE
    if (!missing.empty()) r->reason = fmt::format("cuBLASLt at {} lacks {}", r->lib.path, missing);
    return r;
  }();
  return *b;
}

// Throws CudaError "FILE:LINE: ENTRY failed: CUBLAS_STATUS_NAME (text)".
void check(lt::Status s, const char* call, const char* file, int line) {
  if (s == lt::kSuccess) return;
  const lt::Api& api = blaslt().api;
  call_failed(call, file, line, fmt::format("{} ({})", api.cublasLtGetStatusName(s), api.cublasLtGetStatusString(s)), s);
}
#define MODELC_LT(call) check(blaslt().api.call, #call, __FILE__, __LINE__)

lt::Handle handle_for(CudaDevice& d) {
  const BlasLt& b = blaslt();
  if (!b.reason.empty()) throw RuntimeError(fmt::format("matmul on CUDA needs cuBLASLt: {}", b.reason));
  CudaDevice::LibraryState& s = d.library_state("cublasLt");
  if (s.handle == nullptr) {
    lt::Handle h = nullptr;
    MODELC_LT(cublasLtCreate(&h));
    s.handle = h;
    s.destroy = [](void* p) { blaslt().api.cublasLtDestroy(static_cast<lt::Handle>(p)); };
  }
  return static_cast<lt::Handle>(s.handle);
}

int data_type(const LibCall& c, ElemType t, const char* role) {
  switch (t) {
    case ElemType::F32: return lt::kR32F;
    case ElemType::F16: return lt::kR16F;
    case ElemType::BF16: return lt::kR16BF;
    default: c.fail(fmt::format("{} must be f32, f16 or bf16, got {}", role, dtype_name(t)));
  }
}

// The descriptors of one cuBLASLt call, destroyed with it.
struct Descs {
  lt::MatmulDesc op = nullptr;
  lt::MatrixLayout a = nullptr, b = nullptr, d = nullptr;
  lt::MatmulPreference pref = nullptr;
  ~Descs() {
    const lt::Api& api = blaslt().api;
    if (pref) api.cublasLtMatmulPreferenceDestroy(pref);
    if (d) api.cublasLtMatrixLayoutDestroy(d);
    if (b) api.cublasLtMatrixLayoutDestroy(b);
    if (a) api.cublasLtMatrixLayoutDestroy(a);
    if (op) api.cublasLtMatmulDescDestroy(op);
  }
};

void set_batch(lt::MatrixLayout l, int32_t count, int64_t stride) {
  if (count <= 1) return;
  MODELC_LT(cublasLtMatrixLayoutSetAttribute(l, lt::kLayoutBatchCount, &count, sizeof(count)));
  MODELC_LT(cublasLtMatrixLayoutSetAttribute(l, lt::kLayoutStridedBatchOffset, &stride, sizeof(stride)));
}

// D[rows x N] (row-major) = A[rows x K] @ B[K x N], `count` times with element strides
// sa, sb, sd; with `lt_epilogue` the bias/activation of `epi` in cuBLASLt's epilogue.
void lt_matmul(const CudaLibCall& cc, const void* A, int ta, const void* B, int tb, void* D, int td, int64_t rows, int64_t K,
               int64_t N, int32_t count, int64_t sa, int64_t sb, int64_t sd, uint32_t lt_epilogue, const float* bias) {
  CudaDevice& dev = *cc.device;
  lt::Handle h = handle_for(dev);
  Descs ds;
  const int compute = ta == lt::kR32F && dev.allow_tf32() ? lt::kCompute32FFastTF32 : lt::kCompute32F;
  MODELC_LT(cublasLtMatmulDescCreate(&ds.op, compute, lt::kR32F));
  if (lt_epilogue != lt::kEpilogueDefault) {
    MODELC_LT(cublasLtMatmulDescSetAttribute(ds.op, lt::kDescEpilogue, &lt_epilogue, sizeof(lt_epilogue)));
    MODELC_LT(cublasLtMatmulDescSetAttribute(ds.op, lt::kDescBiasPointer, &bias, sizeof(bias)));
  }
  // Column-major: cuBLASLt's A is our B (N x K), its B our A (K x rows), D is N x rows.
  MODELC_LT(cublasLtMatrixLayoutCreate(&ds.a, tb, static_cast<uint64_t>(N), static_cast<uint64_t>(K), N));
  MODELC_LT(cublasLtMatrixLayoutCreate(&ds.b, ta, static_cast<uint64_t>(K), static_cast<uint64_t>(rows), K));
  MODELC_LT(cublasLtMatrixLayoutCreate(&ds.d, td, static_cast<uint64_t>(N), static_cast<uint64_t>(rows), N));
  set_batch(ds.a, count, sb);
  set_batch(ds.b, count, sa);
  set_batch(ds.d, count, sd);
  MODELC_LT(cublasLtMatmulPreferenceCreate(&ds.pref));
  const uint64_t ws = kWorkspaceBytes;
  MODELC_LT(cublasLtMatmulPreferenceSetAttribute(ds.pref, lt::kPrefMaxWorkspaceBytes, &ws, sizeof(ws)));
  lt::HeuristicResult result{};
  int found = 0;
  MODELC_LT(cublasLtMatmulAlgoGetHeuristic(h, ds.op, ds.a, ds.b, ds.d, ds.d, ds.pref, 1, &result, &found));
  if (found == 0)
    cc.call.fail(fmt::format("cuBLASLt has no algorithm for [{}, {}] @ [{}, {}] x {}", rows, K, K, N, count));
  void* workspace = dev.workspace(kWorkspaceBytes, cc.stream);
  const float alpha = 1.0f, beta = 0.0f;
  MODELC_LT(cublasLtMatmul(h, ds.op, &alpha, B, ds.a, A, ds.b, &beta, D, ds.d, D, ds.d, &result.algo, workspace,
                           kWorkspaceBytes, cc.stream));
}

}  // namespace

void matmul_cuda(const CudaLibCall& cc) {
  const LibCall& c = cc.call;
  c.expect_arity(2, c.ints && c.ints->count("epilogue") ? 3 : 2, 1, 1);
  const MatmulShape s = kernels::analyze_matmul(c);
  const TensorArg& a = c.in(0);
  const TensorArg& b = c.in(1);
  const TensorArg& out = c.out(0);
  const int ta = data_type(c, a.type, "left operand");
  const int tb = data_type(c, b.type, "right operand");
  const int td = data_type(c, out.type, "output");
  if (ta != tb) c.fail(fmt::format("operands must have one type, got {} @ {}", dtype_name(a.type), dtype_name(b.type)));
  if (td != lt::kR32F && td != ta) c.fail(fmt::format("output must be f32 or {}, got {}", dtype_name(a.type), dtype_name(out.type)));
  const Epilogue epi = kernels::read_epilogue(c, 2, s.channels, "output column");
  if (s.nbatch == 0 || s.M == 0 || s.N == 0) return;
  const Driver& drv = cc.device->driver();
  const size_t eb = dtype_bytes(a.type), ed = dtype_bytes(out.type);
  auto at = [](const TensorArg& t, int64_t elems, size_t bytes) { return static_cast<uint8_t*>(t.data) + elems * static_cast<int64_t>(bytes); };
  const int64_t rows_total = out.numel() / s.channels;
  if (s.K == 0) {
    MODELC_CU(drv, cuMemsetD8Async(reinterpret_cast<CUdeviceptr>(out.data), 0, static_cast<size_t>(out.numel()) * ed, cc.stream));
    if (!epi.empty()) kernels::cuda::cuda_epilogue(cc, out.data, out.type, epi.bias, epi.act, rows_total, s.channels);
    return;
  }
  // cuBLASLt's own epilogue for a bias alone (one product, f32 output). Its activations are
  // not documented to keep NaN (a relu as max(x, 0) makes it 0); ours are, as IEEE and PyTorch
  // say (kernels/cuda/bodies.h, ep_activation), so an activation runs as our epilogue kernel.
  const bool single = s.a_folds || s.nbatch == 1;
  uint32_t lt_epi = lt::kEpilogueDefault;
  if (epi.act == EpilogueActivation::None && single && !s.vec_b && td == lt::kR32F && epi.bias != nullptr)
    lt_epi = lt::kEpilogueBias;
  if (single) {
    lt_matmul(cc, a.data, ta, b.data, tb, out.data, td, s.nbatch * s.M, s.K, s.N, 1, 0, 0, 0, lt_epi, epi.bias);
  } else {
    // One strided-batched call when each operand is batched in every batch dim of the output
    // (element bi at bi * its matrix size) or in none (stride 0).
    bool a_all = true, b_all = true, a_none = true, b_none = true;
    for (size_t k = 0; k < s.batch.size(); ++k) {
      a_none = a_none && s.stride_a[k] == 0;
      b_none = b_none && s.stride_b[k] == 0;
      if (s.batch[k] == 1) continue;
      a_all = a_all && s.stride_a[k] != 0;
      b_all = b_all && s.stride_b[k] != 0;
    }
    if ((a_all || a_none) && (b_all || b_none) && s.nbatch <= INT32_MAX) {
      lt_matmul(cc, a.data, ta, b.data, tb, out.data, td, s.M, s.K, s.N, static_cast<int32_t>(s.nbatch),
                a_all ? s.M * s.K : 0, b_all ? s.K * s.N : 0, s.M * s.N, lt::kEpilogueDefault, nullptr);
    } else {
      for (int64_t bi = 0; bi < s.nbatch; ++bi) {
        int64_t oa = 0, ob = 0;
        s.offsets(bi, oa, ob);
        lt_matmul(cc, at(a, oa, eb), ta, at(b, ob, eb), tb, at(out, bi * s.M * s.N, ed), td, s.M, s.K, s.N, 1, 0, 0, 0,
                  lt::kEpilogueDefault, nullptr);
      }
    }
  }
  if (!epi.empty() && lt_epi == lt::kEpilogueDefault)
    kernels::cuda::cuda_epilogue(cc, out.data, out.type, epi.bias, epi.act, rows_total, s.channels);
}

std::string blaslt_status() {
  const BlasLt& b = blaslt();
  return b.reason.empty() ? fmt::format("cuBLASLt {} ({})", b.api.cublasLtGetVersion(), b.lib.path) : b.reason;
}

}  // namespace modelc::rt::cuda
