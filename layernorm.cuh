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
#pragma once
#include <algorithm>
#include <cstdint>

#include "cuda_common.cuh"

namespace gpu {

// ---------------------------------------------------------------------------------------------
// Packs of K elements: pack_width, rows_in_packs, load_pack, store_pack (cuda_common.cuh).

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
// (row_chunk_begin, cuda_common.cuh); its warps take the chunk's rows in turn (warp j: rows
// j, j + warps, ...), lane l the packs of K columns at l·K, l·K + 32·K, ... For each row: the
// two row means of g and g·x̂, then dinp, added into or, when `add` is false, stored (dinp not
// read), while the warp adds dout·x̂ and dout into its own column sums in shared memory (each
// lane only ever touches its own columns, so no barrier is needed). At the end the block adds
// its warps' column sums in warp order, the first stage of a column sum (cuda_common.cuh;
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

// ptxas for sm_90 (its issue is add_column_partials_kernel's: cuda_common.cuh).
constexpr KernelResources LAYERNORM_WEIGHT_GRADIENTS_RESOURCES{TILE_COLS * TILE_ROWS, 32, TILE_ROWS * TILE_COLS * 4};

// dw, db stage 2: dw[c] += Σ_k partial[k·2C + c] and db[c] += Σ_k partial[k·2C + C + c] over
// the `chunks` partials, both in one launch: a block per 32 of the 2C columns, each column
// summed as add_column_partials does (cuda_common.cuh).
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
// Launchers

// out (N,C), mean (N), rstd (N) = LayerNorm of inp (N,C) with w, b (C): one warp per row, in
// packs where the rows allow, else element by element.
template <typename O, typename X, typename W>
void layernorm_forward(O* out, float* mean, float* rstd, const X* inp, const W* w, const W* b, int N, int C,
                       cudaStream_t stream) {
    constexpr int K = pack_width<O, X, W>();
    const int blocks = ceil_div(N, WARPS_PER_BLOCK), threads = WARPS_PER_BLOCK * WARP_SIZE;
    X* no_sum = nullptr;
    const X* no_f = nullptr;
    if (rows_in_packs<K>(C, out, inp, w, b))
        layernorm_forward_kernel<false, K, O, X, X, W><<<blocks, threads, 0, stream>>>(out, mean, rstd, no_sum, inp,
                                                                                      no_f, 0.0f, w, b, N, C);
    else
        layernorm_forward_kernel<false, 1, O, X, X, W><<<blocks, threads, 0, stream>>>(out, mean, rstd, no_sum, inp,
                                                                                      no_f, 0.0f, w, b, N, C);
    cudaCheck(cudaGetLastError());
}

// The issue of layernorm_forward_kernel in packs of K (the model's rows are aligned), one warp
// per row, from its structure. A trip takes K columns through the three passes: per element,
// the input (x converted, and with ADD_FIRST f converted, the fma and the rounding to S), then
// pass 1's sum, pass 2's difference and square, pass 3's (s − m)·r·w + b with w and b converted
// and the result converted to O; per pack, each pass's loads and stores and 3 of loop (index,
// test, branch). Once: 60 of indices and setup, two warp sums (5 shuffles and adds: 20 each),
// rstd (5), the stores of mean and rstd (6), entering the three loops (10 each).
template <bool ADD_FIRST, int K, typename O, typename S, typename F, typename W>
constexpr WarpWork layernorm_forward_work() {
    const double add = ADD_FIRST ? conversion<F>() + 1 + 2 * conversion<S>() : 0, in = conversion<S>() + add;
    const double loads = 1 + ADD_FIRST, loop = 3;
    const double pass1 = K * (in + 1) + loads + ADD_FIRST + loop, pass2 = K * (in + 2) + loads + loop;
    const double pass3 = K * (in + 3 + 2 * conversion<W>() + conversion<O>()) + loads + 2 + 1 + loop;
    return {pass1 + pass2 + pass3, 0, 60 + 2 * 20 + 5 + 6 + 3 * 10};
}

// ptxas for sm_90: 32 registers (40 for the fp32 sum of two fp32 tensors), 8 warps a block.
template <bool ADD_FIRST, typename O, typename S, typename F>
constexpr KernelResources layernorm_forward_resources() {
    const bool wide = ADD_FIRST && sizeof(O) == 4 && sizeof(S) == 4 && sizeof(F) == 4;
    return {WARPS_PER_BLOCK * WARP_SIZE, wide ? 40 : 32, 0};
}

// `t` with the issue of a forward launch over N rows of C (no shared memory).
template <bool ADD_FIRST, typename O, typename S, typename F, typename W>
Traffic layernorm_forward_issue(Traffic t, int N, int C) {
    constexpr int K = pack_width<O, S, F, W>();
    const WarpWork work = layernorm_forward_work<ADD_FIRST, K, O, S, F, W>();
    return with_issue(t, work.instructions(N, 1, ceil_div(C, WARP_SIZE * K)), 0,
                      layernorm_forward_resources<ADD_FIRST, O, S, F>());
}

// Traffic of layernorm_forward: inp (N,C), w and b (C) read; out (N,C), mean and rstd (N)
// written; about 8 FLOPs per element.
template <typename O, typename X, typename W>
Traffic layernorm_forward_traffic(int N, int C) {
    const double nc = (double)N * C;
    return layernorm_forward_issue<false, O, X, X, W>(
        {"layernorm_forward_kernel", nc * sizeof(X) + 2.0 * C * sizeof(W), nc * sizeof(O) + 8.0 * N, 8.0 * nc}, N, C);
}

// sum (N,C) = x + Δt·f, then out (N,C), mean (N), rstd (N) = layernorm_forward of sum with w,
// b (C): the same values as residual_forward (residual.cuh) followed by layernorm_forward.
template <typename S, typename F, typename O, typename W>
void residual_layernorm_forward(S* sum, O* out, float* mean, float* rstd, const S* x, const F* f, float dt, const W* w,
                                const W* b, int N, int C, cudaStream_t stream) {
    constexpr int K = pack_width<O, S, F, W>();
    const int blocks = ceil_div(N, WARPS_PER_BLOCK), threads = WARPS_PER_BLOCK * WARP_SIZE;
    if (rows_in_packs<K>(C, out, sum, x, f, w, b))
        layernorm_forward_kernel<true, K, O, S, F, W><<<blocks, threads, 0, stream>>>(out, mean, rstd, sum, x, f, dt, w,
                                                                                     b, N, C);
    else
        layernorm_forward_kernel<true, 1, O, S, F, W><<<blocks, threads, 0, stream>>>(out, mean, rstd, sum, x, f, dt, w,
                                                                                     b, N, C);
    cudaCheck(cudaGetLastError());
}

// Traffic of residual_layernorm_forward: x and f (N,C), w and b (C) read; sum and out (N,C),
// mean and rstd (N) written; about 14 FLOPs per element (the add is redone in each of the
// kernel's three passes over the row).
template <typename S, typename F, typename O, typename W>
Traffic residual_layernorm_forward_traffic(int N, int C) {
    const double nc = (double)N * C;
    return layernorm_forward_issue<true, O, S, F, W>({"layernorm_forward_kernel",
                                                      nc * (sizeof(S) + sizeof(F)) + 2.0 * C * sizeof(W),
                                                      nc * (sizeof(S) + sizeof(O)) + 8.0 * N, 14.0 * nc},
                                                     N, C);
}

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

// Floats of the `partial` scratch layernorm_backward needs for C channels.
inline size_t layernorm_backward_scratch(int C) { return (size_t)LAYERNORM_BACKWARD_MAX_BLOCKS * 2 * C; }

// dinp (N,C) += ... (= with GradOut::Write); dw, db (C) += ... given dout (N,C) and the
// forward's inp, w, mean, rstd: one pass over the rows for dinp and the chunks' partial column
// sums, in packs where the rows allow, then one launch that adds them up into dw and db.
// `partial` is scratch of layernorm_backward_scratch(C) floats. With dres (N,C), the pass also
// stores dres = Δt·dinp as stored (written): when dinp is the gradient of a residual sum
// s = x + Δt·f, the residual step's backward for f (docs/block.md §2) without another pass over
// the stream gradient (layernorm_backward_residual, gpt2.cu). Above the default 48 KiB of
// dynamic shared memory the pass's limit is raised first.
template <typename D, typename G, typename X, typename W, typename F = G>
void layernorm_backward(D* dinp, float* dw, float* db, const G* dout, const X* inp, const W* w, const float* mean,
                        const float* rstd, int N, int C, float* partial, cudaStream_t stream,
                        GradOut dinp_out = GradOut::Add, F* dres = nullptr, float dt = 0.0f) {
    constexpr int K = pack_width<D, G, X, W, F>();
    const int blocks = layernorm_backward_blocks(N), threads = layernorm_backward_warps(C) * WARP_SIZE;
    const size_t shared = (size_t)threads / WARP_SIZE * 2 * C * sizeof(float);
    const bool add = dinp_out == GradOut::Add;
    if (shared > (48 << 10)) {  // both variants' limit
        cudaCheck(cudaFuncSetAttribute(layernorm_backward_kernel<K, D, G, X, W, F>,
                                       cudaFuncAttributeMaxDynamicSharedMemorySize, (int)shared));
        cudaCheck(cudaFuncSetAttribute(layernorm_backward_kernel<1, D, G, X, W, F>,
                                       cudaFuncAttributeMaxDynamicSharedMemorySize, (int)shared));
    }
    if (rows_in_packs<K>(C, dinp, dres, dout, inp, w))
        layernorm_backward_kernel<K, D, G, X, W, F><<<blocks, threads, shared, stream>>>(
            dinp, dres, dt, partial, dout, inp, w, mean, rstd, N, C, add);
    else
        layernorm_backward_kernel<1, D, G, X, W, F><<<blocks, threads, shared, stream>>>(
            dinp, dres, dt, partial, dout, inp, w, mean, rstd, N, C, add);
    cudaCheck(cudaGetLastError());
    layernorm_weight_gradients_kernel<<<column_tiles(2 * C, 1), dim3(TILE_COLS, TILE_ROWS), 0, stream>>>(
        dw, db, partial, blocks, C);
    cudaCheck(cudaGetLastError());
}

// The issue of layernorm_backward_kernel in packs of K, from its structure. A trip takes K
// columns of a row through both passes: per element, pass 1's conversions of dout and w (and
// x), g = dout·w, its sum, x̂ and the sum of g·x̂ (5); pass 2's conversions (dinp's too when it
// is bf16), x̂ (2), the gradient (5), its add into dinp, the fmas of dw and db, and with dres
// Δt·dinp converted to F; per pack, each access (3 in pass 1; dout, x, w, dinp, the two column
// sums read and stored, dinp and dres stored in pass 2) with 2 of address, and 3 of loop per
// pass. Per row: mean and rstd loaded, two warp sums (20 each), the divisions, entering the
// loops (20 each) and the row loop (3). Once: 40 of setup, zeroing the warp's column sums (5 a
// pack of each), and its share of the block's sums of the warps' columns (2C/256 columns a
// thread, each `warps` loads and adds, its store: 2·warps + 6).
template <int K, typename D, typename G, typename X, typename W, typename F>
WarpWork layernorm_backward_work(int C, bool residual) {
    const double cvt = conversion<G>() + conversion<X>() + conversion<W>();
    const double pass1 = K * (cvt + 5) + 3 * 3 + 3;
    const double dres = residual ? 1 + conversion<F>() + 2 * conversion<D>() : 0;
    const double pass2 = K * (cvt + conversion<D>() + 2 + 5 + 3 + dres) + (8 + residual) * 3 + 3;
    const int warps = layernorm_backward_warps(C);
    const double zeroing = 2 * 5 * ceil_div(C, WARP_SIZE * K), sums = ceil_div(2 * C, warps * WARP_SIZE) * (2.0 * warps + 6);
    return {pass1 + pass2, 4 + 2 * 20 + 2 + 2 * 20 + 3, 40 + zeroing + sums};
}

// ptxas for sm_90: 48 registers (76 for bf16 throughout), the column sums' dynamic shared memory.
template <typename D, typename G, typename X>
KernelResources layernorm_backward_resources(int C) {
    const int warps = layernorm_backward_warps(C), all_bf16 = sizeof(D) == 2 && sizeof(G) == 2 && sizeof(X) == 2;
    return {warps * WARP_SIZE, all_bf16 ? 76 : 48, warps * 2 * C * 4};
}

// The shared wavefronts of one warp of the backward kernel: its two column sums (4C bytes each,
// C·4/128 wavefronts a pass over them) zeroed, then read and stored for each row, and its share
// of the block's sums of the warps' columns (per 32 of the 2C columns, a wavefront from each
// warp's sums: 2C/32 a warp on average).
inline double layernorm_backward_wavefronts(int C, double rows) {
    const double pass = ceil_div(4 * C, 128);
    return 2 * pass + rows * 4 * pass + ceil_div(2 * C, WARP_SIZE);
}

// Traffic of layernorm_backward: dout, inp, w, mean, rstd read, and dinp when added into;
// dinp and the partial column sums written; then the partials, dw and db read, dw and db written.
// `F` is the type of dres (layernorm_backward_residual), which it writes only there.
template <typename D, typename G, typename X, typename W, typename F = G>
Launches layernorm_backward_traffic(int N, int C, GradOut dinp_out = GradOut::Add, bool residual = false) {
    const double nc = (double)N * C;
    const int blocks = layernorm_backward_blocks(N), warps = layernorm_backward_warps(C);
    const double dinp_read = dinp_out == GradOut::Add ? sizeof(D) : 0;
    constexpr int K = pack_width<D, G, X, W, F>();
    const double rows = (double)N / (blocks * warps);  // per warp
    const WarpWork work = layernorm_backward_work<K, D, G, X, W, F>(C, residual);
    const Traffic pass{"layernorm_backward_kernel", nc * (sizeof(G) + sizeof(X) + dinp_read) + C * sizeof(W) + 8.0 * N,
                       nc * (sizeof(D) + (residual ? sizeof(F) : 0)) + 8.0 * blocks * C, (17.0 + residual) * nc};
    const Traffic sums{"layernorm_weight_gradients_kernel", 8.0 * C * (blocks + 1), 8.0 * C, 2.0 * C * blocks};
    return {with_issue(pass, work.instructions((double)blocks * warps, rows, ceil_div(C, WARP_SIZE * K)),
                       (double)blocks * warps * layernorm_backward_wavefronts(C, rows),
                       layernorm_backward_resources<D, G, X>(C)),
            column_partials_issue(sums, blocks, 2 * C, LAYERNORM_WEIGHT_GRADIENTS_RESOURCES)};
}

// Traffic of layernorm_backward_residual: that of layernorm_backward, and df (N,C) written.
template <typename D, typename F, typename G, typename X, typename W>
Launches layernorm_backward_residual_traffic(int N, int C, GradOut dinp_out = GradOut::Add) {
    return layernorm_backward_traffic<D, G, X, W, F>(N, C, dinp_out, true);
}

}  // namespace gpu
