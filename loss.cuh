// loss.cuh — softmax and cross-entropy over the real vocabulary, fused: the probabilities are
// never stored. logits (N,Vp), N = B·T positions; only columns v < V enter the softmax.
//
//   forward:  lse[n] = log Σ_{v<V} exp(logits[n,v]);  losses[n] = lse[n] − logits[n, target[n]]
//             (lse is kept, fp32, so backward needs one pass)
//   backward: logits[n,v] ← dloss·(exp(logits[n,v] − lse[n]) − [v = target[n]]) for v < V,
//             and 0 for the padding columns V..Vp−1: the logits become their own gradient.
//
// One warp per row (N = 16K rows fill a GPU; each lane strides over the ~50K columns).
// Logits are T (float or bf16); maxima, sums and losses are fp32.
#pragma once
#include <cstdint>

#include "cuda_common.cuh"

namespace gpu {

// ---------------------------------------------------------------------------------------------
// Kernels

// A row's maximum and log Σ exp over its first V entries, computed by the warp that owns the
// row (lane: this thread's lane): the maximum, then Σ exp(z − max), each a warp reduction.
// Every lane gets both.
struct RowLogSumExp {
    float max, log_sum;
};
template <typename T>
__device__ inline RowLogSumExp row_log_sum_exp(const T* z, int V, int lane) {
    float max_z = -INFINITY;
    for (int v = lane; v < V; v += WARP_SIZE) max_z = fmaxf(max_z, to_float(z[v]));
    max_z = warp_max(max_z);
    float sum = 0.0f;
    for (int v = lane; v < V; v += WARP_SIZE) sum += expf(to_float(z[v]) - max_z);
    sum = warp_sum(sum);
    return {max_z, logf(sum) + max_z};
}

// One warp per row: lse and the loss from row_log_sum_exp.
template <typename T>
__global__ void crossentropy_forward_kernel(float* losses, float* lse, const T* logits, const int32_t* targets, int N,
                                            int V, int Vp) {
    const int n = blockIdx.x * (blockDim.x / WARP_SIZE) + threadIdx.x / WARP_SIZE;
    const int lane = threadIdx.x % WARP_SIZE;
    if (n >= N) return;
    const T* z = logits + (size_t)n * Vp;
    const RowLogSumExp row = row_log_sum_exp(z, V, lane);
    if (lane == 0) {
        lse[n] = row.log_sum;
        losses[n] = row.log_sum - to_float(z[targets[n]]);
    }
}

// One warp per row, overwriting the logits with their gradient.
template <typename T>
__global__ void crossentropy_backward_kernel(T* logits, const float* lse, const int32_t* targets, float dloss, int N,
                                             int V, int Vp) {
    const int n = blockIdx.x * (blockDim.x / WARP_SIZE) + threadIdx.x / WARP_SIZE;
    const int lane = threadIdx.x % WARP_SIZE;
    if (n >= N) return;
    T* z = logits + (size_t)n * Vp;
    const float log_sum = lse[n];
    const int target = targets[n];
    for (int v = lane; v < Vp; v += WARP_SIZE) {
        const float d = v < V ? dloss * (expf(to_float(z[v]) - log_sum) - (v == target ? 1.0f : 0.0f)) : 0.0f;
        z[v] = from_float<T>(d);
    }
}

// ---------------------------------------------------------------------------------------------
// Launchers

// losses (N), lse (N) from logits (N,Vp) and targets (N).
template <typename T>
void crossentropy_forward(float* losses, float* lse, const T* logits, const int32_t* targets, int N, int V, int Vp,
                          cudaStream_t stream) {
    crossentropy_forward_kernel<T><<<ceil_div(N, WARPS_PER_BLOCK), WARPS_PER_BLOCK * WARP_SIZE, 0, stream>>>(
        losses, lse, logits, targets, N, V, Vp);
    cudaCheck(cudaGetLastError());
}

// Traffic of crossentropy_forward: the V real columns of each row and the targets read,
// losses and lse written; about 4 FLOPs per logit (max, subtract, exp, add).
template <typename T>
Traffic crossentropy_forward_traffic(int N, int V, int Vp) {
    return {"crossentropy_forward_kernel", (double)N * V * sizeof(T) + 4.0 * N, 8.0 * N, 4.0 * N * V};
}

// logits (N,Vp) ← d(Σ_n dloss·losses[n])/dlogits, using lse from crossentropy_forward.
template <typename T>
void crossentropy_backward_inplace(T* logits, const float* lse, const int32_t* targets, float dloss, int N, int V,
                                   int Vp, cudaStream_t stream) {
    crossentropy_backward_kernel<T><<<ceil_div(N, WARPS_PER_BLOCK), WARPS_PER_BLOCK * WARP_SIZE, 0, stream>>>(
        logits, lse, targets, dloss, N, V, Vp);
    cudaCheck(cudaGetLastError());
}

// Traffic of crossentropy_backward_inplace: the V real columns, lse and targets read, all Vp
// columns written; about 4 FLOPs per logit.
template <typename T>
Traffic crossentropy_backward_traffic(int N, int V, int Vp) {
    return {"crossentropy_backward_kernel", (double)N * V * sizeof(T) + 8.0 * N, (double)N * Vp * sizeof(T),
            4.0 * N * V};
}

}  // namespace gpu
