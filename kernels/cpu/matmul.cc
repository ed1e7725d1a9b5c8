// matmul on the CPU: numpy semantics (batch dims broadcast, rank-1 operands promoted to a
// row on the left and a column on the right) over OpenBLAS's cblas_sgemm.
//
// When the right operand has no batch dims and the left one is a plain stack of matrices,
// the stack is folded into one tall sgemm ([batch*M, K] @ [K, N]), the common `x @ w` case;
// otherwise each batch element is one sgemm call. The runtime's pool does the threading
// (kernels/cpu/gemm.h): whole products per thread when there are at least as many as
// threads, otherwise row or column blocks of each product.
#include <fmt/format.h>

#include <algorithm>
#include <cstring>

#include "runtime/tensor.h"
#include "kernels/cpu/gemm.h"
#include "kernels/cpu/library.h"

namespace modelc::kernels {

namespace {

using rt::shape_str;

void matmul(const LibCall& c) {
  c.expect_arity(2, 2, 1, 1);
  const TensorArg& a = c.in(0);
  const TensorArg& b = c.in(1);
  const TensorArg& out = c.out(0);
  c.expect_type(a, ElemType::F32, "left operand");
  c.expect_type(b, ElemType::F32, "right operand");
  c.expect_type(out, ElemType::F32, "output");
  if (a.rank() == 0 || b.rank() == 0) c.fail(fmt::format("operands must have rank >= 1, got {} @ {}", shape_str(a.shape), shape_str(b.shape)));
  std::vector<int64_t> sa = a.shape, sb = b.shape;
  bool vec_a = sa.size() == 1, vec_b = sb.size() == 1;
  if (vec_a) sa.insert(sa.begin(), 1);
  if (vec_b) sb.push_back(1);
  int64_t M = sa[sa.size() - 2], K = sa.back(), N = sb.back();
  std::string mismatch = fmt::format("shape mismatch: {} @ {}", shape_str(a.shape), shape_str(b.shape));
  if (sb[sb.size() - 2] != K) c.fail(mismatch + " (inner dimensions differ)");
  // Broadcast the batch dims (right-aligned).
  std::vector<int64_t> ba(sa.begin(), sa.end() - 2), bb(sb.begin(), sb.end() - 2);
  size_t nb = std::max(ba.size(), bb.size());
  std::vector<int64_t> batch(nb, 1);
  for (size_t k = 0; k < nb; ++k) {
    int64_t da = k + ba.size() >= nb ? ba[k + ba.size() - nb] : 1;
    int64_t db = k + bb.size() >= nb ? bb[k + bb.size() - nb] : 1;
    if (da != db && da != 1 && db != 1) c.fail(mismatch + " (batch dimensions do not broadcast)");
    batch[k] = da == 1 ? db : da;
  }
  std::vector<int64_t> want = batch;
  if (!vec_a) want.push_back(M);
  if (!vec_b) want.push_back(N);
  if (out.shape != want) c.fail(fmt::format("output has shape {}, expected {} for {} @ {}", shape_str(out.shape),
                                            shape_str(want), shape_str(a.shape), shape_str(b.shape)));
  int64_t nbatch = 1;
  for (int64_t d : batch) nbatch *= d;
  if (nbatch == 0 || M == 0 || N == 0) return;
  if (K == 0) {
    std::memset(out.data, 0, static_cast<size_t>(out.numel()) * sizeof(float));
    return;
  }
  const float* pa = a.f32();
  const float* pb = b.f32();
  float* po = out.f32();
  auto gemm = [&](const float* x, const float* y, float* z, int64_t m) {
    parallel_sgemm(*c.pool, false, false, m, N, K, x, K, y, N, 0.0f, z, N);
  };
  if (M * nbatch > INT32_MAX || N > INT32_MAX || K > INT32_MAX) c.fail("matrix too large for 32-bit BLAS");
  // x @ w with w shared by every batch element and a not broadcast: one tall sgemm.
  int64_t na = 1;
  for (int64_t d : ba) na *= d;
  if (bb.empty() && na == nbatch) return gemm(pa, pb, po, nbatch * M);
  // Strides of each operand's batch dims (0 where broadcast).
  std::vector<int64_t> sta(nb, 0), stb(nb, 0);
  int64_t s = M * K;
  for (size_t k = ba.size(); k-- > 0;) {
    if (ba[k] != 1) sta[k + nb - ba.size()] = s;
    s *= ba[k];
  }
  s = K * N;
  for (size_t k = bb.size(); k-- > 0;) {
    if (bb[k] != 1) stb[k + nb - bb.size()] = s;
    s *= bb[k];
  }
  auto offsets = [&](int64_t bi, int64_t& oa, int64_t& ob) {
    oa = ob = 0;
    for (size_t k = nb; k-- > 0;) {
      int64_t i = bi % batch[k];
      bi /= batch[k];
      oa += i * sta[k], ob += i * stb[k];
    }
  };
  if (nbatch >= c.pool->size() && c.pool->size() > 1 && gemm_threading() == GemmThreading::Pool) {
    // Many matrices: whole products per thread.
    c.pool->parallel_for(nbatch, 1, [&](int64_t b0, int64_t b1) {
      for (int64_t bi = b0; bi < b1; ++bi) {
        int64_t oa = 0, ob = 0;
        offsets(bi, oa, ob);
        serial_sgemm(false, false, M, N, K, pa + oa, K, pb + ob, N, 0.0f, po + bi * M * N, N);
      }
    });
    return;
  }
  for (int64_t bi = 0; bi < nbatch; ++bi) {
    int64_t oa = 0, ob = 0;
    offsets(bi, oa, ob);
    gemm(pa + oa, pb + ob, po + bi * M * N, M);
  }
}

}  // namespace

void register_matmul_ops(LibraryTable& t) { t["matmul"] = matmul; }

}  // namespace modelc::kernels
