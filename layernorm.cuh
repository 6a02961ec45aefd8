// layernorm.cuh — LayerNorm over the C channels of each of N = B·T rows. Every LayerNorm of every placement (ln1/ln2 on a module's input in Pre- and
// Peri-LN, after the add in Post-LN, ln1o/ln2o on a module's output in Peri-LN, the final lnf)
// is this one op applied to a different tensor; gpt2.h decides which.
//
//   layernorm forward:  out (N,C) = (x − mean)·rstd·w + b,  rstd = 1/sqrt(var + 1e-5), var
//                       biased; mean and rstd (N) are kept, in fp32, for the backward pass.
//   residual + layernorm forward: sum (N,C) = x + Δt·f (docs/model.md §1), stored, then the
//                       layernorm forward of sum, in one pass over the rows.
//   layernorm backward: dinp (N,C) += rstd·(g − mean_c(g) − x̂·mean_c(g·x̂)) with g = dout·w and
//                       x̂ = (x − mean)·rstd;  dw (C) += Σ_n dout·x̂;  db (C) += Σ_n dout.
// Elements are float or bf16, each tensor its own type: in bf16 mode a LayerNorm on the stream
// reads fp32 (X, its gradient) and writes the bf16 input of a matrix product, the after-add
// LayerNorm of Post-LN writes the fp32 stream, the output LayerNorms of Peri-LN are bf16
// throughout. Statistics, sums and the weight gradients dw, db are fp32. Backward ops add (+=)
// into their gradients, as the CPU reference does.
//
// Loads and stores move packs of K consecutive elements of a row, K = 16 bytes over the widest
// element type of the kernel (4 where one tensor is fp32, 8 when all are bf16), when C is a
// multiple of K and every pointer is aligned to its pack; else one element at a time (K = 1).
// Indices inside a row are 32-bit; each row's start is computed once, in 64 bits.
// The ops that launch these kernels: CudaOps::layernorm_forward, residual_layernorm_forward,
// layernorm_backward and layernorm_backward_residual (cuda_ops.cuh).
#pragma once
#include <algorithm>
#include <cstdint>

#include "cuda/cuda_common.cuh"
#include "model.h"

namespace gpu {

// ---------------------------------------------------------------------------------------------
// Packs of K elements: pack_width, rows_in_packs, load_pack, store_pack (cuda/cuda_common.cuh).

// ---------------------------------------------------------------------------------------------
// Kernels

// The row a forward kernel normalises, K elements at a time from column c: x, or, with
// ADD_FIRST, x + Δt·f rounded to S (so what is normalised is the sum as stored).
template <bool ADD_FIRST, int K, typename S, typename F>
struct NormInput {
    const S* x;
    const F* f;  // used only with ADD_FIRST
    float dt;
    __device__ void load(float (&s)[K], int c) const {
        load_pack(s, x + c);
        if constexpr (ADD_FIRST) {
            float g[K];
            load_pack(g, f + c);
            for (int e = 0; e < K; e++) s[e] = to_float(from_float<S>(s[e] + dt * g[e]));
        }
    }
};

// One warp per row, lane l on the packs of K columns at l·K, l·K + 32·K, ...: the mean (with
// ADD_FIRST the row sum x + Δt·f is stored into `sum` on the way), then the variance around it
// (two passes, as the CPU does), then the normalised row. The later passes read x (and f)
// again rather than the stored sum, so each input is read from memory once.
template <bool ADD_FIRST, int K, typename O, typename S, typename F, typename W>
__global__ void layernorm_forward_kernel(O* out, float* mean, float* rstd, S* sum, const S* inp, const F* f, float dt,
                                         const W* w, const W* b, int N, int C) {
    const int row = blockIdx.x * (blockDim.x / WARP_SIZE) + threadIdx.x / WARP_SIZE;
    const int lane = threadIdx.x % WARP_SIZE;
    if (row >= N) return;
    const size_t offset = (size_t)row * C;
    const NormInput<ADD_FIRST, K, S, F> x{inp + offset, ADD_FIRST ? f + offset : nullptr, dt};
    float total = 0.0f;
    for (int c = lane * K; c < C; c += WARP_SIZE * K) {
        float s[K];
        x.load(s, c);
        if constexpr (ADD_FIRST) store_pack(sum + offset + c, s);
        for (int e = 0; e < K; e++) total += s[e];
    }
    const float m = warp_sum(total) / C;
    float sq = 0.0f;
    for (int c = lane * K; c < C; c += WARP_SIZE * K) {
        float s[K];
        x.load(s, c);
        for (int e = 0; e < K; e++) sq += (s[e] - m) * (s[e] - m);
    }
    const float r = 1.0f / sqrtf(warp_sum(sq) / C + 1e-5f);
    for (int c = lane * K; c < C; c += WARP_SIZE * K) {
        float s[K], wc[K], bc[K];
        x.load(s, c);
        load_pack(wc, w + c);
        load_pack(bc, b + c);
        for (int e = 0; e < K; e++) s[e] = (s[e] - m) * r * wc[e] + bc[e];
        store_pack(out + offset + c, s);
    }
    if (lane == 0) {
        mean[row] = m;
        rstd[row] = r;
    }
}

// The whole backward in one pass over the rows. Block k owns chunk k of the rows
// (row_chunk_begin, cuda/cuda_common.cuh); its warps take the chunk's rows in turn (warp j: rows
// j, j + warps, ...), lane l the packs of K columns at l·K, l·K + 32·K, ... For each row: the
// two row means of g and g·x̂, then dinp, added into or, when `add` is false, stored (dinp not
// read), while the warp adds dout·x̂ and dout into its own column sums in shared memory (each
// lane only ever touches its own columns, so no barrier is needed). At the end the block adds
// its warps' column sums in warp order, the first stage of a column sum (cuda/cuda_common.cuh;
// stage 2 is layernorm_weight_gradients_kernel):
// partial[k·2C + c] = Σ_{n in chunk k} dout·x̂ and partial[k·2C + C + c] = Σ_{n in chunk k} dout.
// When dres is given, the kernel also stores dres = Δt·dinp (the dinp just stored, rounded to
// F): the gradient the residual step before hands its module (layernorm_backward_residual).
template <int K, typename D, typename G, typename X, typename W, typename F>
__global__ void layernorm_backward_kernel(D* dinp, F* dres, float dt, float* partial, const G* dout, const X* inp,
                                          const W* w, const float* mean, const float* rstd, int N, int C, bool add) {
    extern __shared__ __align__(16) float column_sums[];  // (warps, 2C): Σ dout·x̂, then Σ dout, per warp
    const int warp = threadIdx.x / WARP_SIZE, lane = threadIdx.x % WARP_SIZE, warps = blockDim.x / WARP_SIZE;
    float* dw_sum = column_sums + (size_t)warp * 2 * C;
    float* db_sum = dw_sum + C;
    const float zeros[K] = {};
    for (int c = lane * K; c < C; c += WARP_SIZE * K) {
        store_pack(dw_sum + c, zeros);
        store_pack(db_sum + c, zeros);
    }
    const int k = blockIdx.x, end = row_chunk_begin(k + 1, gridDim.x, N);
    for (int row = row_chunk_begin(k, gridDim.x, N) + warp; row < end; row += warps) {
        const size_t offset = (size_t)row * C;
        const float m = mean[row], s = rstd[row];
        float g_sum = 0.0f, gx_sum = 0.0f;
        for (int c = lane * K; c < C; c += WARP_SIZE * K) {
            float d[K], x[K], wc[K];
            load_pack(d, dout + offset + c);
            load_pack(x, inp + offset + c);
            load_pack(wc, w + c);
            for (int e = 0; e < K; e++) {
                const float g = d[e] * wc[e];
                g_sum += g;
                gx_sum += g * (x[e] - m) * s;
            }
        }
        const float g_mean = warp_sum(g_sum) / C, gx_mean = warp_sum(gx_sum) / C;
        for (int c = lane * K; c < C; c += WARP_SIZE * K) {
            float d[K], x[K], wc[K], dx[K], dw[K], db[K];
            load_pack(d, dout + offset + c);
            load_pack(x, inp + offset + c);
            load_pack(wc, w + c);
            if (add) load_pack(dx, dinp + offset + c);
            load_pack(dw, dw_sum + c);
            load_pack(db, db_sum + c);
            for (int e = 0; e < K; e++) {
                const float xhat = (x[e] - m) * s;
                const float grad = s * (d[e] * wc[e] - g_mean - xhat * gx_mean);
                dx[e] = add ? dx[e] + grad : grad;
                dw[e] += d[e] * xhat;
                db[e] += d[e];
            }
            store_pack(dinp + offset + c, dx);
            if (dres) {
                float r[K];
                for (int e = 0; e < K; e++) r[e] = dt * to_float(from_float<D>(dx[e]));
                store_pack(dres + offset + c, r);
            }
            store_pack(dw_sum + c, dw);
            store_pack(db_sum + c, db);
        }
    }
    __syncthreads();
    for (int c = threadIdx.x; c < 2 * C; c += blockDim.x) {
        float total = 0.0f;
        for (int j = 0; j < warps; j++) total += column_sums[(size_t)j * 2 * C + c];
        partial[(size_t)k * 2 * C + c] = total;
    }
}

// dw, db stage 2: dw[c] += Σ_k partial[k·2C + c] and db[c] += Σ_k partial[k·2C + C + c] over
// the `chunks` partials, both in one launch: a block per 32 of the 2C columns, each column
// summed as add_column_partials_kernel does (cuda/cuda_common.cuh).
__global__ void layernorm_weight_gradients_kernel(float* dw, float* db, const float* partial, int chunks, int C) {
    __shared__ float shared[TILE_ROWS * TILE_COLS];
    const int c = blockIdx.x * TILE_COLS + threadIdx.x;
    const float sum = sum_of_column_partials(partial, chunks, 2 * C, c, c < 2 * C, shared);
    if (threadIdx.y == 0 && c < 2 * C) {
        float* out = c < C ? dw + c : db + (c - C);
        *out += sum;
    }
}

// ---------------------------------------------------------------------------------------------
// The shapes of the launches (CudaOps::layernorm_backward and layernorm_backward_residual)

// The backward kernel's grid: a block for every 16 rows (two for each of 8 warps), and at most
// two blocks for each of an H200's 132 SMs.
constexpr int LAYERNORM_BACKWARD_MAX_BLOCKS = 2 * 132;
inline int layernorm_backward_blocks(int N) {
    return (int)std::min<size_t>(LAYERNORM_BACKWARD_MAX_BLOCKS, std::max<size_t>(1, ceil_div(N, 2 * WARPS_PER_BLOCK)));
}

// Warps per block of the backward kernel for C channels: 8, or as many as keep their column
// sums (2C floats each) within 96 KiB of shared memory, so that two blocks fit on an SM of an
// A100 or H100/H200; at least one.
constexpr size_t LAYERNORM_BACKWARD_SHARED = 96 << 10;
inline int layernorm_backward_warps(int C) {
    return (int)std::clamp<size_t>(LAYERNORM_BACKWARD_SHARED / (8 * (size_t)C), 1, WARPS_PER_BLOCK);
}

// Dynamic shared memory of a backward block for C channels: each warp's two column sums.
inline size_t layernorm_backward_shared_bytes(int C) {
    return (size_t)layernorm_backward_warps(C) * 2 * C * sizeof(float);
}

// Floats of the `partial` scratch layernorm_backward needs for C channels.
inline size_t layernorm_backward_scratch(int C) { return (size_t)LAYERNORM_BACKWARD_MAX_BLOCKS * 2 * C; }

}  // namespace gpu
