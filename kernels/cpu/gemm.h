// sgemm spread over the runtime's thread pool: OpenBLAS runs single-threaded on each
// block of rows or columns of the result (never split along K). Measured against
// OpenBLAS's own threads in docs/performance.md.
#pragma once

#include <cstdint>
#include <functional>

#include "kernels/cpu/library.h"
#include "runtime/device/cpu/thread_pool.h"

namespace modelc::kernels {

// Who threads sgemm. Pool (the default): OpenBLAS runs single-threaded and the runtime's
// pool splits the work. OpenBlas: one OpenBLAS call at a time with its own `threads`
// threads. Process-wide (OpenBLAS's thread count is).
enum class GemmThreading : uint8_t { Pool, OpenBlas };
void set_gemm_threading(GemmThreading mode, int threads);
GemmThreading gemm_threading();

// Called on each block of C right after its sgemm, on the thread that computed it, while the
// block is still in that core's cache: rows [m0, m1) and columns [n0, n1) of C. Library
// epilogues (bias and activation, kernels/cpu/epilogue.h) run here.
using GemmBlockFn = std::function<void(int64_t m0, int64_t m1, int64_t n0, int64_t n1)>;

// Row-major C[M,N] = op(A) op(B) + beta*C, op = transpose when ta/tb; then `after` (when
// set) on each block of C.
void parallel_sgemm(rt::ThreadPool& pool, bool ta, bool tb, int64_t M, int64_t N, int64_t K, const float* A, int64_t lda,
                    const float* B, int64_t ldb, float beta, float* C, int64_t ldc, const GemmBlockFn& after = {});

// matmul (kernels/cpu/matmul.cc) with a library epilogue takes one of two paths; the
// library table's entry is matmul_onednn. These are for tests and benchmarks.
//  - matmul_blas: sgemm split over the pool, the epilogue applied to each block of the
//    result by the thread that computed it, right after its sgemm (GemmBlockFn);
//  - matmul_onednn: a linear layer (x @ w, w 2-D) of at least 1 MFLOP with an epilogue
//    goes through oneDNN's matmul primitive with bias and eltwise post-op; everything else,
//    and every call without oneDNN built in, as matmul_blas.
void matmul_blas(const LibCall& c);
void matmul_onednn(const LibCall& c);

// The same on the calling thread only (for callers that are already parallel).
void serial_sgemm(bool ta, bool tb, int64_t M, int64_t N, int64_t K, const float* A, int64_t lda, const float* B,
                  int64_t ldb, float beta, float* C, int64_t ldc);

}  // namespace modelc::kernels
