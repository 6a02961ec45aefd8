// layernorm.cuh — LayerNorm over the C channels of each of N = B·T rows. Every LayerNorm of every placement (ln1/ln2 on a module's input in Pre- and
// Peri-LN, after the add in Post-LN, ln1o/ln2o on a module's output in Peri-LN, the final lnf)
// is this one op applied to a different tensor; gpt2.cu decides which.
//
//   layernorm forward:  out (N,C) = (x − mean)·rstd·w + b,  rstd = 1/sqrt(var + 1e-5), var
//                       biased; mean and rstd (N) are kept, in fp32, for the backward pass.
//   layernorm backward: dinp (N,C) += rstd·(g − mean_c(g) − x̂·mean_c(g·x̂)) with g = dout·w and
//                       x̂ = (x − mean)·rstd;  dw (C) += Σ_n dout·x̂;  db (C) += Σ_n dout.
// Elements are float or bf16, each tensor its own type: in bf16 mode a LayerNorm on the stream
// reads fp32 (X, its gradient) and writes the bf16 input of a matrix product, the after-add
// LayerNorm of Post-LN writes the fp32 stream, the output LayerNorms of Peri-LN are bf16
// throughout. Statistics, sums and the weight gradients dw, db are fp32. Backward ops add (+=)
// into their gradients, as the CPU reference does.
#pragma once
#include "cuda_common.cuh"

namespace gpu {

// ---------------------------------------------------------------------------------------------
// Kernels

// One warp per row: the mean, then the variance around it (two passes, as the CPU does), then
// the normalised row.
template <typename O, typename X, typename W>
__global__ void layernorm_forward_kernel(O* out, float* mean, float* rstd, const X* inp, const W* w, const W* b,
                                         int N, int C) {
    const int row = blockIdx.x * (blockDim.x / WARP_SIZE) + threadIdx.x / WARP_SIZE;
    const int lane = threadIdx.x % WARP_SIZE;
    if (row >= N) return;
    const X* x = inp + (size_t)row * C;
    float sum = 0.0f;
    for (int c = lane; c < C; c += WARP_SIZE) sum += to_float(x[c]);
    const float m = warp_sum(sum) / C;
    float sq = 0.0f;
    for (int c = lane; c < C; c += WARP_SIZE) {
        const float d = to_float(x[c]) - m;
        sq += d * d;
    }
    const float s = 1.0f / sqrtf(warp_sum(sq) / C + 1e-5f);
    O* y = out + (size_t)row * C;
    for (int c = lane; c < C; c += WARP_SIZE)
        y[c] = from_float<O>((to_float(x[c]) - m) * s * to_float(w[c]) + to_float(b[c]));
    if (lane == 0) {
        mean[row] = m;
        rstd[row] = s;
    }
}

// dinp, one warp per row: the two row means of g and g·x̂, then the gradient, added into dinp
// or, when `add` is false, stored (dinp not read).
template <typename D, typename G, typename X, typename W>
__global__ void layernorm_backward_input_kernel(D* dinp, const G* dout, const X* inp, const W* w, const float* mean,
                                                const float* rstd, int N, int C, bool add) {
    const int row = blockIdx.x * (blockDim.x / WARP_SIZE) + threadIdx.x / WARP_SIZE;
    const int lane = threadIdx.x % WARP_SIZE;
    if (row >= N) return;
    const X* x = inp + (size_t)row * C;
    const G* d = dout + (size_t)row * C;
    const float m = mean[row], s = rstd[row];
    float g_sum = 0.0f, gx_sum = 0.0f;
    for (int c = lane; c < C; c += WARP_SIZE) {
        const float g = to_float(d[c]) * to_float(w[c]);
        g_sum += g;
        gx_sum += g * (to_float(x[c]) - m) * s;
    }
    const float g_mean = warp_sum(g_sum) / C, gx_mean = warp_sum(gx_sum) / C;
    D* dx = dinp + (size_t)row * C;
    for (int c = lane; c < C; c += WARP_SIZE) {
        const float xhat = (to_float(x[c]) - m) * s;
        const float g = to_float(d[c]) * to_float(w[c]);
        const float grad = s * (g - g_mean - xhat * gx_mean);
        dx[c] = from_float<D>(add ? to_float(dx[c]) + grad : grad);
    }
}

// dw, db stage 1 (see cuda_common.cuh): partial[k·2C + c] = Σ_{n in chunk k} dout·x̂ and
// partial[k·2C + C + c] = Σ_{n in chunk k} dout.
template <typename G, typename X>
__global__ void layernorm_backward_weights_kernel(float* partial, const G* dout, const X* inp, const float* mean,
                                                  const float* rstd, int N, int C) {
    __shared__ float shared[TILE_ROWS * TILE_COLS];
    const int c = blockIdx.x * TILE_COLS + threadIdx.x;
    const int k = blockIdx.y, chunks = gridDim.y;
    const int end = row_chunk_begin(k + 1, chunks, N);
    float dw = 0.0f, db = 0.0f;
    if (c < C) {
        for (int n = row_chunk_begin(k, chunks, N) + threadIdx.y; n < end; n += TILE_ROWS) {
            const float d = to_float(dout[(size_t)n * C + c]);
            dw += d * (to_float(inp[(size_t)n * C + c]) - mean[n]) * rstd[n];
            db += d;
        }
    }
    dw = sum_over_tile_rows(dw, shared);
    db = sum_over_tile_rows(db, shared);
    if (threadIdx.y == 0 && c < C) {
        partial[(size_t)k * 2 * C + c] = dw;
        partial[(size_t)k * 2 * C + C + c] = db;
    }
}

// ---------------------------------------------------------------------------------------------
// Launchers

// out (N,C), mean (N), rstd (N) from inp (N,C), w (C), b (C).
template <typename O, typename X, typename W>
void layernorm_forward(O* out, float* mean, float* rstd, const X* inp, const W* w, const W* b, int N, int C,
                       cudaStream_t stream) {
    layernorm_forward_kernel<O, X, W><<<ceil_div(N, WARPS_PER_BLOCK), WARPS_PER_BLOCK * WARP_SIZE, 0, stream>>>(
        out, mean, rstd, inp, w, b, N, C);
    cudaCheck(cudaGetLastError());
}

// Traffic of layernorm_forward: inp (N,C), w and b (C) read; out (N,C), mean and rstd (N)
// written; about 8 FLOPs per element.
template <typename O, typename X, typename W>
Traffic layernorm_forward_traffic(int N, int C) {
    const double nc = (double)N * C;
    return {"layernorm_forward_kernel", nc * sizeof(X) + 2.0 * C * sizeof(W), nc * sizeof(O) + 8.0 * N, 8.0 * nc};
}

// dinp (N,C) += ... (= with GradOut::Write); dw, db (C) += ... given dout (N,C) and the
// forward's inp, w, mean, rstd. `partial` is scratch of MAX_ROW_CHUNKS·2C floats.
template <typename D, typename G, typename X, typename W>
void layernorm_backward(D* dinp, float* dw, float* db, const G* dout, const X* inp, const W* w, const float* mean,
                        const float* rstd, int N, int C, float* partial, cudaStream_t stream,
                        GradOut dinp_out = GradOut::Add) {
    layernorm_backward_input_kernel<D, G, X, W><<<ceil_div(N, WARPS_PER_BLOCK), WARPS_PER_BLOCK * WARP_SIZE, 0, stream>>>(
        dinp, dout, inp, w, mean, rstd, N, C, dinp_out == GradOut::Add);
    cudaCheck(cudaGetLastError());
    const int chunks = row_chunks(N);
    layernorm_backward_weights_kernel<G, X><<<column_tiles(C, chunks), dim3(TILE_COLS, TILE_ROWS), 0, stream>>>(
        partial, dout, inp, mean, rstd, N, C);
    cudaCheck(cudaGetLastError());
    add_column_partials(dw, partial, chunks, 2 * C, C, stream);
    add_column_partials(db, partial + C, chunks, 2 * C, C, stream);
}

// Traffic of layernorm_backward: the input gradient (dout, inp, w, mean, rstd read, and dinp
// when added into; dinp written), the weight partials (dout, inp, mean, rstd read), then dw and db.
template <typename D, typename G, typename X, typename W>
Launches layernorm_backward_traffic(int N, int C, GradOut dinp_out = GradOut::Add) {
    const double nc = (double)N * C;
    const int chunks = row_chunks(N);
    const double dinp_read = dinp_out == GradOut::Add ? sizeof(D) : 0;
    return {{"layernorm_backward_input_kernel", nc * (sizeof(G) + sizeof(X) + dinp_read) + C * sizeof(W) + 8.0 * N,
             nc * sizeof(D), 12.0 * nc},
            {"layernorm_backward_weights_kernel", nc * (sizeof(G) + sizeof(X)) + 8.0 * N, 8.0 * chunks * C, 5.0 * nc},
            add_column_partials_traffic(chunks, C), add_column_partials_traffic(chunks, C)};
}

}  // namespace gpu
