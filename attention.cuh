// attention.cuh — causal multi-head self-attention on the packed projections qkv (B,T,3C) =
// [q | k | v], NH heads of hs = C/NH channels, without any T×T buffer (docs/attention.md):
//
//   forward:  for each query t of head h: s[t'] = q_t·k_t'/√hs for t' ≤ t, p = softmax(s),
//             out (B,T,C)[t, h·hs + i] = Σ_t' p[t']·v_t'[i], and the log-sum-exp
//             lse[t] = log Σ_t' exp(s[t']) (B,NH,T) fp32: all the backward keeps
//   backward: given dout (B,T,C): D[t] = Σ_i dout_t[i]·out_t[i] (B,NH,T) fp32, then with the
//             recomputed p[t'] = exp(s[t'] − lse[t]):  dp[t'] = dout_t·v_t',
//             ds[t'] = p[t']·(dp[t'] − D[t]),  dq_t = Σ_t' ds[t']·k_t'/√hs,
//             dk_t' = Σ_t ds[t']·q_t/√hs,  dv_t' = Σ_t p[t']·dout_t;  dqkv = [dq | dk | dv] (stored:
//             the backward writes every element of dqkv once, so it needs no zeroed buffer).
//             The qkv bias gradient Σ_n dqkv[n, :] is the qkv product's (matmul.cuh)
//
// Two implementations, the same functions:
//   * on the tensor cores (attention_mma.cuh): bf16, for the head sizes compiled in (64, GPT-2's,
//     and the tests' 8, 12, 16), FlashAttention-2's tiling, products by mma.sync;
//   * exact (below): one warp per row of queries (forward, dq) or keys (dk, dv), plain fp32
//     arithmetic for any head size; fp32 always runs here (no TF32), and bf16 where no
//     tensor-core kernel fits. Not fast.
// In both, each output element has exactly one owner and every sum a fixed order: no atomics,
// and results do not depend on scheduling.
// The ops that launch these kernels and those of attention_mma.cuh: CudaOps::attention_forward and
// attention_backward (cuda_ops.cuh).
#pragma once
#include <cmath>
#include <cstdint>
#include <type_traits>

#include "attention_mma.cuh"
#include "cuda/cuda_common.cuh"

namespace gpu {

// Number of fp32 values the forward keeps for the backward: the log-sum-exp of every
// (b, h, query) row. The model allocates this per layer as its attention statistics.
inline size_t attention_saved_size(int B, int Tn, int NH) { return (size_t)B * NH * Tn; }

// ---------------------------------------------------------------------------------------------
// The exact kernels: one warp per (b, h, t) row, rows in that order (a block's warps share a
// head). The other side is walked 32 rows at a time, lane j taking the dot products of row j
// over the whole head; the accumulators are spread over the lanes by channel, ROW_CHANNELS
// per lane (256 in all); a head wider than that is done in passes of 256 channels, each
// recomputing the dot products.

constexpr int ROW_CHANNELS = 8;  // accumulators per lane
constexpr int ROW_PASS = ROW_CHANNELS * WARP_SIZE;

// The row a warp works on: sequence b, head h, position t; q, k, v and dout of row t are
// qkv[(b·T + t)·3C + {0, C, 2C} + h·hs + i] and dout[(b·T + t)·C + h·hs + i].
struct HeadRow {
    int b, h, t, hs;
    size_t row;  // (b·NH + h)·T + t: the index into lse and D
    __device__ HeadRow(size_t row, int Tn, int C, int NH)
        : b((int)(row / ((size_t)Tn * NH))), h((int)(row / Tn % NH)), t((int)(row % Tn)), hs(C / NH), row(row) {}
};

// Σ_i x[i]·y[i] over the hs channels, in one lane.
template <typename T>
__device__ inline float dot(const T* x, const T* y, int hs) {
    float sum = 0.0f;
    for (int i = 0; i < hs; i++) sum = fmaf(to_float(x[i]), to_float(y[i]), sum);
    return sum;
}

// Channel j of this lane in the pass starting at channel c0: c0 + lane + 32·j.
__device__ inline int row_channel(int c0, int j) { return c0 + threadIdx.x % WARP_SIZE + WARP_SIZE * j; }

// out and lse of row (b, h, t): over the keys t' ≤ t, the running maximum m, each lane's part of
// the sum ℓ of exp(s − m), and o = Σ exp(s − m)·v, rescaled by exp(m − m′) when m grows.
template <typename T>
__global__ void attention_forward_rows_kernel(T* out, float* lse, const T* qkv, int B, int Tn, int C, int NH) {
    const size_t row = (size_t)blockIdx.x * (blockDim.x / WARP_SIZE) + threadIdx.x / WARP_SIZE;
    if (row >= (size_t)B * NH * Tn) return;
    const HeadRow r(row, Tn, C, NH);
    const int lane = threadIdx.x % WARP_SIZE;
    const size_t stride = 3 * (size_t)C;
    const T* q = qkv + ((size_t)r.b * Tn + r.t) * stride + r.h * r.hs;
    const T* k0 = qkv + (size_t)r.b * Tn * stride + C + r.h * r.hs;  // key 0; value 0 is C further
    const float scale = 1.0f / sqrtf((float)r.hs);
    for (int c0 = 0; c0 < r.hs; c0 += ROW_PASS) {
        float m = -INFINITY, l = 0.0f, o[ROW_CHANNELS] = {};
        for (int first = 0; first <= r.t; first += WARP_SIZE) {
            const int key = first + lane;  // this lane's key; those past t weigh 0
            const float s = key <= r.t ? dot(q, k0 + key * stride, r.hs) * scale : -INFINITY;
            const float new_max = fmaxf(m, warp_max(s)), correction = expf(m - new_max), p = expf(s - new_max);
            l = l * correction + p;
            for (int j = 0; j < ROW_CHANNELS; j++) o[j] *= correction;
            for (int e = 0; e < WARP_SIZE && first + e <= r.t; e++) {
                const float pe = __shfl_sync(0xffffffff, p, e);
                const T* v = k0 + C + (first + e) * stride;
                for (int j = 0; j < ROW_CHANNELS; j++)
                    if (row_channel(c0, j) < r.hs) o[j] = fmaf(pe, to_float(v[row_channel(c0, j)]), o[j]);
            }
            m = new_max;
        }
        l = warp_sum(l);
        T* dst = out + ((size_t)r.b * Tn + r.t) * C + r.h * r.hs;
        for (int j = 0; j < ROW_CHANNELS; j++)
            if (row_channel(c0, j) < r.hs) dst[row_channel(c0, j)] = from_float<T>(o[j] / l);
        if (c0 == 0 && lane == 0) lse[row] = m + logf(l);
    }
}

// dq of row (b, h, t): over the keys t' ≤ t, p = exp(s − lse), dp = dout_t·v_t',
// dq += p·(dp − D)·k_t'; stored /√hs into the q third of dqkv.
template <typename T>
__global__ void attention_backward_dq_rows_kernel(T* dqkv, const T* dout, const T* qkv, const float* lse,
                                                  const float* delta, int B, int Tn, int C, int NH) {
    const size_t row = (size_t)blockIdx.x * (blockDim.x / WARP_SIZE) + threadIdx.x / WARP_SIZE;
    if (row >= (size_t)B * NH * Tn) return;
    const HeadRow r(row, Tn, C, NH);
    const int lane = threadIdx.x % WARP_SIZE;
    const size_t stride = 3 * (size_t)C;
    const T* q = qkv + ((size_t)r.b * Tn + r.t) * stride + r.h * r.hs;
    const T* d = dout + ((size_t)r.b * Tn + r.t) * C + r.h * r.hs;
    const T* k0 = qkv + (size_t)r.b * Tn * stride + C + r.h * r.hs;
    const float scale = 1.0f / sqrtf((float)r.hs);
    for (int c0 = 0; c0 < r.hs; c0 += ROW_PASS) {
        float dq[ROW_CHANNELS] = {};
        for (int first = 0; first <= r.t; first += WARP_SIZE) {
            const int key = first + lane;
            const T* k = k0 + key * stride;
            const float p = key <= r.t ? expf(dot(q, k, r.hs) * scale - lse[row]) : 0.0f;
            const float ds = key <= r.t ? p * (dot(d, k + C, r.hs) - delta[row]) : 0.0f;
            for (int e = 0; e < WARP_SIZE && first + e <= r.t; e++) {
                const float dse = __shfl_sync(0xffffffff, ds, e);
                const T* ke = k0 + (first + e) * stride;
                for (int j = 0; j < ROW_CHANNELS; j++)
                    if (row_channel(c0, j) < r.hs) dq[j] = fmaf(dse, to_float(ke[row_channel(c0, j)]), dq[j]);
            }
        }
        T* dst = dqkv + ((size_t)r.b * Tn + r.t) * stride + r.h * r.hs;
        for (int j = 0; j < ROW_CHANNELS; j++)
            if (row_channel(c0, j) < r.hs) dst[row_channel(c0, j)] = from_float<T>(dq[j] * scale);
    }
}

// dk and dv of key row (b, h, t'): over the queries t ≥ t', p = exp(s − lse[t]),
// dv += p·dout_t, dp = dout_t·v_t', dk += p·(dp − D[t])·q_t; stored (dk /√hs) into their thirds.
template <typename T>
__global__ void attention_backward_dkdv_rows_kernel(T* dqkv, const T* dout, const T* qkv, const float* lse,
                                                    const float* delta, int B, int Tn, int C, int NH) {
    const size_t row = (size_t)blockIdx.x * (blockDim.x / WARP_SIZE) + threadIdx.x / WARP_SIZE;
    if (row >= (size_t)B * NH * Tn) return;
    const HeadRow r(row, Tn, C, NH);
    const int lane = threadIdx.x % WARP_SIZE;
    const size_t stride = 3 * (size_t)C, head = row - r.t;  // lse and D of query t: head + t
    const T* q0 = qkv + (size_t)r.b * Tn * stride + r.h * r.hs;  // query 0
    const T* d0 = dout + (size_t)r.b * Tn * C + r.h * r.hs;
    const T* k = q0 + r.t * stride + C;
    const T* v = k + C;
    const float scale = 1.0f / sqrtf((float)r.hs);
    for (int c0 = 0; c0 < r.hs; c0 += ROW_PASS) {
        float dk[ROW_CHANNELS] = {}, dv[ROW_CHANNELS] = {};
        for (int first = r.t; first < Tn; first += WARP_SIZE) {
            const int query = first + lane;  // this lane's query; those past T weigh 0
            const float p = query < Tn ? expf(dot(q0 + query * stride, k, r.hs) * scale - lse[head + query]) : 0.0f;
            const float ds = query < Tn ? p * (dot(d0 + (size_t)query * C, v, r.hs) - delta[head + query]) : 0.0f;
            for (int e = 0; e < WARP_SIZE && first + e < Tn; e++) {
                const float pe = __shfl_sync(0xffffffff, p, e), dse = __shfl_sync(0xffffffff, ds, e);
                const T* qe = q0 + (first + e) * stride;
                const T* de = d0 + (size_t)(first + e) * C;
                for (int j = 0; j < ROW_CHANNELS; j++) {
                    const int c = row_channel(c0, j);
                    if (c >= r.hs) continue;
                    dv[j] = fmaf(pe, to_float(de[c]), dv[j]);
                    dk[j] = fmaf(dse, to_float(qe[c]), dk[j]);
                }
            }
        }
        T* dst = dqkv + ((size_t)r.b * Tn + r.t) * stride + C + r.h * r.hs;
        for (int j = 0; j < ROW_CHANNELS; j++) {
            const int c = row_channel(c0, j);
            if (c >= r.hs) continue;
            dst[c] = from_float<T>(dk[j] * scale);
            dst[C + c] = from_float<T>(dv[j]);
        }
    }
}

// delta (B,NH,T) = Σ_i dout·out over each head's hs channels, one warp per (b, h, t) row.
template <typename T>
__global__ void attention_delta_kernel(float* delta, const T* dout, const T* out, int B, int Tn, int C, int NH) {
    const size_t row = (size_t)blockIdx.x * (blockDim.x / WARP_SIZE) + threadIdx.x / WARP_SIZE;
    if (row >= (size_t)B * NH * Tn) return;
    const HeadRow r(row, Tn, C, NH);
    const size_t at = ((size_t)r.b * Tn + r.t) * C + r.h * r.hs;
    float sum = 0.0f;
    for (int i = threadIdx.x % WARP_SIZE; i < r.hs; i += WARP_SIZE)
        sum = fmaf(to_float(dout[at + i]), to_float(out[at + i]), sum);
    sum = warp_sum(sum);
    if (threadIdx.x % WARP_SIZE == 0) delta[row] = sum;
}

// ---------------------------------------------------------------------------------------------
// The shapes of the launches (CudaOps::attention_forward and attention_backward)

// The head size of the tensor-core kernels for these shapes and pointers, or 0 where the exact
// kernels run: C/NH when T is bf16, C/NH is a head size with a tensor-core kernel (64, 8, 12 or
// 16) and every pointer given is aligned for its row loads.
template <typename T, typename... P>
int mma_head_size(int C, int NH, const P*... p) {
    if (!std::is_same<T, bf16>::value || C % NH != 0) return 0;
    size_t load_bytes = 0;
    switch (C / NH) {
        case 64: load_bytes = HeadShape<64>::load_bytes; break;
        case 8: load_bytes = HeadShape<8>::load_bytes; break;
        case 12: load_bytes = HeadShape<12>::load_bytes; break;
        case 16: load_bytes = HeadShape<16>::load_bytes; break;
        default: return 0;
    }
    return ((reinterpret_cast<uintptr_t>(p) % load_bytes == 0) && ...) ? C / NH : 0;
}

// Grid of the tensor-core kernels: (NH, B, ⌈T/64⌉), the tile the slowest index (attention_mma.cuh).
inline dim3 attention_tiles(int B, int Tn, int NH) {
    return dim3((unsigned)NH, (unsigned)B, (unsigned)ceil_div(Tn, ATTENTION_ROWS));
}
// Blocks of the exact kernels: WARPS_PER_BLOCK rows each.
inline size_t attention_row_blocks(int B, int Tn, int NH) {
    return ceil_div(attention_saved_size(B, Tn, NH), WARPS_PER_BLOCK);
}

}  // namespace gpu
