// attention.cuh — causal multi-head self-attention on the packed projections qkv (B,T,3C) =
// [q | k | v], NH heads of hs = C/NH channels.
//
//   forward:  S = q·kᵀ/√hs                  (B,NH,T,T) per head
//             att = softmax over t' ≤ t of S (0 for t' > t), kept for backward (B,NH,T,T)
//             out (B,T,C) = att·v, the heads side by side
//   backward: given dout (B,T,C), with dy the head-split dout:
//             datt = dy·vᵀ;  dv = attᵀ·dy
//             dS[t'] = att[t']·(datt[t'] − Σ_u att[u]·datt[u])   (0 for t' > t)
//             dq = dS·k/√hs;  dk = dSᵀ·q/√hs;  dqkv += [dq | dk | dv]
//
// The four products per direction are batched cuBLAS calls over the B·NH heads, on the tensor
// cores in bf16 mode; the kernels here move heads in and out of qkv and do the causal softmax.
// Scores S and datt are fp32 whatever the element type, so the softmax sees them unrounded.
// The handle must be bound (cublasSetStream) to the stream passed in.
#pragma once
#include <cmath>

#include "cuda_common.cuh"
#include "matmul.cuh"

namespace gpu {

// Scratch the op needs while it runs, shared by every layer. (B,NH,T,hs) unless noted.
template <typename T>
struct AttentionScratch {
    DeviceArray<T> q, k, v;      // the heads split out of qkv
    DeviceArray<T> y;            // forward: att·v; backward: dy
    DeviceArray<T> dq, dk, dv;   // backward only
    DeviceArray<float> scores;   // (B,NH,T,T): S in forward, datt in backward
    DeviceArray<T> dscores;      // (B,NH,T,T): dS

    AttentionScratch(int B, int Tn, int C, int NH)
        : q((size_t)B * Tn * C), k(q.size()), v(q.size()), y(q.size()), dq(q.size()), dk(q.size()), dv(q.size()),
          scores((size_t)B * NH * Tn * Tn), dscores(scores.size()) {}
};

// ---------------------------------------------------------------------------------------------
// Kernels

// out (B,NH,T,hs) = the heads of inp, whose rows (b,t) are `row_stride` elements apart:
// out[b,h,t,i] = inp[(b·T + t)·row_stride + h·hs + i]. One thread per output element.
template <typename T>
__global__ void split_heads_kernel(T* out, const T* inp, int row_stride, int B, int Tn, int NH, int hs) {
    const size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= (size_t)B * NH * Tn * hs) return;
    const int e = (int)(i % hs), t = (int)(i / hs % Tn), h = (int)(i / ((size_t)hs * Tn) % NH);
    const int b = (int)(i / ((size_t)hs * Tn * NH));
    out[i] = inp[((size_t)b * Tn + t) * row_stride + h * hs + e];
}

// The inverse of split_heads: out[(b·T + t)·row_stride + h·hs + i] = inp[b,h,t,i], written or,
// when `accumulate`, added. One thread per input element.
template <typename T>
__global__ void merge_heads_kernel(T* out, const T* inp, int row_stride, int B, int Tn, int NH, int hs,
                                   bool accumulate) {
    const size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= (size_t)B * NH * Tn * hs) return;
    const int e = (int)(i % hs), t = (int)(i / hs % Tn), h = (int)(i / ((size_t)hs * Tn) % NH);
    const int b = (int)(i / ((size_t)hs * Tn * NH));
    T* o = out + ((size_t)b * Tn + t) * row_stride + h * hs + e;
    *o = accumulate ? from_float<T>(to_float(*o) + to_float(inp[i])) : inp[i];
}

// att = causal softmax of the scores, one warp per row (b, h, t): max and sum over t' ≤ t in
// fp32, then the probabilities, and zeros for t' > t.
template <typename T>
__global__ void causal_softmax_kernel(T* att, const float* scores, int rows, int Tn) {
    const int row = blockIdx.x * (blockDim.x / WARP_SIZE) + threadIdx.x / WARP_SIZE;
    const int lane = threadIdx.x % WARP_SIZE;
    if (row >= rows) return;
    const int t = row % Tn;
    const float* s = scores + (size_t)row * Tn;
    float max_s = -INFINITY;
    for (int t2 = lane; t2 <= t; t2 += WARP_SIZE) max_s = fmaxf(max_s, s[t2]);
    max_s = warp_max(max_s);
    float sum = 0.0f;
    for (int t2 = lane; t2 <= t; t2 += WARP_SIZE) sum += expf(s[t2] - max_s);
    sum = warp_sum(sum);
    T* a = att + (size_t)row * Tn;
    for (int t2 = lane; t2 < Tn; t2 += WARP_SIZE) a[t2] = from_float<T>(t2 <= t ? expf(s[t2] - max_s) / sum : 0.0f);
}

// dS from att and datt, one warp per row: Σ_u att·datt over u ≤ t, then dS, zeros for t' > t.
template <typename T>
__global__ void causal_softmax_backward_kernel(T* dscores, const T* att, const float* datt, int rows, int Tn) {
    const int row = blockIdx.x * (blockDim.x / WARP_SIZE) + threadIdx.x / WARP_SIZE;
    const int lane = threadIdx.x % WARP_SIZE;
    if (row >= rows) return;
    const int t = row % Tn;
    const T* a = att + (size_t)row * Tn;
    const float* d = datt + (size_t)row * Tn;
    float weighted = 0.0f;
    for (int t2 = lane; t2 <= t; t2 += WARP_SIZE) weighted += to_float(a[t2]) * d[t2];
    weighted = warp_sum(weighted);
    T* ds = dscores + (size_t)row * Tn;
    for (int t2 = lane; t2 < Tn; t2 += WARP_SIZE)
        ds[t2] = from_float<T>(t2 <= t ? to_float(a[t2]) * (d[t2] - weighted) : 0.0f);
}

// ---------------------------------------------------------------------------------------------
// Launchers

// The heads of a (B,T,row_stride) tensor starting at `inp` into out (B,NH,T,hs), and back.
template <typename T>
void split_heads(T* out, const T* inp, int row_stride, int B, int Tn, int C, int NH, cudaStream_t stream) {
    const size_t n = (size_t)B * Tn * C;
    split_heads_kernel<T><<<ceil_div(n, 256), 256, 0, stream>>>(out, inp, row_stride, B, Tn, NH, C / NH);
    cudaCheck(cudaGetLastError());
}

template <typename T>
void merge_heads(T* out, const T* inp, int row_stride, int B, int Tn, int C, int NH, bool accumulate,
                 cudaStream_t stream) {
    const size_t n = (size_t)B * Tn * C;
    merge_heads_kernel<T><<<ceil_div(n, 256), 256, 0, stream>>>(out, inp, row_stride, B, Tn, NH, C / NH, accumulate);
    cudaCheck(cudaGetLastError());
}

// Traffic of split_heads (B·T·C elements read and written) and of merge_heads (which also
// reads out when it accumulates).
template <typename T>
Traffic split_heads_traffic(int B, int Tn, int C) {
    const double bytes = (double)B * Tn * C * sizeof(T);
    return {"split_heads_kernel", bytes, bytes, 0};
}
template <typename T>
Traffic merge_heads_traffic(int B, int Tn, int C, bool accumulate) {
    const double bytes = (double)B * Tn * C * sizeof(T);
    return {"merge_heads_kernel", accumulate ? 2 * bytes : bytes, bytes, accumulate ? bytes / sizeof(T) : 0.0};
}

// Traffic of the causal softmax over `rows` rows of T scores: forward reads the fp32 scores
// t' ≤ t and writes all of att; backward reads att and datt at t' ≤ t and writes all of dS.
template <typename T>
Traffic causal_softmax_traffic(int heads, int Tn, bool backward) {
    const double triangle = (double)heads * Tn * (Tn + 1) / 2, square = (double)heads * Tn * Tn;
    if (backward)
        return {"causal_softmax_backward_kernel", triangle * (sizeof(T) + 4), square * sizeof(T), 4 * triangle};
    return {"causal_softmax_kernel", 4 * triangle, square * sizeof(T), 5 * triangle};
}

// out (B,T,C) and att (B,NH,T,T) from qkv (B,T,3C).
template <typename T>
void attention_forward(cublasHandle_t handle, T* out, T* att, const T* qkv, AttentionScratch<T>& s, int B, int Tn,
                       int C, int NH, cudaStream_t stream) {
    const int hs = C / NH, heads = B * NH;
    const long long head = (long long)Tn * hs, square = (long long)Tn * Tn;
    split_heads(s.q.data(), qkv, 3 * C, B, Tn, C, NH, stream);
    split_heads(s.k.data(), qkv + C, 3 * C, B, Tn, C, NH, stream);
    split_heads(s.v.data(), qkv + 2 * C, 3 * C, B, Tn, C, NH, stream);
    const float scale = 1.0f / std::sqrt((float)hs);
    gemm_batched(handle, false, true, Tn, Tn, hs, scale, s.q.data(), hs, head, s.k.data(), hs, head, 0.0f,
                 s.scores.data(), Tn, square, heads);
    causal_softmax_kernel<T><<<ceil_div(heads * Tn, WARPS_PER_BLOCK), WARPS_PER_BLOCK * WARP_SIZE, 0,
                            stream>>>(att, s.scores.data(), heads * Tn, Tn);
    cudaCheck(cudaGetLastError());
    gemm_batched(handle, false, false, Tn, hs, Tn, 1.0f, att, Tn, square, s.v.data(), hs, head, 0.0f,
                 s.y.data(), hs, head, heads);
    merge_heads(out, s.y.data(), C, B, Tn, C, NH, false, stream);
}

// Traffic of attention_forward: three splits, S = q·kᵀ (fp32), the softmax, att·v, the merge.
template <typename T>
Launches attention_forward_traffic(int B, int Tn, int C, int NH) {
    const int hs = C / NH, heads = B * NH;
    const Traffic split = split_heads_traffic<T>(B, Tn, C);
    return {split, split, split, gemm_traffic(Tn, Tn, hs, false, sizeof(T), 4, heads),
            causal_softmax_traffic<T>(heads, Tn, false), gemm_traffic(Tn, hs, Tn, false, sizeof(T), sizeof(T), heads),
            merge_heads_traffic<T>(B, Tn, C, false)};
}

// dqkv (B,T,3C) += the gradient of attention_forward given dout (B,T,C), qkv and att.
template <typename T>
void attention_backward(cublasHandle_t handle, T* dqkv, const T* dout, const T* qkv, const T* att,
                        AttentionScratch<T>& s, int B, int Tn, int C, int NH, cudaStream_t stream) {
    const int hs = C / NH, heads = B * NH;
    const long long head = (long long)Tn * hs, square = (long long)Tn * Tn;
    split_heads(s.q.data(), qkv, 3 * C, B, Tn, C, NH, stream);
    split_heads(s.k.data(), qkv + C, 3 * C, B, Tn, C, NH, stream);
    split_heads(s.v.data(), qkv + 2 * C, 3 * C, B, Tn, C, NH, stream);
    split_heads(s.y.data(), dout, C, B, Tn, C, NH, stream);
    gemm_batched(handle, false, true, Tn, Tn, hs, 1.0f, s.y.data(), hs, head, s.v.data(), hs, head, 0.0f,
                 s.scores.data(), Tn, square, heads);
    gemm_batched(handle, true, false, Tn, hs, Tn, 1.0f, att, Tn, square, s.y.data(), hs, head, 0.0f, s.dv.data(), hs,
                 head, heads);
    causal_softmax_backward_kernel<T><<<ceil_div(heads * Tn, WARPS_PER_BLOCK), WARPS_PER_BLOCK * WARP_SIZE,
                                     0, stream>>>(s.dscores.data(), att, s.scores.data(), heads * Tn, Tn);
    cudaCheck(cudaGetLastError());
    const float scale = 1.0f / std::sqrt((float)hs);
    gemm_batched(handle, false, false, Tn, hs, Tn, scale, s.dscores.data(), Tn, square, s.k.data(), hs,
                 head, 0.0f, s.dq.data(), hs, head, heads);
    gemm_batched(handle, true, false, Tn, hs, Tn, scale, s.dscores.data(), Tn, square, s.q.data(), hs,
                 head, 0.0f, s.dk.data(), hs, head, heads);
    merge_heads(dqkv, s.dq.data(), 3 * C, B, Tn, C, NH, true, stream);
    merge_heads(dqkv + C, s.dk.data(), 3 * C, B, Tn, C, NH, true, stream);
    merge_heads(dqkv + 2 * C, s.dv.data(), 3 * C, B, Tn, C, NH, true, stream);
}

// Traffic of attention_backward: four splits, datt (fp32) and dv, the softmax backward, dq and
// dk, three accumulating merges.
template <typename T>
Launches attention_backward_traffic(int B, int Tn, int C, int NH) {
    const int hs = C / NH, heads = B * NH;
    const Traffic split = split_heads_traffic<T>(B, Tn, C), merge = merge_heads_traffic<T>(B, Tn, C, true);
    const Traffic head_product = gemm_traffic(Tn, hs, Tn, false, sizeof(T), sizeof(T), heads);
    return {split, split, split, split, gemm_traffic(Tn, Tn, hs, false, sizeof(T), 4, heads), head_product,
            causal_softmax_traffic<T>(heads, Tn, true), head_product, head_product, merge, merge, merge};
}

}  // namespace gpu
