// loss.cuh — softmax and cross-entropy over the real vocabulary, fused: the probabilities are
// never stored. logits (N,Vp), N = B·T positions; only columns v < V enter the softmax.
//
//   loss:     lse[n] = log Σ_{v<V} exp(logits[n,v]);  losses[n] = lse[n] − logits[n, target[n]]
//   gradient: logits[n,v] ← dloss·(exp(logits[n,v] − lse[n]) − [v = target[n]]) for v < V,
//             and 0 for the padding columns V..Vp−1: the logits become their own gradient.
//
// Two ops (cuda_ops.cuh). crossentropy_forward (evaluation: the logits are kept) computes the
// losses, one warp per row. crossentropy_forward_backward (training) computes the losses and the
// gradient in ONE pass over the logits: one block per row, which keeps its row in shared memory
// between the log-sum-exp and the gradient, so each logit is read from device memory once and
// its gradient written once (docs/cuda.md §3).
// Logits are T (float or bf16); maxima, sums and losses are fp32. Both kernels read (and the
// training one writes) a row in 16-byte packs (4 floats or 8 bf16) where Vp is a multiple of the
// pack and the logits are 16-byte aligned, the last V mod pack real columns one by one; else one
// element at a time.
// The ops that launch these kernels: CudaOps::crossentropy_forward and
// crossentropy_forward_backward (cuda_ops.cuh).
#pragma once
#include <cstdint>

#include "cuda/cuda_common.cuh"

namespace gpu {

// ---------------------------------------------------------------------------------------------
// Kernels

// Calls f(width, v) for the columns [0, V) of a row that one thread of a group of `stride`
// threads (this one `index`) visits: v = K·p for the packs p = index, index + stride, ... of K
// whole columns below V (width std::integral_constant<int, K>), then one column at a time
// (width 1) for the columns from K·⌊V/K⌋ on. Every column below V is visited once, by the same
// thread in every pass; nothing at or past V is touched. K = 1: single columns throughout.
template <int K, class F>
__device__ inline void for_row_columns(int V, int index, int stride, F f) {
    const int packs = V / K;
    for (int p = index; p < packs; p += stride) f(std::integral_constant<int, K>{}, p * K);
    if constexpr (K > 1)
        for (int v = packs * K + index; v < V; v += stride) f(std::integral_constant<int, 1>{}, v);
}

// A row's maximum and log Σ exp over its first V entries, computed by the warp that owns the
// row (lane: this thread's lane) in packs of K: the maximum, then Σ exp(z − max), each a warp
// reduction. Every lane gets both.
struct RowLogSumExp {
    float max, log_sum;
};
template <int K, typename T>
__device__ inline RowLogSumExp row_log_sum_exp(const T* z, int V, int lane) {
    float max_z = -INFINITY;
    for_row_columns<K>(V, lane, WARP_SIZE, [&](auto width, int v) {
        float x[decltype(width)::value];
        load_pack(x, z + v);
        for (float e : x) max_z = fmaxf(max_z, e);
    });
    max_z = warp_max(max_z);
    float sum = 0.0f;
    for_row_columns<K>(V, lane, WARP_SIZE, [&](auto width, int v) {
        float x[decltype(width)::value];
        load_pack(x, z + v);
        for (float e : x) sum += expf(e - max_z);
    });
    sum = warp_sum(sum);
    return {max_z, logf(sum) + max_z};
}

// One warp per row: the loss from row_log_sum_exp, reading the row in packs of K.
template <int K, typename T>
__global__ void crossentropy_forward_kernel(float* losses, const T* logits, const int32_t* targets, int N, int V,
                                            int Vp) {
    const int n = blockIdx.x * (blockDim.x / WARP_SIZE) + threadIdx.x / WARP_SIZE;
    const int lane = threadIdx.x % WARP_SIZE;
    if (n >= N) return;
    const T* z = logits + (size_t)n * Vp;
    const RowLogSumExp row = row_log_sum_exp<K>(z, V, lane);
    if (lane == 0) losses[n] = row.log_sum - to_float(z[targets[n]]);
}

// Threads of a crossentropy_forward_backward block; each strides over the columns of the row.
constexpr int CE_THREADS = 1024;

// One block per row n: the loss, then the logits of the row overwritten with their gradient.
// Every pass visits the row's V real columns in packs of K (for_row_columns: one access of
// K·sizeof(T) bytes, 16 where its op found the rows aligned, the last columns one by one).
// With `staged` the block first copies the row's V real logits into its dynamic shared memory
// (V·sizeof(T) bytes, under 227 KiB on an H100/H200 up to V = 58K in fp32 and 116K in bf16) and
// every later pass (the maximum, Σ exp, the gradient) reads them there: the row crosses device
// memory once in each direction. Without it (a row too long for shared memory) the passes
// re-read the row from device memory, which the L2 cache serves only in part: its traffic
// declaration (bench/kernel_costs.h), which counts distinct bytes, is then too optimistic.
// Each thread writes the gradient of the columns it read itself, so the in-place store needs
// only one barrier more than the reductions: thread 0 reads row[target] for the loss before
// its owner may overwrite it (unstaged).
template <int K, typename T>
__global__ void __launch_bounds__(CE_THREADS)
    crossentropy_forward_backward_kernel(float* losses, T* logits, const int32_t* targets, float dloss, int V, int Vp,
                                         bool staged) {
    extern __shared__ __align__(16) unsigned char crossentropy_row[];
    __shared__ float reduce[WARP_SIZE];
    const int n = blockIdx.x;
    T* z = logits + (size_t)n * Vp;
    T* copy = reinterpret_cast<T*>(crossentropy_row);
    const T* row = staged ? copy : z;
    float max_z = -INFINITY;
    for_row_columns<K>(V, threadIdx.x, blockDim.x, [&](auto width, int v) {
        float x[decltype(width)::value];
        load_pack(x, z + v);
        if (staged) store_pack(copy + v, x);
        for (float e : x) max_z = fmaxf(max_z, e);
    });
    max_z = block_max(max_z, reduce);  // its barriers also publish the staged row
    float sum = 0.0f;
    for_row_columns<K>(V, threadIdx.x, blockDim.x, [&](auto width, int v) {
        float x[decltype(width)::value];
        load_pack(x, row + v);
        for (float e : x) sum += expf(e - max_z);
    });
    const float lse = logf(block_sum(sum, reduce)) + max_z;
    const int target = targets[n];
    if (threadIdx.x == 0) losses[n] = lse - to_float(row[target]);
    __syncthreads();  // row[target] is read before its owner overwrites it (unstaged)
    for_row_columns<K>(V, threadIdx.x, blockDim.x, [&](auto width, int v) {
        constexpr int W = decltype(width)::value;
        float x[W];
        load_pack(x, row + v);
        for (int e = 0; e < W; e++) x[e] = dloss * (expf(x[e] - lse) - (v + e == target ? 1.0f : 0.0f));
        store_pack(z + v, x);
    });
    for (int v = V + threadIdx.x; v < Vp; v += blockDim.x) z[v] = from_float<T>(0.0f);  // the padding columns
}

// ---------------------------------------------------------------------------------------------
// The shape of a launch (CudaOps::crossentropy_forward_backward)

// The most dynamic shared memory one block of this device may use (the opt-in limit, less the
// kernel's static reduction scratch); asked once per process (the backend uses one device).
inline size_t crossentropy_shared_limit() {
    static size_t limit = 0;  // 0: not asked yet (a constant initialiser: no guard variable)
    if (limit == 0) {
        int device = 0;
        cudaCheck(cudaGetDevice(&device));
        cudaDeviceProp prop;
        cudaCheck(cudaGetDeviceProperties(&prop, device));
        limit = prop.sharedMemPerBlockOptin - WARP_SIZE * sizeof(float);
    }
    return limit;
}

}  // namespace gpu
