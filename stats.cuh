// stats.cuh — hidden-state statistics of a residual stream X (N,C), N = B·T rows (docs/statistics.md §1):
//
//   mean_abs  = mean over n, c of |X[n,c]|
//   entry_var = mean over n of the variance over c of X[n,·]   (spread inside one hidden state)
//   data_var  = mean over c of the variance over n of X[·,c]   (spread across the tokens)
//
// Variances are biased and computed around the mean (two passes), in fp32 on the device: per
// row Σ|x| and the row variance, per column the sum and then Σ (x − column mean)². The host
// adds those N + N + C numbers in double.
// The op that launches these kernels: CudaOps::stream_statistics (cuda_ops.cuh).
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
// Scratch (CudaOps::stream_statistics)

// Floats of scratch stream_statistics needs for an (N,C) stream.
inline size_t stream_statistics_scratch(int N, int C) {
    return 2 * (size_t)N + 2 * (size_t)C + (size_t)MAX_ROW_CHUNKS * C;
}

}  // namespace gpu
