// matmul.h — the one general matrix product of the fast CPU ops (cpu_fast_ops.h): linear layers
// and attention.
//
//   C (M, N) = beta · C + op(A) (M, K) · op(B) (K, N)        all row-major, beta ∈ {0, 1}
//
// op(X) is X or its transpose (transA / transB); lda, ldb, ldc are the row strides of the
// matrices as stored. Every output element is summed over k in the same order whatever the
// number of threads, so results are reproducible bit for bit across -threads settings.
//
// How it is fast — the structure of BLIS (Goto & van de Geijn, "Anatomy of high-performance
// matrix multiplication"; Van Zee & van de Geijn, "BLIS"), written out plainly:
//
//   for each block of NC columns of C                              (jc)
//     for each panel of KC along k                                 (pc)
//       pack op(B)[pc, jc] → Bp: KC × NC, as micro-panels of NR columns    (stays in L2/L3)
//       for each block of MC rows of C                             (ic)
//         pack op(A)[ic, pc] → Ap: MC × KC, as micro-panels of MR rows     (stays in L2)
//         for each NR-column micro-panel of Bp                     (jr)    (stays in L1)
//           for each MR-row micro-panel of Ap                      (ir)
//             micro_kernel: C[MR × NR tile] (+)= Ap micro-panel · Bp micro-panel   (registers)
//
// * Packing copies each operand into exactly the order the micro-kernel reads it (k-major,
//   MR or NR values per k, contiguous), so the four transpose cases differ only in the two
//   packing routines and the kernel streams memory linearly. Micro-panels are zero-padded to
//   whole MR × NR tiles: every element of C is computed by the same instruction sequence.
// * The micro-kernel keeps an MR × NR tile of C in registers (8 × 48 floats = 24 AVX-512
//   registers) and, for each k, loads NR values of B, broadcasts MR values of A and issues
//   MR · NR/16 = 24 independent FMAs — enough in flight to keep both FMA pipes busy.
// * Threads (OpenMP): C is cut into one block per thread, along N when op(A) is the smaller
//   operand (each thread then packs all of op(A) and its own share of op(B)), else along M.
//   Each thread runs the loops above on its block with its own packing buffers, with no
//   synchronisation until the end. Block edges fall on whole tiles.
// * Order of every sum, hence reproducibility: for an element of C, k runs in KC-sized panels
//   in increasing order; within a panel one register accumulates k in increasing order from 0,
//   then it is added to C (or stored, for beta = 0 on the first panel). The tile grid and KC
//   depend on M, N, K only; threads decide which tiles they compute, never how.
// * The packing buffers belong to each thread and only ever grow: no heap allocation per call
//   in steady state.
//
// The only intrinsics are inside micro_kernel (AVX-512, when the compiler targets it); its
// portable fallback is plain C++ that the compiler vectorises. float is the fast path; double
// runs the same blocking with the portable kernel, so the blocking itself can be tested in double
// against a naive product (test/test_gradcheck_ops.cpp).
#pragma once
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <type_traits>
#include <vector>

#if defined(__AVX512F__)
#include <immintrin.h>
#endif
#if defined(_OPENMP)
#include <omp.h>
#endif

namespace gemm_detail {

// Register tile (MR × NR) and cache blocks (MC × KC of A, KC × NC of B) per element type.
// For float: Ap (256 × 256 × 4 B = 256 KB) sits in L2, a Bp micro-panel (256 × 48 × 4 B =
// 48 KB) in L1/L2, Bp (1.5 MB) in L2/L3. KC alone fixes the order of the sums.
template <typename T>
struct Blocking;
template <>
struct Blocking<float> {
    static constexpr int MR = 8, NR = 48;  // 8 rows × 3 vectors of 16 floats = 24 registers
    static constexpr int KC = 256, MC = 256, NC = 1536;
};
template <>
struct Blocking<double> {  // the portable kernel only (tests of the blocking)
    static constexpr int MR = 4, NR = 16;
    static constexpr int KC = 256, MC = 128, NC = 1024;
};
static_assert(Blocking<float>::NR % 16 == 0, "the AVX-512 kernel loads whole vectors of 16 floats");
static_assert(Blocking<float>::MC % Blocking<float>::MR == 0 && Blocking<float>::NC % Blocking<float>::NR == 0,
              "cache blocks hold whole micro-panels");
static_assert(Blocking<double>::MC % Blocking<double>::MR == 0 && Blocking<double>::NC % Blocking<double>::NR == 0,
              "cache blocks hold whole micro-panels");

// C[0:m, 0:n] (+)= Ap · Bp over kc, where Ap holds MR values per k and Bp NR values per k
// (zero-padded), m ≤ MR, n ≤ NR. overwrite: C = product (first k panel of a beta = 0 call),
// else C += product.
template <typename T>
inline void micro_kernel(int kc, const T* __restrict Ap, const T* __restrict Bp, T* __restrict C, int ldc, int m,
                         int n, bool overwrite) {
    constexpr int MR = Blocking<T>::MR, NR = Blocking<T>::NR;
#if defined(__GNUC__)
    // Ask for the C tile now, so it is in cache when the sums are added to it at the end.
    for (int i = 0; i < m; i++)
        for (int j = 0; j < n; j += 64 / (int)sizeof(T)) __builtin_prefetch(C + (size_t)i * ldc + j, 1);
#endif
#if defined(__AVX512F__)
    if constexpr (std::is_same<T, float>::value) {
        constexpr int NV = NR / 16;  // vectors per row of the tile
        __m512 acc[MR][NV];
#pragma GCC unroll 8
        for (int i = 0; i < MR; i++)
#pragma GCC unroll 4
            for (int j = 0; j < NV; j++) acc[i][j] = _mm512_setzero_ps();
        for (int k = 0; k < kc; k++) {
            __m512 b[NV];
#pragma GCC unroll 4
            for (int j = 0; j < NV; j++) b[j] = _mm512_load_ps(Bp + (size_t)k * NR + 16 * j);
#pragma GCC unroll 8
            for (int i = 0; i < MR; i++) {
                const __m512 a = _mm512_set1_ps(Ap[(size_t)k * MR + i]);
#pragma GCC unroll 4
                for (int j = 0; j < NV; j++) acc[i][j] = _mm512_fmadd_ps(a, b[j], acc[i][j]);
            }
        }
        __mmask16 mask[NV];
        for (int j = 0; j < NV; j++) {
            const int valid = std::min(16, std::max(0, n - 16 * j));
            mask[j] = (__mmask16)((1u << valid) - 1);
        }
#pragma GCC unroll 8
        for (int i = 0; i < MR; i++) {
            if (i >= m) break;
            float* c = C + (size_t)i * ldc;
#pragma GCC unroll 4
            for (int j = 0; j < NV; j++) {
                __m512 v = acc[i][j];
                if (!overwrite) v = _mm512_add_ps(_mm512_maskz_loadu_ps(mask[j], c + 16 * j), v);
                _mm512_mask_storeu_ps(c + 16 * j, mask[j], v);
            }
        }
        return;
    }
#endif
    // Portable version: the same tile, accumulated in a local array whose inner loop over the
    // NR columns the compiler vectorises.
    T acc[MR][NR] = {};
    for (int k = 0; k < kc; k++) {
        const T* b = Bp + (size_t)k * NR;
        for (int i = 0; i < MR; i++) {
            const T a = Ap[(size_t)k * MR + i];
#pragma omp simd
            for (int j = 0; j < NR; j++) acc[i][j] += a * b[j];
        }
    }
    for (int i = 0; i < m; i++)
        for (int j = 0; j < n; j++) C[(size_t)i * ldc + j] = overwrite ? acc[i][j] : C[(size_t)i * ldc + j] + acc[i][j];
}

// Packing. Both routines read their source in long contiguous runs (whole rows of the stored
// matrix), whichever way it is transposed.

// Ap ← op(A)[i0 : i0+mc, p0 : p0+kc] as micro-panels of MR rows: panel r (at Ap + r·MR·kc)
// holds MR values per k, k = 0 … kc−1; rows beyond mc are zero.
template <typename T>
inline void pack_a(bool transA, const T* A, int lda, int i0, int mc, int p0, int kc, T* Ap) {
    constexpr int MR = Blocking<T>::MR;
    if (transA) {  // op(A)[i][k] = A[k][i]: row p0+k of A holds this k's values for every panel
        for (int k = 0; k < kc; k++) {
            const T* src = A + (size_t)(p0 + k) * lda + i0;
            for (int ir = 0; ir < mc; ir += MR) {
                T* dst = Ap + (size_t)ir * kc + (size_t)k * MR;
                if (mc - ir >= MR) {
                    std::copy(src + ir, src + ir + MR, dst);
                } else {
                    for (int i = 0; i < MR; i++) dst[i] = ir + i < mc ? src[ir + i] : T(0);
                }
            }
        }
        return;
    }
    for (int ir = 0; ir < mc; ir += MR) {  // op(A)[i][k] = A[i][k]: interleave MR rows of A
        const T* src = A + (size_t)(i0 + ir) * lda + p0;
        T* dst = Ap + (size_t)ir * kc;
        if (mc - ir >= MR) {  // (the compiler turns this into vector shuffles)
            for (int k = 0; k < kc; k++)
                for (int i = 0; i < MR; i++) dst[(size_t)k * MR + i] = src[(size_t)i * lda + k];
        } else {
            for (int k = 0; k < kc; k++)
                for (int i = 0; i < MR; i++) dst[(size_t)k * MR + i] = ir + i < mc ? src[(size_t)i * lda + k] : T(0);
        }
    }
}

// Bp ← op(B)[p0 : p0+kc, j0 : j0+nc] as micro-panels of NR columns: panel r (at Bp + r·NR·kc)
// holds NR values per k; columns beyond nc are zero.
template <typename T>
inline void pack_b(bool transB, const T* B, int ldb, int p0, int kc, int j0, int nc, T* Bp) {
    constexpr int NR = Blocking<T>::NR;
    if (!transB) {  // op(B)[k][j] = B[k][j]: row p0+k of B holds this k's values for every panel
        for (int k = 0; k < kc; k++) {
            const T* src = B + (size_t)(p0 + k) * ldb + j0;
            for (int jr = 0; jr < nc; jr += NR) {
                T* dst = Bp + (size_t)jr * kc + (size_t)k * NR;
                if (nc - jr >= NR) {
                    std::copy(src + jr, src + jr + NR, dst);
                } else {
                    for (int j = 0; j < NR; j++) dst[j] = jr + j < nc ? src[jr + j] : T(0);
                }
            }
        }
        return;
    }
    // op(B)[k][j] = B[j][k]: a transpose, done in 16 × 16 tiles through a local array (the
    // compiler turns the tile into vector shuffles), reading rows of B along k.
    constexpr int TB = 16;
    static_assert(NR % TB == 0, "NR must be a multiple of the transpose tile");
    for (int jr = 0; jr < nc; jr += NR) {
        const int n = std::min(NR, nc - jr);
        const T* src = B + (size_t)(j0 + jr) * ldb + p0;
        T* dst = Bp + (size_t)jr * kc;
        int k0 = 0;
        if (n == NR) {
            for (; k0 + TB <= kc; k0 += TB)
                for (int jt = 0; jt < NR; jt += TB) {
                    T tile[TB][TB];  // tile[k][j]
                    for (int j = 0; j < TB; j++)
                        for (int k = 0; k < TB; k++) tile[k][j] = src[(size_t)(jt + j) * ldb + k0 + k];
                    for (int k = 0; k < TB; k++)
                        for (int j = 0; j < TB; j++) dst[(size_t)(k0 + k) * NR + jt + j] = tile[k][j];
                }
        }
        for (int k = k0; k < kc; k++)
            for (int j = 0; j < NR; j++) dst[(size_t)k * NR + j] = j < n ? src[(size_t)j * ldb + k] : T(0);
    }
}

// A buffer of at least n elements aligned to 64 bytes, owned by the calling thread and kept
// between calls (it only ever grows).
template <typename T, int Which>
inline T* scratch(size_t n) {
    static thread_local std::vector<T> buf;
    const size_t pad = 64 / sizeof(T);
    if (buf.size() < n + pad) buf.resize(n + pad);
    const uintptr_t p = reinterpret_cast<uintptr_t>(buf.data());
    return reinterpret_cast<T*>((p + 63) & ~uintptr_t(63));
}

// The blocked product on one block of C, by the calling thread alone: C[0:M, 0:N] (+)= op(A)·op(B)
// with A, B, C already pointing at the block's first row / column. overwrite: C = product
// (beta = 0), else C += product.
template <typename T>
void gemm_block(bool transA, bool transB, int M, int N, int K, const T* A, int lda, const T* B, int ldb,
                bool overwrite, T* C, int ldc) {
    constexpr int MR = Blocking<T>::MR, NR = Blocking<T>::NR;
    constexpr int KC = Blocking<T>::KC, MC = Blocking<T>::MC, NC = Blocking<T>::NC;
    T* Ap = scratch<T, 0>((size_t)MC * KC);
    T* Bp = scratch<T, 1>((size_t)KC * NC);
    for (int jc = 0; jc < N; jc += NC) {
        const int nc = std::min(NC, N - jc);
        for (int pc = 0; pc < K; pc += KC) {
            const int kc = std::min(KC, K - pc);
            pack_b(transB, B, ldb, pc, kc, jc, nc, Bp);
            for (int ic = 0; ic < M; ic += MC) {
                const int mc = std::min(MC, M - ic);
                pack_a(transA, A, lda, ic, mc, pc, kc, Ap);
                for (int jr = 0; jr < nc; jr += NR)
                    for (int ir = 0; ir < mc; ir += MR)
                        micro_kernel<T>(kc, Ap + (size_t)ir * kc, Bp + (size_t)jr * kc,
                                        C + (size_t)(ic + ir) * ldc + jc + jr, ldc, std::min(MR, mc - ir),
                                        std::min(NR, nc - jr), overwrite && pc == 0);
            }
        }
    }
}

}  // namespace gemm_detail

template <typename T>
void gemm(bool transA, bool transB, int M, int N, int K, const T* A, int lda, const T* B, int ldb, T beta, T* C,
          int ldc) {
    using namespace gemm_detail;
    constexpr int MR = Blocking<T>::MR, NR = Blocking<T>::NR;
    if (M <= 0 || N <= 0) return;
    if (K <= 0) {  // empty sum: C = beta · C
        if (beta == T(0))
            for (int i = 0; i < M; i++) std::fill(C + (size_t)i * ldc, C + (size_t)i * ldc + N, T(0));
        return;
    }
    const bool overwrite = beta == T(0);
    // Threads split C into one block each, along N when op(A) is the smaller operand (every thread
    // then packs all of op(A) but only its share of op(B)), else along M. Blocks are whole
    // MR × NR tiles, so the tile grid — and with it every sum — is the same for any thread count.
    // Small products, and calls from inside a parallel loop (attention, per head), run serially.
    int threads = 1;
#if defined(_OPENMP)
    if ((double)M * N * K >= (1 << 20) && !omp_in_parallel()) threads = omp_get_max_threads();
#endif
    const bool split_n = M <= N;
    const int tiles = split_n ? (N + NR - 1) / NR : (M + MR - 1) / MR;
    threads = std::min(threads, tiles);
    if (threads <= 1) {
        gemm_block(transA, transB, M, N, K, A, lda, B, ldb, overwrite, C, ldc);
        return;
    }
#pragma omp parallel num_threads(threads)
    {
#if defined(_OPENMP)
        const int t = omp_get_thread_num(), nt = omp_get_num_threads();
#else
        const int t = 0, nt = 1;
#endif
        const int first = (int)((long long)tiles * t / nt), last = (int)((long long)tiles * (t + 1) / nt);
        if (split_n) {
            const int n0 = first * NR, n1 = std::min(N, last * NR);
            if (n0 < n1)
                gemm_block(transA, transB, M, n1 - n0, K, A, lda, transB ? B + (size_t)n0 * ldb : B + n0, ldb, overwrite,
                           C + n0, ldc);
        } else {
            const int m0 = first * MR, m1 = std::min(M, last * MR);
            if (m0 < m1)
                gemm_block(transA, transB, m1 - m0, N, K, transA ? A + m0 : A + (size_t)m0 * lda, lda, B, ldb, overwrite,
                           C + (size_t)m0 * ldc, ldc);
        }
    }
}
