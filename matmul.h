// matmul.h — the one general matrix product the CPU reference uses.
//
//   C (M, N) = beta · C + op(A) (M, K) · op(B) (K, N)        all row-major, beta ∈ {0, 1}
//
// op(X) is X or its transpose (transA / transB); lda, ldb, ldc are the row strides of the
// matrices as stored. Every output element is summed over k in the same order whatever the
// number of threads, so results are reproducible bit for bit across -threads settings.
//
// The strategy is the textbook one for caches: the K dimension is cut into panels of KC so a
// panel of op(B) stays in cache while the rows of C sweep over it, and the innermost loop runs
// along a contiguous row of C so the compiler vectorises it. Where op(B) is transposed the
// panel is first copied into row-major order (a small per-thread buffer, kept between calls).
#pragma once
#include <algorithm>
#include <vector>

template <typename T>
void gemm(bool transA, bool transB, int M, int N, int K, const T* A, int lda, const T* B, int ldb,
          T beta, T* C, int ldc) {
    constexpr int KC = 256;  // rows of the op(B) panel kept in cache
    constexpr int NC = 512;  // columns of C (and of the panel) handled at once
    if (beta == T(0)) {
#pragma omp parallel for schedule(static)
        for (int m = 0; m < M; m++) std::fill(C + (size_t)m * ldc, C + (size_t)m * ldc + N, T(0));
    }
    // Work items are (column block, row) pairs; each owns its slice of C, so no two threads
    // write the same element and the k-order of every sum is fixed.
    const int col_blocks = (N + NC - 1) / NC;
#pragma omp parallel
    {
        static thread_local std::vector<T> panel;  // op(B)[k0:k0+KC, n0:n0+NC], row-major
        panel.resize((size_t)KC * NC);
#pragma omp for schedule(static)
        for (int cb = 0; cb < col_blocks; cb++) {
            const int n0 = cb * NC, nc = std::min(NC, N - n0);
            for (int k0 = 0; k0 < K; k0 += KC) {
                const int kc = std::min(KC, K - k0);
                for (int k = 0; k < kc; k++)
                    for (int n = 0; n < nc; n++)
                        panel[(size_t)k * nc + n] = transB ? B[(size_t)(n0 + n) * ldb + k0 + k]
                                                           : B[(size_t)(k0 + k) * ldb + n0 + n];
                for (int m = 0; m < M; m++) {
                    T* c = C + (size_t)m * ldc + n0;
                    for (int k = 0; k < kc; k++) {
                        const T a = transA ? A[(size_t)(k0 + k) * lda + m] : A[(size_t)m * lda + k0 + k];
                        const T* b = &panel[(size_t)k * nc];
#pragma omp simd
                        for (int n = 0; n < nc; n++) c[n] += a * b[n];
                    }
                }
            }
        }
    }
}
