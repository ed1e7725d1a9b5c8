// matmul on the CPU: numpy semantics (batch dims broadcast, rank-1 operands promoted to a
// row on the left and a column on the right) over OpenBLAS's cblas_sgemm.
//
// When the right operand has no batch dims and the left one is a plain stack of matrices,
// the stack is folded into one tall sgemm ([batch*M, K] @ [K, N]), the common `x @ w` case;
// otherwise each batch element is one sgemm call. The runtime's pool does the threading
// (kernels/cpu/gemm.h): whole products per thread when there are at least as many as
// threads, otherwise row or column blocks of each product.
//
// Epilogues (runtime/base/program.h: ints["epilogue"], the bias as input 2). Three ways were
// measured on the example models' linear layers (64 rows; medians of 77-300 interleaved
// runs, 2 threads on the shared 2-core machine; numbers in the change's report):
//  (a) sgemm, then a separate pass over the result: bias+relu cost +0.3-1% over the sgemm;
//  (b) sgemm, then bias and activation on each thread's block right after its sgemm while
//      the block is in that core's cache (GemmBlockFn): the same as (a) within noise on
//      every shape measured (up to [1024,768]@[768,192]), without a second parallel_for
//      or a second trip through memory once a result outgrows the caches;
//  (c) oneDNN's matmul primitive with the bias (measured with an eltwise post-op, now ours
//      in cache: NaN must stay NaN, kernels/cpu/epilogue.h), rows split over the
//      pool and oneDNN single-threaded inside (as the convolutions): 8-14% faster than
//      (b) on the layers of at least 1 MFLOP ([64,784]@[784,256]: 254 vs 278 us;
//      [64,3136]@[3136,128]: 488 vs 567 us) -- its AVX-512 GEMM beats OpenBLAS's there --
//      but 3-6x slower on the small logits layers ([64,256]@[256,10]: 16-21 vs 5.6 us),
//      where creating the primitive costs more than the product.
// So a linear layer (x @ w with a 2-D w) of at least 1 MFLOP with an epilogue takes (c),
// everything else (b); a runtime built without oneDNN always (b). No activation is oneDNN's:
// the piece that oneDNN wrote is passed through ours in cache.
#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <optional>
#include <unordered_map>

#include "runtime/base/tensor.h"
#include "kernels/cpu/epilogue.h"
#include "kernels/cpu/gemm.h"
#include "kernels/cpu/library.h"
#include "kernels/cpu/matmul_shape.h"

#ifdef MODELC_HAVE_DNNL
#include <dnnl.hpp>
#endif

namespace modelc::kernels {

namespace {

using rt::shape_str;

#ifdef MODELC_HAVE_DNNL

// z[rows, N] = act(x[rows, K] @ y[K, N] + bias) through oneDNN's matmul primitive, the
// rows split over the pool and oneDNN single-threaded in each piece (as the convolutions,
// kernels/cpu/conv_onednn.cc). The bias is the primitive's; the activation is ours, applied
// to each piece right after it while it is in cache, which needs an f32 z: oneDNN's eltwise
// post-ops lose NaN (relu is max(x, 0); tanh and logistic clamp their input), and its gelus
// differ from the compiler's by ~1e-4 relative near x = -4.
// x and y are f32, or bf16 for the native bf16 path (f32 accumulation inside oneDNN);
// z f32 or bf16; the bias f32.
void onednn_matmul(const LibCall& c, const void* x, const void* y, void* z, dnnl::memory::data_type in,
                   dnnl::memory::data_type out, int64_t rows, int64_t N, int64_t K, const Epilogue& epi) {
  using dnnl::memory;
  using tag = memory::format_tag;
  using dt = memory::data_type;
  static dnnl::engine engine(dnnl::engine::kind::cpu, 0);
  const int64_t in_size = in == dt::f32 ? 4 : 2, out_size = out == dt::f32 ? 4 : 2;
  const auto* xb = static_cast<const char*>(x);
  auto* zb = static_cast<char*>(z);
  const memory::desc wmd({K, N}, in, tag::ab), bmd({1, N}, dt::f32, tag::ab);
  const int64_t pieces = c.pool->chunks_for(rows, 16);
  c.pool->parallel_for(pieces, 1, [&](int64_t p0, int64_t p1) {
    set_onednn_threads(1);
    for (int64_t p = p0; p < p1; ++p) {
      const int64_t r0 = p * rows / pieces, r1 = (p + 1) * rows / pieces;
      if (r0 == r1) continue;
      try {
        const memory::desc xmd({r1 - r0, K}, in, tag::ab), zmd({r1 - r0, N}, out, tag::ab);
        auto desc = epi.bias ? dnnl::matmul::desc(xmd, wmd, bmd, zmd) : dnnl::matmul::desc(xmd, wmd, zmd);
        dnnl::matmul::primitive_desc pd(desc, engine);
        dnnl::stream st(engine);
        std::unordered_map<int, memory> args{{DNNL_ARG_SRC, memory(xmd, engine, const_cast<char*>(xb + r0 * K * in_size))},
                                             {DNNL_ARG_WEIGHTS, memory(wmd, engine, const_cast<void*>(y))},
                                             {DNNL_ARG_DST, memory(zmd, engine, zb + r0 * N * out_size)}};
        if (epi.bias) args.emplace(DNNL_ARG_BIAS, memory(bmd, engine, const_cast<float*>(epi.bias)));
        dnnl::matmul(pd).execute(st, args);
        st.wait();
      } catch (const dnnl::error& e) {
        c.fail(fmt::format("oneDNN failed: {} (status {})", e.what(), static_cast<int>(e.status)));
      }
      if (epi.act != EpilogueActivation::None)
        apply_activation(epi.act, reinterpret_cast<float*>(zb + r0 * N * out_size), (r1 - r0) * N);
    }
  });
}

#endif

void matmul_impl(const LibCall& c, bool allow_onednn) {
  c.expect_arity(2, c.ints && c.ints->count("epilogue") ? 3 : 2, 1, 1);  // 3: an epilogue bias
  const TensorArg& a = c.in(0);
  const TensorArg& b = c.in(1);
  const TensorArg& out = c.out(0);
  c.expect_type(a, ElemType::F32, "left operand");
  c.expect_type(b, ElemType::F32, "right operand");
  c.expect_type(out, ElemType::F32, "output");
  const MatmulShape shape = analyze_matmul(c);  // numpy's rules, shared with the CUDA op
  const bool vec_b = shape.vec_b;
  const int64_t M = shape.M, K = shape.K, N = shape.N, nbatch = shape.nbatch;
  // The epilogue's channels are the output's last dim: N, or M when b is a vector.
  const int64_t L = shape.channels;
  const Epilogue epi = read_epilogue(c, 2, L, "output column");
  if (nbatch == 0 || M == 0 || N == 0) return;
  float* po = out.f32();
  // The epilogue over the whole result at once (rows of L), split over the pool.
  auto epilogue_all = [&] {
    if (epi.empty()) return;
    const int64_t rows = out.numel() / L;
    c.pool->parallel_for(rows, std::max<int64_t>(1, 16384 / L), [&](int64_t r0, int64_t r1) {
      apply_epilogue_rows(epi, po + r0 * L, r1 - r0, L, L, 0);
    });
  };
  if (K == 0) {
    std::memset(out.data, 0, static_cast<size_t>(out.numel()) * sizeof(float));
    return epilogue_all();
  }
  const float* pa = a.f32();
  const float* pb = b.f32();
  // With b a vector the output's rows are not the products' rows: the epilogue runs after.
  const bool blockwise = !epi.empty() && !vec_b;
  auto gemm = [&](const float* x, const float* y, float* z, int64_t m) {
    GemmBlockFn after;
    if (blockwise)
      after = [&](int64_t m0, int64_t m1, int64_t n0, int64_t n1) {
        apply_epilogue_rows(epi, z + m0 * N + n0, m1 - m0, n1 - n0, N, n0);
      };
    parallel_sgemm(*c.pool, false, false, m, N, K, x, K, y, N, 0.0f, z, N, after);
  };
  if (M * nbatch > INT32_MAX || N > INT32_MAX || K > INT32_MAX) c.fail("matrix too large for 32-bit BLAS");
  // x @ w with w shared by every batch element and a not broadcast: one tall sgemm.
  if (shape.a_folds) {
#ifdef MODELC_HAVE_DNNL
    // A linear layer with an epilogue (the choice is measured: see the top of this file).
    if (allow_onednn && blockwise && 2 * nbatch * M * N * K >= (1 << 20))
      return onednn_matmul(c, pa, pb, po, dnnl::memory::data_type::f32, dnnl::memory::data_type::f32, nbatch * M, N,
                           K, epi);
#else
    (void)allow_onednn;
#endif
    gemm(pa, pb, po, nbatch * M);
    if (!blockwise) epilogue_all();
    return;
  }
  auto offsets = [&](int64_t bi, int64_t& oa, int64_t& ob) { shape.offsets(bi, oa, ob); };
  if (nbatch >= c.pool->size() && c.pool->size() > 1 && gemm_threading() == GemmThreading::Pool) {
    // Many matrices: whole products per thread.
    c.pool->parallel_for(nbatch, 1, [&](int64_t b0, int64_t b1) {
      for (int64_t bi = b0; bi < b1; ++bi) {
        int64_t oa = 0, ob = 0;
        offsets(bi, oa, ob);
        serial_sgemm(false, false, M, N, K, pa + oa, K, pb + ob, N, 0.0f, po + bi * M * N, N);
        if (blockwise) apply_epilogue_rows(epi, po + bi * M * N, M, N, N, 0);
      }
    });
    if (!blockwise) epilogue_all();
    return;
  }
  for (int64_t bi = 0; bi < nbatch; ++bi) {
    int64_t oa = 0, ob = 0;
    offsets(bi, oa, ob);
    gemm(pa + oa, pb + ob, po + bi * M * N, M);
  }
  if (!blockwise) epilogue_all();
}

std::atomic<LowFloatMatmul>& low_float_slot() {
  static std::atomic<LowFloatMatmul> mode{LowFloatMatmul::Auto};
  return mode;
}

// bf16 @ bf16 through oneDNN's bf16 GEMM, for a linear layer (x @ w, w 2-D) with an f32 or
// bf16 output and its epilogue, except an activation on a bf16 output (activations are ours, in f32).
// Returns false, doing nothing, for any other call and when the mode says widen.
bool native_bf16_matmul(const LibCall& c) {
#ifdef MODELC_HAVE_DNNL
  const LowFloatMatmul mode = low_float_slot().load();
  if (mode == LowFloatMatmul::Widened || (mode == LowFloatMatmul::Auto && !native_bf16_available())) return false;
  if (c.inputs.size() < 2 || c.outputs.size() != 1 || !c.inputs[0].present() || !c.inputs[1].present()) return false;
  const TensorArg &a = c.inputs[0], &b = c.inputs[1], &out = c.outputs[0];
  if (a.type != ElemType::BF16 || b.type != ElemType::BF16 || (out.type != ElemType::BF16 && out.type != ElemType::F32))
    return false;
  c.expect_arity(2, c.ints && c.ints->count("epilogue") ? 3 : 2, 1, 1);
  if (c.inputs.size() > 2 && c.inputs[2].present() && c.inputs[2].type != ElemType::F32) return false;  // a bf16 bias
  const MatmulShape shape = analyze_matmul(c);
  if (!shape.a_folds || shape.vec_a || shape.vec_b) return false;
  const Epilogue epi = read_epilogue(c, 2, shape.channels, "output column");
  // The activation is ours, in f32 (onednn_matmul): on a bf16 output the widened path runs it.
  if (epi.act != EpilogueActivation::None && out.type != ElemType::F32) return false;
  const int64_t rows = shape.nbatch * shape.M;
  if (rows == 0 || shape.N == 0 || shape.K == 0) return false;  // nothing to multiply: the widened path's zeros
  using dt = dnnl::memory::data_type;
  onednn_matmul(c, a.data, b.data, out.data, dt::bf16, out.type == ElemType::F32 ? dt::f32 : dt::bf16, rows, shape.N,
                shape.K, epi);
  return true;
#else
  (void)c;
  return false;
#endif
}

}  // namespace

bool native_bf16_available() {
#ifdef MODELC_HAVE_DNNL
  // oneDNN 2.6 runs bf16 GEMMs natively from avx512_core_bf16 up (AMX included; the ISA
  // values are bit sets). Below, it has no bf16 matmul at all, or emulates it.
  static const bool yes = [] {
    const auto isa = static_cast<unsigned>(dnnl::get_effective_cpu_isa());
    return (isa & dnnl_cpu_isa_avx512_core_bf16) == dnnl_cpu_isa_avx512_core_bf16;
  }();
  return yes;
#else
  return false;
#endif
}

LowFloatMatmul low_float_matmul() { return low_float_slot().load(); }

void set_low_float_matmul(LowFloatMatmul mode) {
  if (mode == LowFloatMatmul::Native && !native_bf16_available())
    throw rt::RuntimeError(onednn_available()
                               ? "native bf16 matmul is not available: this CPU has no bf16 instructions "
                                 "(AVX512-BF16 or AMX), so bf16 matmuls are widened to f32"
                               : "native bf16 matmul is not available: the runtime was built without oneDNN");
  low_float_slot().store(mode);
}

void matmul_blas(const LibCall& c) {
  if (!run_widened(c, matmul_blas)) matmul_impl(c, false);
}
// f16 / bf16 operands (autocast, docs/precision.md): a bf16 linear layer natively where the
// CPU has bf16 instructions (native_bf16_matmul); otherwise widened to f32, one f32 product,
// the result rounded to the output's type (run_widened).
void matmul_onednn(const LibCall& c) {
  if (native_bf16_matmul(c)) return;
  if (!run_widened(c, matmul_onednn)) matmul_impl(c, true);
}

}  // namespace modelc::kernels
