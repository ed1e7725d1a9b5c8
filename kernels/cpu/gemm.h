// sgemm spread over the runtime's thread pool: OpenBLAS runs single-threaded on each
// block of rows or columns of the result (never split along K). Measured against
// OpenBLAS's own threads in docs/performance.md.
#pragma once

#include <cstdint>

#include "runtime/cpu/thread_pool.h"

namespace modelc::kernels {

// Who threads sgemm. Pool (the default): OpenBLAS runs single-threaded and the runtime's
// pool splits the work. OpenBlas: one OpenBLAS call at a time with its own `threads`
// threads. Process-wide (OpenBLAS's thread count is).
enum class GemmThreading : uint8_t { Pool, OpenBlas };
void set_gemm_threading(GemmThreading mode, int threads);
GemmThreading gemm_threading();

// Row-major C[M,N] = op(A) op(B) + beta*C, op = transpose when ta/tb.
void parallel_sgemm(rt::ThreadPool& pool, bool ta, bool tb, int64_t M, int64_t N, int64_t K, const float* A, int64_t lda,
                    const float* B, int64_t ldb, float beta, float* C, int64_t ldc);

// The same on the calling thread only (for callers that are already parallel).
void serial_sgemm(bool ta, bool tb, int64_t M, int64_t N, int64_t K, const float* A, int64_t lda, const float* B,
                  int64_t ldb, float beta, float* C, int64_t ldc);

}  // namespace modelc::kernels
