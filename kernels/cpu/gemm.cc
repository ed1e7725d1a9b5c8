// sgemm over the thread pool: row or column blocks of C, one OpenBLAS call each. A runtime
// built without OpenBLAS (MODELC_RUNTIME_ONLY on a machine without it, docs/gpu.md) uses a
// plain blocked C++ sgemm in its place: correct, and slow.
#include "kernels/cpu/gemm.h"

#if MODELC_HAVE_OPENBLAS
#include <cblas.h>
#endif

#include <algorithm>
#include <atomic>
#include <mutex>

namespace modelc::kernels {

namespace {
std::atomic<GemmThreading> g_mode{GemmThreading::Pool};
std::once_flag g_init;
}  // namespace

#if MODELC_HAVE_OPENBLAS
void set_gemm_threading(GemmThreading mode, int threads) {
  g_mode.store(mode);
  openblas_set_num_threads(mode == GemmThreading::Pool ? 1 : std::max(threads, 1));
}

GemmThreading gemm_threading() {
  // OpenBLAS starts with one thread per core: make the default mode true before first use.
  std::call_once(g_init, [] {
    if (g_mode.load() == GemmThreading::Pool) openblas_set_num_threads(1);
  });
  return g_mode.load();
}

void serial_sgemm(bool ta, bool tb, int64_t M, int64_t N, int64_t K, const float* A, int64_t lda, const float* B,
                  int64_t ldb, float beta, float* C, int64_t ldc) {
  if (M <= 0 || N <= 0) return;
  cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, static_cast<int>(M),
              static_cast<int>(N), static_cast<int>(K), 1.0f, A, static_cast<int>(lda), B, static_cast<int>(ldb), beta, C,
              static_cast<int>(ldc));
}
#else
void set_gemm_threading(GemmThreading mode, int) { g_mode.store(mode == GemmThreading::OpenBlas ? GemmThreading::Pool : mode); }

GemmThreading gemm_threading() {
  std::call_once(g_init, [] {});
  return g_mode.load();
}

// C = op(A) op(B) + beta C, row-major, one row of C at a time (each row of B streams through
// it); accumulates in f32 in the order k = 0, 1, ... for each element.
void serial_sgemm(bool ta, bool tb, int64_t M, int64_t N, int64_t K, const float* A, int64_t lda, const float* B,
                  int64_t ldb, float beta, float* C, int64_t ldc) {
  if (M <= 0 || N <= 0) return;
  for (int64_t i = 0; i < M; ++i) {
    float* c = C + i * ldc;
    for (int64_t j = 0; j < N; ++j) c[j] = beta == 0.0f ? 0.0f : beta * c[j];
    for (int64_t k = 0; k < K; ++k) {
      const float a = ta ? A[k * lda + i] : A[i * lda + k];
      if (tb) {
        for (int64_t j = 0; j < N; ++j) c[j] += a * B[j * ldb + k];
      } else {
        const float* b = B + k * ldb;
        for (int64_t j = 0; j < N; ++j) c[j] += a * b[j];
      }
    }
  }
}
#endif

void parallel_sgemm(rt::ThreadPool& pool, bool ta, bool tb, int64_t M, int64_t N, int64_t K, const float* A, int64_t lda,
                    const float* B, int64_t ldb, float beta, float* C, int64_t ldc, const GemmBlockFn& after) {
  // Below ~1 MFLOP a split costs more than it gains.
  if (gemm_threading() == GemmThreading::OpenBlas || pool.size() == 1 || 2 * M * N * K < (1 << 20)) {
    serial_sgemm(ta, tb, M, N, K, A, lda, B, ldb, beta, C, ldc);
    if (after && M > 0 && N > 0) after(0, M, 0, N);
    return;
  }
  if (M >= N) {
    // Row blocks of C: rows of op(A).
    int64_t grain = std::max<int64_t>(16, (M + pool.size() - 1) / pool.size());
    grain = (grain + 15) / 16 * 16;
    pool.parallel_for(M, grain, [&](int64_t m0, int64_t m1) {
      const float* a = ta ? A + m0 : A + m0 * lda;
      serial_sgemm(ta, tb, m1 - m0, N, K, a, lda, B, ldb, beta, C + m0 * ldc, ldc);
      if (after) after(m0, m1, 0, N);
    });
  } else {
    int64_t grain = std::max<int64_t>(16, (N + pool.size() - 1) / pool.size());
    grain = (grain + 15) / 16 * 16;
    pool.parallel_for(N, grain, [&](int64_t n0, int64_t n1) {
      const float* b = tb ? B + n0 * ldb : B + n0;
      serial_sgemm(ta, tb, M, n1 - n0, K, A, lda, b, ldb, beta, C + n0, ldc);
      if (after) after(0, M, n0, n1);
    });
  }
}

}  // namespace modelc::kernels
