// adamw.cuh — the optimiser's two passes over the parameters (docs/model.md §5), on fp32 master
// weights, fp32 gradients and fp32 moments, all in the flat file order of model.h:
//
//   sum of squares: Σ g² (the global gradient norm is its square root over all tensors)
//   AdamW:          g ← grad_scale·g (the clipping factor);  m ← β1·m + (1−β1)·g;
//                   v ← β2·v + (1−β2)·g²;  p ← p − lr·(m̂/(√v̂ + ε) + wd·p)
//                   with m̂ = m/(1−β1ᵗ), v̂ = v/(1−β2ᵗ); then, in bf16 mode, the bf16 copy of p
//                   that forward and backward read is refreshed in the same pass.
//
// One AdamW launch updates every tensor: the flat array is cut into segments (the parameter
// tensors), each with its own weight decay, given to the kernel as a small table. A launch
// covers any range [lo, hi) of the flat array, so a process that owns only a slice of the
// optimiser state (ZeRO-1) updates just its slice.
// The ops that launch these kernels (cuda_ops.cuh): CudaOps::adamw_update, and sum_of_squares,
// which CudaOps::norm uses.
#pragma once
#include <cmath>
#include <vector>

#include "cuda/cuda_common.cuh"
#include "model.h"

namespace gpu {

// Hyperparameters of one AdamW update, as the kernel takes them.
struct AdamWStep {
    float lr, beta1, beta2, eps, weight_decay;
    float correction1, correction2;  // 1 − β1ᵗ, 1 − β2ᵗ
    float grad_scale;
};

// The segments of the flat parameter array: segment k is [end[k−1], end[k]) (end[−1] = 0), with
// weight decay when decays[k]. Passed by value: it lives in the kernel's constant parameters.
struct AdamWTable {
    int count = 0;
    unsigned long long end[NUM_PARAM_TENSORS];
    bool decays[NUM_PARAM_TENSORS];
};

// The table of the model's parameter tensors (decay on the 2-D ones, docs/model.md §5).
inline AdamWTable adamw_table(const ModelConfig& cfg) {
    AdamWTable table;
    unsigned long long at = 0;
    const auto sizes = param_sizes(cfg);
    for (int i = 0; i < NUM_PARAM_TENSORS; i++) {
        at += sizes[i];
        table.end[table.count] = at;
        table.decays[table.count++] = param_decays(i);
    }
    return table;
}

// ---------------------------------------------------------------------------------------------
// Kernels

// Parameters per AdamW thread: 16 bytes of fp32 (the bf16 copy is stored 8 bytes at a time).
constexpr int ADAMW_PACK = 4;

// The update of parameter i (its segment's decay from the table): p, m, v in place.
template <typename I>
__device__ inline void adamw_element(float& p, float& m, float& v, float grad, I i, const AdamWTable& table,
                                     const AdamWStep& h) {
    int k = 0;
    while (k + 1 < table.count && i >= table.end[k]) k++;
    const float weight_decay = table.decays[k] ? h.weight_decay : 0.0f;
    const float g = grad * h.grad_scale;
    m = h.beta1 * m + (1.0f - h.beta1) * g;
    v = h.beta2 * v + (1.0f - h.beta2) * g * g;
    const float m_hat = m / h.correction1, v_hat = v / h.correction2;
    p = p - h.lr * (m_hat / (sqrtf(v_hat) + h.eps) + weight_decay * p);
}

// Thread k updates parameters [lo + k·S, lo + k·S + S) ∩ [lo, hi), S = ADAMW_PACK, of the flat
// arrays params, copy, grads; m and v hold that range only (element i at i − lo). As one access
// per buffer when all S are there and params + lo, grads + lo, m, v (and copy + lo) are aligned
// for it, else one by one; indices of type I (32-bit where hi allows). `copy` (the bf16
// weights) is null in fp32 mode.
template <typename T, typename I>
__global__ void adamw_kernel(float* params, T* copy, const float* grads, float* m, float* v, I lo, I hi,
                             AdamWTable table, AdamWStep h) {
    using P = Pack<float, ADAMW_PACK>;
    using PC = Pack<T, ADAMW_PACK>;
    const I first = ((I)blockIdx.x * blockDim.x + threadIdx.x) * ADAMW_PACK;  // offset from lo
    if (first >= hi - lo) return;
    const I i0 = lo + first;
    if (first + ADAMW_PACK <= hi - lo && aligned16(params + lo, grads + lo, m, v) &&
        (!copy || aligned_for<PC>(copy + lo))) {
        P p = *reinterpret_cast<const P*>(params + i0), mi = *reinterpret_cast<const P*>(m + first),
          vi = *reinterpret_cast<const P*>(v + first);
        const P g = *reinterpret_cast<const P*>(grads + i0);
        for (int e = 0; e < ADAMW_PACK; e++) adamw_element(p.v[e], mi.v[e], vi.v[e], g.v[e], i0 + e, table, h);
        *reinterpret_cast<P*>(m + first) = mi;
        *reinterpret_cast<P*>(v + first) = vi;
        *reinterpret_cast<P*>(params + i0) = p;
        if (copy) {
            PC c;
            for (int e = 0; e < ADAMW_PACK; e++) c.v[e] = from_float<T>(p.v[e]);
            *reinterpret_cast<PC*>(copy + i0) = c;
        }
        return;
    }
    for (I i = i0; i < hi && i < i0 + ADAMW_PACK; i++) {
        float p = params[i], mi = m[i - lo], vi = v[i - lo];
        adamw_element(p, mi, vi, grads[i], i, table, h);
        m[i - lo] = mi;
        v[i - lo] = vi;
        params[i] = p;
        if (copy) copy[i] = from_float<T>(p);
    }
}

// partial[block] = Σ x² over the elements this block visits (a grid-stride loop): a fixed grid
// for a given n, so the sum has the same order on every run.
template <typename T>
__global__ void sum_of_squares_kernel(float* partial, const T* x, size_t n) {
    __shared__ float shared[WARP_SIZE];
    float sum = 0.0f;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        const float xi = to_float(x[i]);
        sum += xi * xi;
    }
    sum = block_sum(sum, shared);
    if (threadIdx.x == 0) partial[blockIdx.x] = sum;
}

// ---------------------------------------------------------------------------------------------
// The shapes of the launches (CudaOps::adamw_update and sum_of_squares)

constexpr int SUMSQ_THREADS = 256;
constexpr int SUMSQ_MIN_PER_THREAD = 64;  // elements per thread before another block is added
constexpr int SUMSQ_MAX_BLOCKS = 512;     // size of the `partial` scratch, in floats

// Blocks of sum_of_squares over n elements: one per SUMSQ_MIN_PER_THREAD elements a thread, at
// most SUMSQ_MAX_BLOCKS.
inline int sum_of_squares_blocks(size_t n) {
    const size_t wanted = std::max<size_t>(1, ceil_div(n, SUMSQ_MIN_PER_THREAD * SUMSQ_THREADS));
    return (int)std::min<size_t>(SUMSQ_MAX_BLOCKS, wanted);
}

}  // namespace gpu
