// diagnostics.cuh — the measurements of diagnostics.h for the CUDA backend's `stats` records
// (docs/experiments.md, *Diagnostics*), on the device:
//
//   attention_logit_max  max over b, h and t' ≤ t of q_t·k_t'/√hs, from qkv (B,T,3C)
//   logit_statistics     the largest logit and the mean of log Σ_{v<V} exp(z_v) over N rows
//
// One warp per row computes the row's maximum (and log-partition) in fp32; the host downloads
// the per-row values and reduces them in double. They run only at stats time, so the attention
// kernel recomputes the dot products plainly (no tensor cores, no score buffer).
// The ops that launch these kernels: CudaOps::attention_logit_max and logit_statistics
// (cuda_ops.cuh).
#pragma once
#include <algorithm>
#include <cmath>
#include <vector>

#include "backend.h"
#include "cuda/cuda_common.cuh"
#include "loss.cuh"

namespace gpu {

// ---------------------------------------------------------------------------------------------
// Kernels

// One warp per row r = (b·NH + h)·T + t: row_max[r] = max over t' ≤ t of q_t·k_t'·scale, the
// lanes striding over t'.
template <typename A>
__global__ void attention_logit_row_max_kernel(float* row_max, const A* qkv, int B, int T, int C, int NH,
                                               float scale) {
    const int row = blockIdx.x * (blockDim.x / WARP_SIZE) + threadIdx.x / WARP_SIZE;
    const int lane = threadIdx.x % WARP_SIZE;
    if (row >= B * NH * T) return;
    const int hs = C / NH, t = row % T, h = row / T % NH, b = row / (T * NH);
    const A* q = qkv + ((size_t)b * T + t) * 3 * C + h * hs;
    float best = -INFINITY;
    for (int t2 = lane; t2 <= t; t2 += WARP_SIZE) {
        const A* k = qkv + ((size_t)b * T + t2) * 3 * C + C + h * hs;
        float s = 0.0f;
        for (int i = 0; i < hs; i++) s += to_float(q[i]) * to_float(k[i]);
        best = fmaxf(best, s * scale);
    }
    best = warp_max(best);
    if (lane == 0) row_max[row] = best;
}

// One warp per row n of logits (N,Vp): row_max[n] = max_{v<V} z, row_lse[n] = log Σ_{v<V} exp(z),
// one element at a time (it runs only at stats time).
template <typename A>
__global__ void logit_row_stats_kernel(float* row_max, float* row_lse, const A* logits, int N, int V, int Vp) {
    const int n = blockIdx.x * (blockDim.x / WARP_SIZE) + threadIdx.x / WARP_SIZE;
    const int lane = threadIdx.x % WARP_SIZE;
    if (n >= N) return;
    const RowLogSumExp row = row_log_sum_exp<1>(logits + (size_t)n * Vp, V, lane);
    if (lane == 0) {
        row_max[n] = row.max;
        row_lse[n] = row.log_sum;
    }
}

// ---------------------------------------------------------------------------------------------
// Scratch (CudaOps::attention_logit_max and logit_statistics)

// Floats of scratch the two ops (CudaOps::attention_logit_max, logit_statistics) need for a model
// of these sizes.
inline size_t diagnostics_scratch(int B, int T, int NH) { return (size_t)B * T * std::max(NH, 2); }

}  // namespace gpu
