// stats.cuh — hidden-state statistics of a residual stream X (N,C), N = B·T rows (docs/statistics.md §1):
//
//   mean_abs  = mean over n, c of |X[n,c]|
//   entry_var = mean over n of the variance over c of X[n,·]   (spread inside one hidden state)
//   data_var  = mean over c of the variance over n of X[·,c]   (spread across the tokens)
//
// Variances are biased and computed around the mean (two passes), in fp32 on the device: per
// row Σ|x| and the row variance, per column the sum and then Σ (x − column mean)². The host
// adds those N + N + C numbers in double.
#pragma once
#include <vector>

#include "model.h"
#include "cuda/cuda_common.cuh"

namespace gpu {

// ---------------------------------------------------------------------------------------------
// Kernels

// One warp per row: abs_sum[n] = Σ_c |x|, row_var[n] = Σ_c (x − mean)²/C.
template <typename T>
__global__ void row_stats_kernel(float* abs_sum, float* row_var, const T* x, int N, int C) {
    const int row = blockIdx.x * (blockDim.x / WARP_SIZE) + threadIdx.x / WARP_SIZE;
    const int lane = threadIdx.x % WARP_SIZE;
    if (row >= N) return;
    const T* r = x + (size_t)row * C;
    float sum = 0.0f, abs = 0.0f;
    for (int c = lane; c < C; c += WARP_SIZE) {
        const float v = to_float(r[c]);
        sum += v;
        abs += fabsf(v);
    }
    const float mean = warp_sum(sum) / C;
    float sq = 0.0f;
    for (int c = lane; c < C; c += WARP_SIZE) {
        const float d = to_float(r[c]) - mean;
        sq += d * d;
    }
    sq = warp_sum(sq);
    abs = warp_sum(abs);
    if (lane == 0) {
        abs_sum[row] = abs;
        row_var[row] = sq / C;
    }
}

// Column sums, stage 1 (see cuda/cuda_common.cuh): partial[k·C + c] = Σ_{n in chunk k} x[n,c].
template <typename T>
__global__ void column_sum_kernel(float* partial, const T* x, int N, int C) {
    __shared__ float shared[TILE_ROWS * TILE_COLS];
    const int c = blockIdx.x * TILE_COLS + threadIdx.x;
    const int k = blockIdx.y, chunks = gridDim.y;
    const int end = row_chunk_begin(k + 1, chunks, N);
    float sum = 0.0f;
    if (c < C)
        for (int n = row_chunk_begin(k, chunks, N) + threadIdx.y; n < end; n += TILE_ROWS)
            sum += to_float(x[(size_t)n * C + c]);
    sum = sum_over_tile_rows(sum, shared);
    if (threadIdx.y == 0 && c < C) partial[(size_t)k * C + c] = sum;
}

// Squared deviations from the column means, stage 1: partial[k·C + c] = Σ_{n in chunk k}
// (x[n,c] − col_sum[c]/N)².
template <typename T>
__global__ void column_sq_dev_kernel(float* partial, const T* x, const float* col_sum, int N, int C) {
    __shared__ float shared[TILE_ROWS * TILE_COLS];
    const int c = blockIdx.x * TILE_COLS + threadIdx.x;
    const int k = blockIdx.y, chunks = gridDim.y;
    const int end = row_chunk_begin(k + 1, chunks, N);
    float sum = 0.0f;
    if (c < C) {
        const float mean = col_sum[c] / N;
        for (int n = row_chunk_begin(k, chunks, N) + threadIdx.y; n < end; n += TILE_ROWS) {
            const float d = to_float(x[(size_t)n * C + c]) - mean;
            sum += d * d;
        }
    }
    sum = sum_over_tile_rows(sum, shared);
    if (threadIdx.y == 0 && c < C) partial[(size_t)k * C + c] = sum;
}

// ---------------------------------------------------------------------------------------------
// Launchers

// Floats of scratch stream_statistics needs for an (N,C) stream.
inline size_t stream_statistics_scratch(int N, int C) {
    return 2 * (size_t)N + 2 * (size_t)C + (size_t)MAX_ROW_CHUNKS * C;
}

// The three statistics of x (N,C). Waits for the result.
template <typename T>
StreamStats stream_statistics(const T* x, int N, int C, float* scratch, cudaStream_t stream) {
    float* abs_sum = scratch;
    float* row_var = abs_sum + N;
    float* col_sum = row_var + N;
    float* col_sq_dev = col_sum + C;
    float* partial = col_sq_dev + C;
    const int rows_grid = (int)ceil_div(N, WARPS_PER_BLOCK), chunks = row_chunks(N);
    const dim3 tiles = column_tiles(C, chunks), tile(TILE_COLS, TILE_ROWS);
    row_stats_kernel<T><<<rows_grid, WARPS_PER_BLOCK * WARP_SIZE, 0, stream>>>(abs_sum, row_var, x, N, C);
    cudaCheck(cudaGetLastError());
    cudaCheck(cudaMemsetAsync(col_sum, 0, 2 * C * sizeof(float), stream));
    column_sum_kernel<T><<<tiles, tile, 0, stream>>>(partial, x, N, C);
    cudaCheck(cudaGetLastError());
    add_column_partials(col_sum, partial, chunks, C, C, stream);
    column_sq_dev_kernel<T><<<tiles, tile, 0, stream>>>(partial, x, col_sum, N, C);
    cudaCheck(cudaGetLastError());
    add_column_partials(col_sq_dev, partial, chunks, C, C, stream);

    std::vector<float> host(2 * (size_t)N + 2 * C);
    cudaCheck(cudaMemcpyAsync(host.data(), scratch, host.size() * sizeof(float), cudaMemcpyDeviceToHost, stream));
    cudaCheck(cudaStreamSynchronize(stream));
    double abs_total = 0, row_var_total = 0, col_var_total = 0;
    for (int n = 0; n < N; n++) {
        abs_total += host[n];
        row_var_total += host[N + n];
    }
    for (int c = 0; c < C; c++) col_var_total += host[2 * N + C + c];
    StreamStats st;
    st.mean_abs = abs_total / ((double)N * C);
    st.entry_var = row_var_total / N;
    st.data_var = col_var_total / N / C;
    return st;
}

}  // namespace gpu
