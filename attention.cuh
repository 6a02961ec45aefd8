// attention.cuh — causal multi-head self-attention on the packed projections qkv (B,T,3C) =
// [q | k | v], NH heads of hs = C/NH channels, without any T×T buffer (docs/cuda.md, "The
// attention kernels"):
//
//   forward:  for each query t of head h: s[t'] = q_t·k_t'/√hs for t' ≤ t, p = softmax(s),
//             out (B,T,C)[t, h·hs + i] = Σ_t' p[t']·v_t'[i], and the log-sum-exp
//             lse[t] = log Σ_t' exp(s[t']) (B,NH,T) fp32: all the backward keeps
//   backward: given dout (B,T,C): D[t] = Σ_i dout_t[i]·out_t[i] (B,NH,T) fp32, then with the
//             recomputed p[t'] = exp(s[t'] − lse[t]):  dp[t'] = dout_t·v_t',
//             ds[t'] = p[t']·(dp[t'] − D[t]),  dq_t = Σ_t' ds[t']·k_t'/√hs,
//             dk_t' = Σ_t ds[t']·q_t/√hs,  dv_t' = Σ_t p[t']·dout_t;  dqkv = [dq | dk | dv] (stored:
//             the backward writes every element of dqkv once, so it needs no zeroed buffer).
//             The qkv bias gradient Σ_n dqkv[n, :] is the qkv product's (matmul.cuh)
//
// Work is cut into 16×16 tiles of (queries × keys), one warp per tile row: the forward and dq
// kernels own 16 queries and walk the key tiles up to the diagonal with an online softmax, the
// dk/dv kernel owns 16 keys and walks the query tiles from the diagonal down. Each output
// element has exactly one owner, so there are no atomics and results do not depend on
// scheduling. Tile products run on the tensor cores in bf16 (WMMA, bf16 inputs, fp32
// accumulation) and as plain fp32 loops in fp32; softmax, scaling and the statistics are fp32.
#pragma once
#include <mma.h>

#include <cmath>
#include <type_traits>

#include "cuda_common.cuh"

namespace gpu {

constexpr int ATTENTION_TILE = 16;  // queries or keys per tile: the WMMA tile side
constexpr int ATTENTION_TILE_ELEMENTS = ATTENTION_TILE * ATTENTION_TILE;

// Number of fp32 values the forward keeps for the backward: the log-sum-exp of every
// (b, h, query) row. The model allocates this per layer as its attention statistics.
inline size_t attention_saved_size(int B, int Tn, int NH) { return (size_t)B * NH * Tn; }

// The head size rounded up to whole tiles: tiles are stored hs_padded wide, zeros beyond hs.
__host__ __device__ inline int padded_head_size(int hs) {
    return (hs + ATTENTION_TILE - 1) / ATTENTION_TILE * ATTENTION_TILE;
}

// The shared memory of one warp's tiles, carved out of the kernel's dynamic shared memory. The
// three kernels share the layout (each uses part of it); every piece starts 32-byte aligned,
// as WMMA requires.
template <typename T>
struct AttentionTiles {
    T *q, *k, *v, *dout;  // (16, hs_padded) rows of qkv or dout, zero-padded
    T *p, *ds;            // (16,16) probabilities and score gradients, the type the products read
    float *s, *pf;        // (16,16) scores or dp; probabilities in fp32
    float *acc, *acc2;    // (16, hs_padded) fp32 accumulators: out | dq | dk and dv
    float *row_a, *row_b, *row_c;  // (16) per-row statistics

    // Bytes of shared memory the layout takes for head size hs.
    __host__ __device__ static size_t bytes(int hs) {
        const size_t wide = (size_t)ATTENTION_TILE * padded_head_size(hs);
        return 4 * wide * sizeof(T) + 2 * ATTENTION_TILE_ELEMENTS * sizeof(T) + 2 * ATTENTION_TILE_ELEMENTS * 4 +
               2 * wide * 4 + 3 * ATTENTION_TILE * 4;
    }
    __device__ AttentionTiles(unsigned char* base, int hs) {
        const size_t wide = (size_t)ATTENTION_TILE * padded_head_size(hs);
        unsigned char* at = base;
        auto take = [&at](size_t n) {
            unsigned char* p = at;
            at += n;
            return p;
        };
        q = (T*)take(wide * sizeof(T)), k = (T*)take(wide * sizeof(T));
        v = (T*)take(wide * sizeof(T)), dout = (T*)take(wide * sizeof(T));
        p = (T*)take(ATTENTION_TILE_ELEMENTS * sizeof(T)), ds = (T*)take(ATTENTION_TILE_ELEMENTS * sizeof(T));
        s = (float*)take(ATTENTION_TILE_ELEMENTS * 4), pf = (float*)take(ATTENTION_TILE_ELEMENTS * 4);
        acc = (float*)take(wide * 4), acc2 = (float*)take(wide * 4);
        row_a = (float*)take(ATTENTION_TILE * 4), row_b = (float*)take(ATTENTION_TILE * 4);
        row_c = (float*)take(ATTENTION_TILE * 4);
    }
};

// ---------------------------------------------------------------------------------------------
// Warp-level tile operations (the calling warp's 32 lanes all call them)

// tile (16, hs_padded) = rows t0 .. t0+15 of a (B,T,row_stride) tensor at columns col .. col+hs,
// zeros past T and past hs.
template <typename T>
__device__ void load_rows(T* tile, const T* src, int row_stride, int col, int b, int t0, int Tn, int hs) {
    const int hsp = padded_head_size(hs);
    for (int e = threadIdx.x; e < ATTENTION_TILE * hsp; e += WARP_SIZE) {
        const int r = e / hsp, i = e % hsp, t = t0 + r;
        tile[e] = t < Tn && i < hs ? src[((size_t)b * Tn + t) * row_stride + col + i] : from_float<T>(0.0f);
    }
}

// dst rows t0 .. t0+15 at columns col .. col+hs (of a (B,T,row_stride) tensor) = tile (16, hs_padded),
// rows past T left alone.
template <typename T>
__device__ void store_rows(T* dst, const float* tile, int row_stride, int col, int b, int t0, int Tn, int hs) {
    const int hsp = padded_head_size(hs);
    for (int e = threadIdx.x; e < ATTENTION_TILE * hs; e += WARP_SIZE) {
        const int r = e / hs, i = e % hs, t = t0 + r;
        if (t < Tn) dst[((size_t)b * Tn + t) * row_stride + col + i] = from_float<T>(tile[r * hsp + i]);
    }
}

// c (16×16 fp32, row major, leading dimension ldc) = a·b, or += a·b when `accumulate`, over the
// inner dimension K (a multiple of 16): a is 16×K and b is K×16, each stored row major or column
// major (A_ROW, B_ROW) with leading dimension lda, ldb. bf16: WMMA on the tensor cores, fp32
// accumulation; fp32: exact fp32 loops of fused multiply-adds (what nvcc makes of a·b + sum; the
// host compiler of the emulated build would not fuse them), each lane computing 8 elements of c.
template <typename T, bool A_ROW, bool B_ROW>
__device__ void tile_product(float* c, int ldc, const T* a, int lda, const T* b, int ldb, int K, bool accumulate) {
    __syncwarp();
    if constexpr (std::is_same<T, bf16>::value) {
        namespace wmma = nvcuda::wmma;
        using LayoutA = std::conditional_t<A_ROW, wmma::row_major, wmma::col_major>;
        using LayoutB = std::conditional_t<B_ROW, wmma::row_major, wmma::col_major>;
        wmma::fragment<wmma::accumulator, 16, 16, 16, float> sum;
        if (accumulate) wmma::load_matrix_sync(sum, c, ldc, wmma::mem_row_major);
        else wmma::fill_fragment(sum, 0.0f);
        for (int k0 = 0; k0 < K; k0 += ATTENTION_TILE) {
            wmma::fragment<wmma::matrix_a, 16, 16, 16, bf16, LayoutA> fa;
            wmma::fragment<wmma::matrix_b, 16, 16, 16, bf16, LayoutB> fb;
            wmma::load_matrix_sync(fa, a + (A_ROW ? k0 : (size_t)k0 * lda), lda);
            wmma::load_matrix_sync(fb, b + (B_ROW ? (size_t)k0 * ldb : k0), ldb);
            wmma::mma_sync(sum, fa, fb, sum);
        }
        wmma::store_matrix_sync(c, sum, ldc, wmma::mem_row_major);
    } else {
        for (int e = threadIdx.x; e < ATTENTION_TILE_ELEMENTS; e += WARP_SIZE) {
            const int row = e / ATTENTION_TILE, col = e % ATTENTION_TILE;
            float sum = accumulate ? c[row * ldc + col] : 0.0f;
            for (int k = 0; k < K; k++)
                sum = fmaf(to_float(a[A_ROW ? row * lda + k : k * lda + row]),
                           to_float(b[B_ROW ? k * ldb + col : col * ldb + k]), sum);
            c[row * ldc + col] = sum;
        }
    }
    __syncwarp();
}

// acc (16, hs_padded) += a (16×16, row major if A_ROW, else its transpose is stored) · m (16, hs_padded),
// one 16-column tile product at a time.
template <typename T, bool A_ROW>
__device__ void accumulate_times_rows(float* acc, const T* a, const T* m, int hs) {
    const int hsp = padded_head_size(hs);
    for (int n0 = 0; n0 < hsp; n0 += ATTENTION_TILE)
        tile_product<T, A_ROW, true>(acc + n0, hsp, a, ATTENTION_TILE, m + n0, hsp, ATTENTION_TILE, true);
}

// Zeros n floats of shared memory.
__device__ inline void zero_shared(float* x, int n) {
    for (int e = threadIdx.x; e < n; e += WARP_SIZE) x[e] = 0.0f;
}

// True when key k0 + col may be attended to by query t0 + row: causal and inside the sequence.
__device__ inline bool attends(int t0, int row, int k0, int col, int Tn) {
    return t0 + row < Tn && k0 + col <= t0 + row;
}

// The probabilities of one tile recomputed from its scores s = q·kᵀ (16×16) and the rows' lse:
// pf = exp(s/√hs − lse) where attended, else 0, and p = pf in T.
template <typename T>
__device__ void recompute_probabilities(AttentionTiles<T>& m, const float* lse, float scale, int t0, int k0, int Tn) {
    for (int e = threadIdx.x; e < ATTENTION_TILE_ELEMENTS; e += WARP_SIZE) {
        const int r = e / ATTENTION_TILE, c = e % ATTENTION_TILE;
        const float p = attends(t0, r, k0, c, Tn) ? expf(m.s[e] * scale - lse[r]) : 0.0f;
        m.pf[e] = p;
        m.p[e] = from_float<T>(p);
    }
    __syncwarp();
}

// The score gradients of one tile from dp (in m.s) and the rows' D: ds = pf·(dp − D)/√hs, in T.
template <typename T>
__device__ void score_gradients(AttentionTiles<T>& m, const float* delta, float scale) {
    for (int e = threadIdx.x; e < ATTENTION_TILE_ELEMENTS; e += WARP_SIZE)
        m.ds[e] = from_float<T>(m.pf[e] * (m.s[e] - delta[e / ATTENTION_TILE]) * scale);
    __syncwarp();
}

// rows[r] = values[((b·NH + h)·T + t0 + r)] for the tile's rows inside the sequence, else 0.
__device__ inline void load_row_values(float* rows, const float* values, int bh, int t0, int Tn) {
    for (int r = threadIdx.x; r < ATTENTION_TILE; r += WARP_SIZE)
        rows[r] = t0 + r < Tn ? values[(size_t)bh * Tn + t0 + r] : 0.0f;
    __syncwarp();
}

// ---------------------------------------------------------------------------------------------
// Kernels: one warp per block; grid (T tiles, NH, B)

// out and lse for the 16 queries of tile blockIdx.x of head blockIdx.y, sequence blockIdx.z.
// Online softmax over the key tiles up to the diagonal: per row the running maximum (row_a) and
// the running sum of exp (row_b); when the maximum grows, the sum and the output accumulated so
// far are scaled by exp(old max − new max) (row_c).
template <typename T>
__global__ void __launch_bounds__(WARP_SIZE)
    attention_forward_kernel(T* out, float* lse, const T* qkv, int Tn, int C, int NH) {
    extern __shared__ __align__(128) unsigned char attention_shared[];
    const int hs = C / NH, hsp = padded_head_size(hs), h = blockIdx.y, b = blockIdx.z;
    const int t0 = blockIdx.x * ATTENTION_TILE;
    const float scale = 1.0f / sqrtf((float)hs);
    AttentionTiles<T> m(attention_shared, hs);
    load_rows(m.q, qkv, 3 * C, h * hs, b, t0, Tn, hs);
    zero_shared(m.acc, ATTENTION_TILE * hsp);
    for (int r = threadIdx.x; r < ATTENTION_TILE; r += WARP_SIZE) m.row_a[r] = -INFINITY, m.row_b[r] = 0.0f;
    for (int k0 = 0; k0 <= t0; k0 += ATTENTION_TILE) {
        load_rows(m.k, qkv, 3 * C, C + h * hs, b, k0, Tn, hs);
        load_rows(m.v, qkv, 3 * C, 2 * C + h * hs, b, k0, Tn, hs);
        tile_product<T, true, false>(m.s, ATTENTION_TILE, m.q, hsp, m.k, hsp, hsp, false);  // q·kᵀ
        for (int r = threadIdx.x; r < ATTENTION_TILE; r += WARP_SIZE) {
            float new_max = m.row_a[r];
            for (int c = 0; c < ATTENTION_TILE; c++)
                if (attends(t0, r, k0, c, Tn)) new_max = fmaxf(new_max, m.s[r * ATTENTION_TILE + c] * scale);
            const bool empty = new_max == -INFINITY;  // a row past T: nothing attended yet
            float sum = 0.0f;
            for (int c = 0; c < ATTENTION_TILE; c++) {
                const int e = r * ATTENTION_TILE + c;
                const T p = from_float<T>(attends(t0, r, k0, c, Tn) ? expf(m.s[e] * scale - new_max) : 0.0f);
                m.p[e] = p;
                sum += to_float(p);  // the rounded value, the one the product below uses
            }
            m.row_c[r] = empty ? 1.0f : expf(m.row_a[r] - new_max);
            m.row_b[r] = m.row_b[r] * m.row_c[r] + sum;
            m.row_a[r] = new_max;
        }
        __syncwarp();
        for (int e = threadIdx.x; e < ATTENTION_TILE * hsp; e += WARP_SIZE) m.acc[e] *= m.row_c[e / hsp];
        accumulate_times_rows<T, true>(m.acc, m.p, m.v, hs);  // acc += p·v
    }
    for (int r = threadIdx.x; r < ATTENTION_TILE; r += WARP_SIZE) {
        if (t0 + r < Tn) lse[((size_t)b * NH + h) * Tn + t0 + r] = m.row_a[r] + logf(m.row_b[r]);
        m.row_c[r] = t0 + r < Tn ? 1.0f / m.row_b[r] : 0.0f;
    }
    __syncwarp();
    for (int e = threadIdx.x; e < ATTENTION_TILE * hs; e += WARP_SIZE) {
        const int r = e / hs, i = e % hs;
        if (t0 + r < Tn) out[((size_t)b * Tn + t0 + r) * C + h * hs + i] = from_float<T>(m.acc[r * hsp + i] * m.row_c[r]);
    }
}

// delta (B,NH,T) = Σ_i dout·out over each head's hs channels, one warp per (b, h, t) row.
template <typename T>
__global__ void attention_delta_kernel(float* delta, const T* dout, const T* out, int B, int Tn, int C, int NH) {
    const int row = blockIdx.x * (blockDim.x / WARP_SIZE) + threadIdx.x / WARP_SIZE;
    const int lane = threadIdx.x % WARP_SIZE;
    if (row >= B * NH * Tn) return;
    const int hs = C / NH, t = row % Tn, h = row / Tn % NH, b = row / (Tn * NH);
    const size_t at = ((size_t)b * Tn + t) * C + h * hs;
    float sum = 0.0f;
    for (int i = lane; i < hs; i += WARP_SIZE) sum = fmaf(to_float(dout[at + i]), to_float(out[at + i]), sum);
    sum = warp_sum(sum);
    if (lane == 0) delta[row] = sum;
}

// dq for the 16 queries of tile blockIdx.x: over the key tiles up to the diagonal, recompute
// p, then dp = dout·vᵀ, ds, and dq = Σ ds·k, stored into the q third of dqkv.
template <typename T>
__global__ void __launch_bounds__(WARP_SIZE)
    attention_backward_dq_kernel(T* dqkv, const T* dout, const T* qkv, const float* lse,
                                 const float* delta, int Tn, int C, int NH) {
    extern __shared__ __align__(128) unsigned char attention_shared[];
    const int hs = C / NH, hsp = padded_head_size(hs), h = blockIdx.y, b = blockIdx.z, bh = b * NH + h;
    const int t0 = blockIdx.x * ATTENTION_TILE;
    const float scale = 1.0f / sqrtf((float)hs);
    AttentionTiles<T> m(attention_shared, hs);
    load_rows(m.q, qkv, 3 * C, h * hs, b, t0, Tn, hs);
    load_rows(m.dout, dout, C, h * hs, b, t0, Tn, hs);
    load_row_values(m.row_a, lse, bh, t0, Tn);
    load_row_values(m.row_b, delta, bh, t0, Tn);
    zero_shared(m.acc, ATTENTION_TILE * hsp);
    for (int k0 = 0; k0 <= t0; k0 += ATTENTION_TILE) {
        load_rows(m.k, qkv, 3 * C, C + h * hs, b, k0, Tn, hs);
        load_rows(m.v, qkv, 3 * C, 2 * C + h * hs, b, k0, Tn, hs);
        tile_product<T, true, false>(m.s, ATTENTION_TILE, m.q, hsp, m.k, hsp, hsp, false);  // q·kᵀ
        recompute_probabilities(m, m.row_a, scale, t0, k0, Tn);
        tile_product<T, true, false>(m.s, ATTENTION_TILE, m.dout, hsp, m.v, hsp, hsp, false);  // dp = dout·vᵀ
        score_gradients(m, m.row_b, scale);
        accumulate_times_rows<T, true>(m.acc, m.ds, m.k, hs);  // dq += ds·k
    }
    store_rows(dqkv, m.acc, 3 * C, h * hs, b, t0, Tn, hs);
}

// dk and dv for the 16 keys of tile blockIdx.x: over the query tiles from the diagonal on,
// recompute p, then dv += pᵀ·dout, dp = dout·vᵀ, ds, and dk += dsᵀ·q; both stored into their
// thirds of dqkv at the end.
template <typename T>
__global__ void __launch_bounds__(WARP_SIZE)
    attention_backward_dkdv_kernel(T* dqkv, const T* dout, const T* qkv, const float* lse,
                                   const float* delta, int Tn, int C, int NH) {
    extern __shared__ __align__(128) unsigned char attention_shared[];
    const int hs = C / NH, hsp = padded_head_size(hs), h = blockIdx.y, b = blockIdx.z, bh = b * NH + h;
    const int k0 = blockIdx.x * ATTENTION_TILE;
    const float scale = 1.0f / sqrtf((float)hs);
    AttentionTiles<T> m(attention_shared, hs);
    load_rows(m.k, qkv, 3 * C, C + h * hs, b, k0, Tn, hs);
    load_rows(m.v, qkv, 3 * C, 2 * C + h * hs, b, k0, Tn, hs);
    zero_shared(m.acc, ATTENTION_TILE * hsp);   // dk
    zero_shared(m.acc2, ATTENTION_TILE * hsp);  // dv
    for (int t0 = k0; t0 < Tn; t0 += ATTENTION_TILE) {
        load_rows(m.q, qkv, 3 * C, h * hs, b, t0, Tn, hs);
        load_rows(m.dout, dout, C, h * hs, b, t0, Tn, hs);
        load_row_values(m.row_a, lse, bh, t0, Tn);
        load_row_values(m.row_b, delta, bh, t0, Tn);
        tile_product<T, true, false>(m.s, ATTENTION_TILE, m.q, hsp, m.k, hsp, hsp, false);  // q·kᵀ
        recompute_probabilities(m, m.row_a, scale, t0, k0, Tn);
        accumulate_times_rows<T, false>(m.acc2, m.p, m.dout, hs);  // dv += pᵀ·dout
        tile_product<T, true, false>(m.s, ATTENTION_TILE, m.dout, hsp, m.v, hsp, hsp, false);  // dp = dout·vᵀ
        score_gradients(m, m.row_b, scale);
        accumulate_times_rows<T, false>(m.acc, m.ds, m.q, hs);  // dk += dsᵀ·q
    }
    store_rows(dqkv, m.acc, 3 * C, C + h * hs, b, k0, Tn, hs);
    store_rows(dqkv, m.acc2, 3 * C, 2 * C + h * hs, b, k0, Tn, hs);
}

// ---------------------------------------------------------------------------------------------
// Launchers

// The (query tile, key tile) pairs the tile kernels visit: for each of the B·NH heads, the
// ⌈T/16⌉·(⌈T/16⌉ + 1)/2 tiles on and below the diagonal.
inline double attention_tile_pairs(int B, int Tn, int NH) {
    const double tiles = ceil_div(Tn, ATTENTION_TILE);
    return (double)B * NH * tiles * (tiles + 1) / 2;
}

// A Traffic for one tile kernel that does `products` 16×16×hs_padded tile products per pair
// (counted as matrix-product FLOPs: tensor cores in bf16, CUDA cores in fp32) and about 6
// FLOPs of softmax per score.
inline Traffic attention_tile_traffic(const char* kernel, double read, double written, int B, int Tn, int C, int NH,
                                      int products) {
    const double pairs = attention_tile_pairs(B, Tn, NH), hsp = padded_head_size(C / NH);
    return {kernel, read, written, pairs * 6.0 * ATTENTION_TILE_ELEMENTS,
            pairs * products * 2.0 * ATTENTION_TILE_ELEMENTS * hsp};
}

// The launch shape of a tile kernel: grid (T tiles, NH, B), one warp per block, and the dynamic
// shared memory of AttentionTiles<T> for this head size, which `kernel` is allowed to use
// (above 48 KiB where needed). Each launcher names its kernel in the launch itself.
struct TileLaunch {
    dim3 grid;
    size_t shared;
};
template <typename T, typename Kernel>
TileLaunch tile_launch(Kernel kernel, int B, int Tn, int C, int NH) {
    const size_t shared = AttentionTiles<T>::bytes(C / NH);
    cudaCheck(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)shared));
    return {dim3((unsigned)ceil_div(Tn, ATTENTION_TILE), (unsigned)NH, (unsigned)B), shared};
}

// out (B,T,C) and lse (attention_saved_size(B,T,NH) floats) from qkv (B,T,3C).
template <typename T>
void attention_forward(T* out, float* lse, const T* qkv, int B, int Tn, int C, int NH, cudaStream_t stream) {
    const TileLaunch at = tile_launch<T>(attention_forward_kernel<T>, B, Tn, C, NH);
    attention_forward_kernel<T><<<at.grid, WARP_SIZE, at.shared, stream>>>(out, lse, qkv, Tn, C, NH);
    cudaCheck(cudaGetLastError());
}

// Traffic of attention_forward: q, k, v of every position read from qkv (each block rereads
// the k and v tiles it needs; the model counts distinct bytes, which the L2 cache serves),
// out and lse written; two tile products per pair (q·kᵀ and p·v).
template <typename T>
Launches attention_forward_traffic(int B, int Tn, int C, int NH) {
    const double n = (double)B * Tn, rows = (double)attention_saved_size(B, Tn, NH);
    return {attention_tile_traffic("attention_forward_kernel", n * 3 * C * sizeof(T), n * C * sizeof(T) + 4 * rows, B,
                                   Tn, C, NH, 2)};
}

// dqkv (B,T,3C) = the gradient of attention_forward given dout (B,T,C), its qkv, out and lse
// (stored: dqkv is not read). delta is scratch of attention_saved_size(B,T,NH) floats.
template <typename T>
void attention_backward(T* dqkv, const T* dout, const T* qkv, const T* out, const float* lse, float* delta, int B,
                        int Tn, int C, int NH, cudaStream_t stream) {
    const size_t rows = attention_saved_size(B, Tn, NH);
    attention_delta_kernel<T><<<ceil_div(rows, WARPS_PER_BLOCK), WARPS_PER_BLOCK * WARP_SIZE, 0, stream>>>(
        delta, dout, out, B, Tn, C, NH);
    cudaCheck(cudaGetLastError());
    const TileLaunch dq = tile_launch<T>(attention_backward_dq_kernel<T>, B, Tn, C, NH);
    attention_backward_dq_kernel<T><<<dq.grid, WARP_SIZE, dq.shared, stream>>>(dqkv, dout, qkv, lse, delta, Tn, C,
                                                                                NH);
    cudaCheck(cudaGetLastError());
    const TileLaunch dkdv = tile_launch<T>(attention_backward_dkdv_kernel<T>, B, Tn, C, NH);
    attention_backward_dkdv_kernel<T><<<dkdv.grid, WARP_SIZE, dkdv.shared, stream>>>(dqkv, dout, qkv, lse, delta,
                                                                                        Tn, C, NH);
    cudaCheck(cudaGetLastError());
}

// Traffic of attention_backward: D from dout and out; the dq kernel reads qkv, dout, lse and D,
// writes its third of dqkv, and does three tile products per pair (q·kᵀ, dout·vᵀ, ds·k); the
// dk/dv kernel reads the same, writes the other two thirds, and does four (q·kᵀ, pᵀ·dout,
// dout·vᵀ, dsᵀ·q).
template <typename T>
Launches attention_backward_traffic(int B, int Tn, int C, int NH) {
    const double n = (double)B * Tn, rows = (double)attention_saved_size(B, Tn, NH), e = sizeof(T);
    const double inputs = n * 4 * C * e + 8 * rows;  // qkv, dout, lse, D
    return {{"attention_delta_kernel", 2 * n * C * e, 4 * rows, 2 * n * C},
            attention_tile_traffic("attention_backward_dq_kernel", inputs, n * C * e, B, Tn, C, NH, 3),
            attention_tile_traffic("attention_backward_dkdv_kernel", inputs, 2 * n * C * e, B, Tn, C, NH, 4)};
}

}  // namespace gpu
