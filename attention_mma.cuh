// attention_mma.cuh — causal attention on the tensor cores, in the manner of FlashAttention-2
// (Dao 2023), for bf16 and a head size HS fixed at compile time (docs/attention.md). attention.cuh
// says what is computed; its op picks these kernels or its exact ones.
//
// Work is cut into tiles of 64 rows. A block of 4 warps owns 64 rows, each warp 16 of them, and
// walks the tiles of the other side; every tile is copied once per block, a tile ahead of its use
// (cp.async, double-buffered), with 16-byte copies where HS allows, into shared memory rows padded
// by 16 bytes (so neither the copies nor the ldmatrix reads of 8 rows conflict in the banks), and
// read by all four warps:
//
//   forward      block = 64 queries; per key tile j ≤ i (the tiles above the diagonal skipped):
//                s = q·kᵀ, online softmax, o = o·exp(m − m′) + p·v
//   backward dq  block = 64 queries; per key tile j ≤ i: s = q·kᵀ, p = exp(s/√hs − lse),
//                dp = dout·vᵀ, ds = p·(dp − D), dq += ds·k
//   backward dk  block = 64 keys; per query tile from the diagonal on: sᵀ = k·qᵀ, pᵀ, dv += pᵀ·dout,
//   and dv       dpᵀ = v·doutᵀ, dsᵀ = pᵀ·(dpᵀ − D), dk += dsᵀ·q
//
// A warp's operand of 16 rows (q or dout; k and v in the dk/dv kernel) and its accumulators (o, or
// dq, or dk and dv; the running maximum and sum) stay in registers for the whole walk. Each
// product is a row of 16×8×16 mma.sync instructions (cuda/tensor_cores.cuh): the tile's rows come in
// through ldmatrix (k, v as the B operand of s = q·kᵀ; v, k, dout, q through ldmatrix .trans as
// the B operand of p·v, ds·k, pᵀ·dout, dsᵀ·q), and a 16×64 block of scores, laid out as mma
// accumulators, becomes the A operand of the next product in registers, rounded to bf16. The
// head is padded with zeros to a multiple of 16 (hs = 12 runs as 16). Each output element has
// one owner, every sum a fixed order: no atomics, and results repeat bit for bit.
#pragma once
#include <cmath>
#include <cstdint>

#include "cuda/async_copy.cuh"
#include "cuda/cuda_common.cuh"
#include "cuda/tensor_cores.cuh"

namespace gpu {

constexpr int ATTENTION_ROWS = 64;   // rows a block owns, and rows of every tile it walks
constexpr int ATTENTION_WARPS = 4;   // warps per block, 16 rows each
constexpr int ATTENTION_WARP_ROWS = ATTENTION_ROWS / ATTENTION_WARPS;
constexpr float LOG2E = 1.4426950408889634f;

// The head sizes with a tensor-core kernel: GPT-2's 64, and those the tests use.
template <int HS>
constexpr bool attention_mma_head_size() {
    return HS == 64 || HS == 8 || HS == 12 || HS == 16;
}

// The shapes that follow from the head size HS.
template <int HS>
struct HeadShape {
    static constexpr int padded = (HS + 15) / 16 * 16;  // the head as mma sees it, zeros past HS
    static constexpr int chunks = padded / 16;          // k16 chunks of a product over the head
    static constexpr int n_tiles = padded / 8;          // n8 tiles of a product onto the head
    static constexpr int ld = padded + 8;               // shared row stride (elements): 16 bytes of padding
    // Bytes of one load of a row from device memory: the widest power of two up to 16 that
    // divides the row's 2·HS bytes (so every row of qkv and dout starts aligned to it).
    static constexpr int load_bytes = (2 * HS) % 16 == 0 ? 16 : (2 * HS) % 8 == 0 ? 8 : (2 * HS) % 4 == 0 ? 4 : 2;
    static constexpr int tile_elements = ATTENTION_ROWS * ld;
};

// Scores of one warp: 16 rows × 64 columns as 8 mma accumulators of 16×8 (cuda/tensor_cores.cuh:
// element i of tile n of lane (g, t) is row g + 8·(i / 2), column 8n + 2t + i % 2).
using Scores = float[ATTENTION_ROWS / 8][4];

// ---------------------------------------------------------------------------------------------
// Block-level tile moves (all 128 threads call them)

// Starts copying rows t0 … t0+63 of a (T, row_stride) matrix at src, columns 0 … HS−1 of each
// row, into tile (64, ld) (cuda/async_copy.cuh: the copies are this thread's, in flight until it
// waits for them); rows past T repeat row T−1 (finite values, which the causal mask or p = 0
// keeps out of every result that is stored). Each thread copies load_bytes at a time.
template <int HS>
__device__ void start_tile_copy(bf16* tile, const bf16* src, size_t row_stride, int t0, int Tn) {
    using S = HeadShape<HS>;
    static_assert(S::load_bytes >= 4, "cp.async copies 4, 8 or 16 bytes");
    constexpr int per_load = S::load_bytes / 2, loads_per_row = HS / per_load, threads = ATTENTION_WARPS * WARP_SIZE;
    constexpr int loads = ATTENTION_ROWS * loads_per_row, rounds = (loads + threads - 1) / threads;
    for (int i = 0; i < rounds; i++) {
        const int e = threadIdx.x + i * threads, r = e / loads_per_row, c = e % loads_per_row * per_load;
        if (loads % threads != 0 && e >= loads) break;
        const int t = min(t0 + r, Tn - 1);
        cp_async<S::load_bytes>(tile + r * S::ld + c, src + (size_t)t * row_stride + c);
    }
}

// Columns HS … padded−1 of every row of a tile set to zero: the padding of the head, which
// load_tile never writes. Once per tile buffer, before its first use.
template <int HS>
__device__ void zero_head_padding(bf16* tile) {
    using S = HeadShape<HS>;
    constexpr int pad = S::padded - HS;
    if constexpr (pad > 0)
        for (int e = threadIdx.x; e < ATTENTION_ROWS * pad; e += ATTENTION_WARPS * WARP_SIZE)
            tile[e / pad * S::ld + HS + e % pad] = bf16{};
}

// Starts copying values[t0 + r] into rows[r] for the 64 rows of a tile (rows past T repeat row
// T−1, which finish_row_values replaces).
__device__ inline void start_row_values_copy(float* rows, const float* values, int t0, int Tn) {
    const int r = threadIdx.x;
    if (r < ATTENTION_ROWS) cp_async<4>(rows + r, values + min(t0 + r, Tn - 1));
}

// rows[r] = factor·rows[r] for the rows of the tile before T, `beyond` for those past it: by the
// thread that copied row r, once it has waited for its copy (and before the barrier that shows
// the rows to the other warps).
__device__ inline void finish_row_values(float* rows, int t0, int Tn, float factor, float beyond) {
    const int r = threadIdx.x;
    if (r < ATTENTION_ROWS) rows[r] = t0 + r < Tn ? factor * rows[r] : beyond;
}

// ---------------------------------------------------------------------------------------------
// Warp-level products (the 32 lanes of a warp call them)

// a = the A fragments (16 rows × the head) of rows first … first+15 of a tile.
template <int HS>
__device__ void load_row_fragments(uint32_t (&a)[HeadShape<HS>::chunks][4], const bf16* tile, int first) {
    const int lane = threadIdx.x % WARP_SIZE;
    for (int c = 0; c < HeadShape<HS>::chunks; c++)
        ldmatrix<4>(a[c], tile + (first + lane % 16) * HeadShape<HS>::ld + 16 * c + 8 * (lane / 16));
}

// s (16 × 64) = a · tileᵀ: the warp's 16 rows against the 64 rows of the tile, over the head.
// The tile's rows are the B operand's columns: ldmatrix<4> reads two n8 tiles of one k16 chunk.
template <int HS>
__device__ void product_with_rows(Scores& s, const uint32_t (&a)[HeadShape<HS>::chunks][4], const bf16* tile) {
    const int lane = threadIdx.x % WARP_SIZE;
    for (int n = 0; n < ATTENTION_ROWS / 8; n++)
        for (int i = 0; i < 4; i++) s[n][i] = 0.0f;
    for (int pair = 0; pair < ATTENTION_ROWS / 16; pair++)
        for (int c = 0; c < HeadShape<HS>::chunks; c++) {
            uint32_t b[4];  // n8 tile 2·pair: b[0], b[1]; tile 2·pair + 1: b[2], b[3]
            const int row = 16 * pair + lane % 8 + 8 * (lane / 16), col = 16 * c + 8 * (lane / 8 % 2);
            ldmatrix<4>(b, tile + row * HeadShape<HS>::ld + col);
            mma_m16n8k16_bf16(s[2 * pair], a[c], {b[0], b[1]});
            mma_m16n8k16_bf16(s[2 * pair + 1], a[c], {b[2], b[3]});
        }
}

// acc (16 × the head) += p · tile: p (16 × 64, fp32, rounded to bf16 here) against the tile's
// 64 rows. p's accumulator layout is the A fragment of the k16 chunk made of two n8 tiles; the
// tile is the B operand by rows, so ldmatrix_trans<4> reads two n8 tiles of the head per chunk.
template <int HS>
__device__ void accumulate_product(float (&acc)[HeadShape<HS>::n_tiles][4], const Scores& p, const bf16* tile) {
    const int lane = threadIdx.x % WARP_SIZE;
    for (int c = 0; c < ATTENTION_ROWS / 16; c++) {
        const uint32_t a[4] = {pack_bf16x2(p[2 * c][0], p[2 * c][1]), pack_bf16x2(p[2 * c][2], p[2 * c][3]),
                               pack_bf16x2(p[2 * c + 1][0], p[2 * c + 1][1]),
                               pack_bf16x2(p[2 * c + 1][2], p[2 * c + 1][3])};
        for (int pair = 0; pair < HeadShape<HS>::n_tiles / 2; pair++) {
            uint32_t b[4];  // head n8 tile 2·pair: b[0], b[1]; tile 2·pair + 1: b[2], b[3]
            const int row = 16 * c + lane % 8 + 8 * (lane / 8 % 2), col = 16 * pair + 8 * (lane / 16);
            ldmatrix_trans<4>(b, tile + row * HeadShape<HS>::ld + col);
            mma_m16n8k16_bf16(acc[2 * pair], a, {b[0], b[1]});
            mma_m16n8k16_bf16(acc[2 * pair + 1], a, {b[2], b[3]});
        }
    }
}

// Row r (0: row g, 1: row g + 8) and column of element i of n8 tile n of this lane.
__device__ inline int fragment_row(int i) { return threadIdx.x % WARP_SIZE / 4 + 8 * (i / 2); }
__device__ inline int fragment_col(int n, int i) { return 8 * n + 2 * (threadIdx.x % 4) + i % 2; }

// On a tile of the diagonal: scores of keys after their query set to −∞ (probability 0), the
// warp's rows being queries first_row … and the tile's columns keys first_col … .
__device__ inline void mask_future_keys(Scores& s, int first_row, int first_col) {
    for (int n = 0; n < ATTENTION_ROWS / 8; n++)
        for (int i = 0; i < 4; i++)
            if (first_col + fragment_col(n, i) > first_row + fragment_row(i)) s[n][i] = -INFINITY;
}
// The same for transposed scores: rows are keys first_row …, columns queries first_col … .
__device__ inline void mask_earlier_queries(Scores& s, int first_row, int first_col) {
    for (int n = 0; n < ATTENTION_ROWS / 8; n++)
        for (int i = 0; i < 4; i++)
            if (first_row + fragment_row(i) > first_col + fragment_col(n, i)) s[n][i] = -INFINITY;
}

// The maximum and the sum of a row of the warp's 16 × 64 block: each row is held by the 4 lanes
// of a quad (lanes 4g … 4g+3), so each lane's part is combined over its quad.
__device__ inline float quad_max(float x) {
    x = fmaxf(x, __shfl_xor_sync(0xffffffff, x, 1));
    return fmaxf(x, __shfl_xor_sync(0xffffffff, x, 2));
}
__device__ inline float quad_sum(float x) {
    x += __shfl_xor_sync(0xffffffff, x, 1);
    return x + __shfl_xor_sync(0xffffffff, x, 2);
}

// rows first_row … first_row+15 of dst (a (T, row_stride) matrix, columns 0 … HS−1) = factor·acc,
// the row's factor from row_factor[0] (row g) or [1] (row g + 8), in bf16 pairs; rows past T
// are left alone.
template <int HS>
__device__ void store_rows(bf16* dst, size_t row_stride, const float (&acc)[HeadShape<HS>::n_tiles][4],
                           const float (&row_factor)[2], int first_row, int Tn) {
    for (int n = 0; n < HeadShape<HS>::n_tiles; n++)
        for (int half = 0; half < 2; half++) {
            const int t = first_row + fragment_row(2 * half), col = fragment_col(n, 0);
            if (t >= Tn || col >= HS) continue;
            const float f = row_factor[half];
            *reinterpret_cast<uint32_t*>(dst + (size_t)t * row_stride + col) =
                pack_bf16x2(f * acc[n][2 * half], f * acc[n][2 * half + 1]);
        }
}

// ---------------------------------------------------------------------------------------------
// Kernels: grid (NH, B, ⌈T/64⌉), 4 warps per block. A GPU starts blocks in the order of their
// linear index (x fastest), so the tile is the slowest index: the forward and dq kernels take
// tile ⌈T/64⌉ − 1 − blockIdx.z, the longest walks (the last queries, which meet every key before
// them) first and the shortest last, where they fill the tail of the grid; the dk/dv kernel's
// tile blockIdx.z walks longest first as it is.
//
// The tiles of the walk are double-buffered: while the warps work on tile j in one pair of
// buffers, the copies of tile j + 1 into the other pair are in flight (cuda/async_copy.cuh). One
// barrier a tile, after each thread has waited for its own copies of tile j: past it every copy
// of tile j is visible to every warp, and every warp is done with tile j − 1, whose buffers the
// copies of tile j + 1 started right after it overwrite. The block's own rows (q, or q and dout,
// or k and v) come in before the walk through the second pair, with the first tile.
//
// The block's own rows are copied into buffer [1] of the tile pairs, which the walk does not use
// before tile 1: each kernel names that buffer for what it holds then (q_rows, k_rows, ...).
//
// The forward's __launch_bounds__ asks for at least 3 blocks an SM, and ptxas plans its registers
// for that occupancy (at most 170 a thread), with no spills at head size 64. docs/cuda.md lists
// what each kernel gets.

// out (B,T,C) and lse (B,NH,T) for the 64 queries of tile (⌈T/64⌉ − 1 − blockIdx.z) of head
// blockIdx.x, sequence blockIdx.y. Per row the running maximum m (log2 units) and each lane's part
// of the running sum ℓ; when m grows, ℓ and o are scaled by 2^(m − m′).
template <int HS>
__global__ void __launch_bounds__(ATTENTION_WARPS* WARP_SIZE, 3)
    attention_forward_mma_kernel(bf16* out, float* lse, const bf16* qkv, int Tn, int C, int NH) {
    using S = HeadShape<HS>;
    __shared__ __align__(16) bf16 k_tiles[2][S::tile_elements];  // key tile j in [j % 2]
    __shared__ __align__(16) bf16 v_tiles[2][S::tile_elements];  // value tile j in [j % 2]
    bf16* q_rows = k_tiles[1];  // the block's 64 queries, before the walk needs [1]
    const int h = blockIdx.x, b = blockIdx.y, tile = gridDim.z - 1 - blockIdx.z, warp = threadIdx.x / WARP_SIZE;
    const int q0 = tile * ATTENTION_ROWS, row0 = q0 + warp * ATTENTION_WARP_ROWS;
    const size_t stride = 3 * (size_t)C;
    const bf16* q = qkv + (size_t)b * Tn * stride + h * HS;
    const bf16 *k = q + C, *v = q + 2 * C;
    const float scale = LOG2E / sqrtf((float)HS);  // scores in log2 units: exp(x) = 2^(x·log2 e)

    for (int i = 0; i < 2; i++) zero_head_padding<HS>(k_tiles[i]), zero_head_padding<HS>(v_tiles[i]);
    start_tile_copy<HS>(q_rows, q, stride, q0, Tn);
    start_tile_copy<HS>(k_tiles[0], k, stride, 0, Tn);
    start_tile_copy<HS>(v_tiles[0], v, stride, 0, Tn);
    cp_async_commit();
    cp_async_wait<0>();
    __syncthreads();
    uint32_t qf[S::chunks][4];  // this warp's 16 queries
    load_row_fragments<HS>(qf, q_rows, warp * ATTENTION_WARP_ROWS);

    float o[S::n_tiles][4] = {};
    float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f};  // rows g and g + 8; ℓ: this lane's part
    auto key_tile = [&](int j, bool diagonal) {  // the diagonal tile is the last
        const int k0 = j * ATTENTION_ROWS;
        const bf16 *k_tile = k_tiles[j % 2], *v_tile = v_tiles[j % 2];
        cp_async_wait<0>();  // this thread's copies of tile j are in
        __syncthreads();     // every thread's are, and every warp is done with tile j − 1 (or q_rows)
        if (!diagonal) {
            start_tile_copy<HS>(k_tiles[(j + 1) % 2], k, stride, k0 + ATTENTION_ROWS, Tn);
            start_tile_copy<HS>(v_tiles[(j + 1) % 2], v, stride, k0 + ATTENTION_ROWS, Tn);
            cp_async_commit();
        }
        Scores s;
        product_with_rows<HS>(s, qf, k_tile);  // s = q·kᵀ
        if (diagonal) mask_future_keys(s, row0, k0);
        for (int half = 0; half < 2; half++) {
            float row_max = -INFINITY;
            for (int n = 0; n < ATTENTION_ROWS / 8; n++)
                row_max = fmaxf(row_max, fmaxf(s[n][2 * half], s[n][2 * half + 1]));
            const float new_max = fmaxf(m[half], quad_max(row_max) * scale);  // finite: key 0 is in every row
            const float correction = exp2f(m[half] - new_max);
            float sum = 0.0f;
            for (int n = 0; n < ATTENTION_ROWS / 8; n++)
                for (int i = 2 * half; i < 2 * half + 2; i++) {
                    s[n][i] = exp2f(fmaf(s[n][i], scale, -new_max));  // p
                    sum += s[n][i];
                }
            l[half] = l[half] * correction + sum;
            m[half] = new_max;
            for (int n = 0; n < S::n_tiles; n++) o[n][2 * half] *= correction, o[n][2 * half + 1] *= correction;
        }
        accumulate_product<HS>(o, s, v_tile);  // o += p·v
    };
    for (int j = 0; j < tile; j++) key_tile(j, false);
    key_tile(tile, true);
    float inverse[2];
    for (int half = 0; half < 2; half++) {
        const float sum = quad_sum(l[half]);
        inverse[half] = 1.0f / sum;
        const int t = row0 + fragment_row(2 * half);
        if (threadIdx.x % 4 == 0 && t < Tn) lse[((size_t)b * NH + h) * Tn + t] = (m[half] + log2f(sum)) / LOG2E;
    }
    store_rows<HS>(out + (size_t)b * Tn * C + h * HS, C, o, inverse, row0, Tn);
}

// dq for the 64 queries of tile (⌈T/64⌉ − 1 − blockIdx.z): over the key tiles up to the diagonal,
// p from lse, dp = dout·vᵀ, ds = p·(dp − D), dq += ds·k; dq·/√hs stored into the q third of dqkv.
template <int HS>
__global__ void __launch_bounds__(ATTENTION_WARPS* WARP_SIZE)
    attention_backward_dq_mma_kernel(bf16* dqkv, const bf16* dout, const bf16* qkv, const float* lse,
                                     const float* delta, int Tn, int C, int NH) {
    using S = HeadShape<HS>;
    __shared__ __align__(16) bf16 k_tiles[2][S::tile_elements];  // key tile j in [j % 2]
    __shared__ __align__(16) bf16 v_tiles[2][S::tile_elements];  // value tile j in [j % 2]
    bf16 *q_rows = k_tiles[1], *dout_rows = v_tiles[1];  // the block's 64 queries and their dout, before the walk
    const int h = blockIdx.x, b = blockIdx.y, tile = gridDim.z - 1 - blockIdx.z, warp = threadIdx.x / WARP_SIZE;
    const int q0 = tile * ATTENTION_ROWS, row0 = q0 + warp * ATTENTION_WARP_ROWS;
    const size_t stride = 3 * (size_t)C, rows = ((size_t)b * NH + h) * Tn;
    const bf16* q = qkv + (size_t)b * Tn * stride + h * HS;
    const bf16 *k = q + C, *v = q + 2 * C;
    const float scale = LOG2E / sqrtf((float)HS);

    for (int i = 0; i < 2; i++) zero_head_padding<HS>(k_tiles[i]), zero_head_padding<HS>(v_tiles[i]);
    start_tile_copy<HS>(q_rows, q, stride, q0, Tn);
    start_tile_copy<HS>(dout_rows, dout + (size_t)b * Tn * C + h * HS, C, q0, Tn);
    start_tile_copy<HS>(k_tiles[0], k, stride, 0, Tn);
    start_tile_copy<HS>(v_tiles[0], v, stride, 0, Tn);
    cp_async_commit();
    float row_lse[2], row_delta[2];  // rows g and g + 8, lse in log2 units
    for (int half = 0; half < 2; half++) {
        const int t = min(row0 + fragment_row(2 * half), Tn - 1);  // rows past T: any finite values
        row_lse[half] = LOG2E * lse[rows + t], row_delta[half] = delta[rows + t];
    }
    cp_async_wait<0>();
    __syncthreads();
    uint32_t qf[S::chunks][4], dof[S::chunks][4];  // this warp's 16 queries and their dout
    load_row_fragments<HS>(qf, q_rows, warp * ATTENTION_WARP_ROWS);
    load_row_fragments<HS>(dof, dout_rows, warp * ATTENTION_WARP_ROWS);

    float dq[S::n_tiles][4] = {};
    auto key_tile = [&](int j, bool diagonal) {  // the diagonal tile is the last
        const int k0 = j * ATTENTION_ROWS;
        const bf16 *k_tile = k_tiles[j % 2], *v_tile = v_tiles[j % 2];
        cp_async_wait<0>();  // this thread's copies of tile j are in
        __syncthreads();     // every thread's are, and every warp is done with tile j − 1 (or q_rows, dout_rows)
        if (!diagonal) {
            start_tile_copy<HS>(k_tiles[(j + 1) % 2], k, stride, k0 + ATTENTION_ROWS, Tn);
            start_tile_copy<HS>(v_tiles[(j + 1) % 2], v, stride, k0 + ATTENTION_ROWS, Tn);
            cp_async_commit();
        }
        Scores p, ds;
        product_with_rows<HS>(p, qf, k_tile);    // s = q·kᵀ
        product_with_rows<HS>(ds, dof, v_tile);  // dp = dout·vᵀ
        if (diagonal) mask_future_keys(p, row0, k0);
        for (int n = 0; n < ATTENTION_ROWS / 8; n++)
            for (int i = 0; i < 4; i++) {
                p[n][i] = exp2f(fmaf(p[n][i], scale, -row_lse[i / 2]));
                ds[n][i] = p[n][i] * (ds[n][i] - row_delta[i / 2]);
            }
        accumulate_product<HS>(dq, ds, k_tile);  // dq += ds·k
    };
    for (int j = 0; j < tile; j++) key_tile(j, false);
    key_tile(tile, true);
    const float factor[2] = {scale / LOG2E, scale / LOG2E};  // 1/√hs
    store_rows<HS>(dqkv + (size_t)b * Tn * stride + h * HS, stride, dq, factor, row0, Tn);
}

// dk and dv for the 64 keys of tile blockIdx.z: over the query tiles from the diagonal on,
// sᵀ = k·qᵀ, pᵀ from the queries' lse, dv += pᵀ·dout, dpᵀ = v·doutᵀ, dsᵀ = pᵀ·(dpᵀ − D),
// dk += dsᵀ·q; both stored into their thirds of dqkv at the end (dk·/√hs).
template <int HS>
__global__ void __launch_bounds__(ATTENTION_WARPS* WARP_SIZE)
    attention_backward_dkdv_mma_kernel(bf16* dqkv, const bf16* dout, const bf16* qkv, const float* lse,
                                       const float* delta, int Tn, int C, int NH) {
    using S = HeadShape<HS>;
    // Query tile j and its dout in [(j − tile) % 2]; with each query tile its lse (log2 units)
    // and D.
    __shared__ __align__(16) bf16 q_tiles[2][S::tile_elements];
    __shared__ __align__(16) bf16 dout_tiles[2][S::tile_elements];
    __shared__ float tile_lse[2][ATTENTION_ROWS];
    __shared__ float tile_delta[2][ATTENTION_ROWS];
    bf16 *k_rows = q_tiles[1], *v_rows = dout_tiles[1];  // the block's 64 keys and their values, before the walk
    const int h = blockIdx.x, b = blockIdx.y, tile = blockIdx.z, warp = threadIdx.x / WARP_SIZE;
    const int k0 = tile * ATTENTION_ROWS, key0 = k0 + warp * ATTENTION_WARP_ROWS;
    const size_t stride = 3 * (size_t)C, rows = ((size_t)b * NH + h) * Tn;
    const bf16* q = qkv + (size_t)b * Tn * stride + h * HS;
    const bf16 *k = q + C, *v = q + 2 * C, *dout_head = dout + (size_t)b * Tn * C + h * HS;
    const float scale = LOG2E / sqrtf((float)HS);
    auto start_query_tile_copy = [&](int j, int buffer) {
        const int t0 = j * ATTENTION_ROWS;
        start_tile_copy<HS>(q_tiles[buffer], q, stride, t0, Tn);
        start_tile_copy<HS>(dout_tiles[buffer], dout_head, C, t0, Tn);
        start_row_values_copy(tile_lse[buffer], lse + rows, t0, Tn);
        start_row_values_copy(tile_delta[buffer], delta + rows, t0, Tn);
    };

    for (int i = 0; i < 2; i++) zero_head_padding<HS>(q_tiles[i]), zero_head_padding<HS>(dout_tiles[i]);
    start_tile_copy<HS>(k_rows, k, stride, k0, Tn);
    start_tile_copy<HS>(v_rows, v, stride, k0, Tn);
    start_query_tile_copy(tile, 0);
    cp_async_commit();
    cp_async_wait<0>();
    __syncthreads();
    uint32_t kf[S::chunks][4], vf[S::chunks][4];  // this warp's 16 keys and their values
    load_row_fragments<HS>(kf, k_rows, warp * ATTENTION_WARP_ROWS);
    load_row_fragments<HS>(vf, v_rows, warp * ATTENTION_WARP_ROWS);

    float dk[S::n_tiles][4] = {}, dv[S::n_tiles][4] = {};
    auto query_tile = [&](int j, bool diagonal) {
        const int t0 = j * ATTENTION_ROWS, buffer = (j - tile) % 2;
        cp_async_wait<0>();  // this thread's copies of tile j are in
        finish_row_values(tile_lse[buffer], t0, Tn, LOG2E, INFINITY);  // queries past T: p = 0
        finish_row_values(tile_delta[buffer], t0, Tn, 1.0f, 0.0f);
        __syncthreads();     // every thread's are, and every warp is done with tile j − 1 (or k_rows, v_rows)
        if (t0 + ATTENTION_ROWS < Tn) {
            start_query_tile_copy(j + 1, 1 - buffer);
            cp_async_commit();
        }
        Scores p, ds;
        product_with_rows<HS>(p, kf, q_tiles[buffer]);      // sᵀ = k·qᵀ
        product_with_rows<HS>(ds, vf, dout_tiles[buffer]);  // dpᵀ = v·doutᵀ
        if (diagonal) mask_earlier_queries(p, key0, t0);
        for (int n = 0; n < ATTENTION_ROWS / 8; n++)
            for (int i = 0; i < 4; i++) {
                const int col = fragment_col(n, i);
                p[n][i] = exp2f(fmaf(p[n][i], scale, -tile_lse[buffer][col]));
                ds[n][i] = p[n][i] * (ds[n][i] - tile_delta[buffer][col]);
            }
        accumulate_product<HS>(dv, p, dout_tiles[buffer]);  // dv += pᵀ·dout
        accumulate_product<HS>(dk, ds, q_tiles[buffer]);    // dk += dsᵀ·q
    };
    query_tile(tile, true);
    for (int j = tile + 1; j * ATTENTION_ROWS < Tn; j++) query_tile(j, false);
    const float one[2] = {1.0f, 1.0f}, factor[2] = {scale / LOG2E, scale / LOG2E};
    bf16* dk_out = dqkv + (size_t)b * Tn * stride + C + h * HS;
    store_rows<HS>(dk_out, stride, dk, factor, key0, Tn);
    store_rows<HS>(dk_out + C, stride, dv, one, key0, Tn);
}

}  // namespace gpu
