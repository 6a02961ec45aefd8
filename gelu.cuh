// gelu.cuh — GELU, tanh approximation (GPT-2's), elementwise over n = B·T·4C elements:
//
//   forward, fused with the bias of the matrix product before it (the MLP's fc layer):
//             pre (N,OC) = inp·wᵀ + bias;  out = GELU(pre) = ½·pre·(1 + tanh(u)),
//             u = √(2/π)·(pre + 0.044715·pre³); pre is kept for the backward
//   backward, fused with the bias gradient of the fc layer (the MLP's backward):
//             dinp (N,OC) = dout·GELU'(x) (written), and dbias (OC) += Σ_n dinp, so the fc
//             layer's matmul_backward need not read dinp again for its bias, where
//             GELU'(x) = ½·(1 + tanh(u)) + ½·x·(1 − tanh²(u))·√(2/π)·(1 + 3·0.044715·x²)
//
// Elements are T (float or bf16), arithmetic in fp32. Both kernels move 16 bytes per load and
// store (4 floats or 8 bf16) where OC is a multiple of the pack and the buffers are 16-byte
// aligned, else one element at a time; indices are 32-bit where the sizes allow (the forward
// falls back to 64-bit, the backward requires them).
#pragma once
#include "cuda_common.cuh"
#include "matmul.cuh"

namespace gpu {

constexpr float GELU_SCALE = 0.7978845608028654f;  // √(2/π)
constexpr float GELU_CUBIC = 0.044715f;

// GELU(x) and its derivative.
__device__ inline float gelu(float x) { return 0.5f * x * (1.0f + tanhf(GELU_SCALE * (x + GELU_CUBIC * x * x * x))); }
__device__ inline float gelu_derivative(float x) {
    const float th = tanhf(GELU_SCALE * (x + GELU_CUBIC * x * x * x));
    const float du = GELU_SCALE * (1.0f + 3.0f * GELU_CUBIC * x * x);
    return 0.5f * (1.0f + th) + 0.5f * x * (1.0f - th * th) * du;
}

// The input gradient of one element, rounded to T as it is stored.
template <typename T>
__device__ inline T gelu_input_grad(T dout, T x) {
    return from_float<T>(to_float(dout) * gelu_derivative(to_float(x)));
}

// ---------------------------------------------------------------------------------------------
// Kernels

// pre[n, o] += bias[o], then out = GELU(pre) of the stored (rounded) pre, so the result is the
// same as a bias pass followed by a GELU pass. Thread k handles the K elements [k·K, k·K + K)
// of the n = N·OC elements, which lie in one row (K divides OC), with one access per buffer:
// K = Pack16<T>::size (16 bytes) where the launcher found the rows aligned, else K = 1. I is
// the index type (with_index_type).
template <int K, typename T, typename I>
__global__ void bias_gelu_forward_kernel(T* out, T* pre, const T* bias, I n, I OC) {
    const I first = ((I)blockIdx.x * blockDim.x + threadIdx.x) * K;
    if (first >= n) return;
    float p[K], g[K];
    load_plus_bias(p, pre + first, bias + first % OC);
    for (int e = 0; e < K; e++) g[e] = gelu(p[e]);
    store_pack(pre + first, p);
    store_pack(out + first, g);
}

// dinp = dout·GELU'(inp) (written) over (N,OC), and stage 1 of dbias (see cuda_common.cuh):
// partial[k·OC + o] = Σ_{n in chunk k} dinp[n, o] of the stored (rounded) dinp, so the sum is
// the one bias_backward_kernel would take of it. Block (TILE_COLS, TILE_ROWS) covers
// TILE_COLS·S columns (S = Pack16<T>::size) of row chunk blockIdx.y; thread (x, y) handles the S
// columns from c0 = (blockIdx.x·TILE_COLS + x)·S in rows y, y + TILE_ROWS, ... of the chunk, as
// one 16-byte access per buffer and row when OC is a multiple of S and the buffers are aligned
// (then a row's S columns are all there), else one by one.
template <typename T>
__global__ void gelu_bias_backward_kernel(T* dinp, float* partial, const T* dout, const T* inp, int N, int OC) {
    using P = Pack16<T>;
    __shared__ float shared[TILE_ROWS * TILE_COLS];
    const unsigned c0 = (blockIdx.x * TILE_COLS + threadIdx.x) * P::size, width = (unsigned)OC;
    const int k = blockIdx.y, chunks = gridDim.y;
    const int end = row_chunk_begin(k + 1, chunks, N);
    const bool packed = width % P::size == 0 && aligned16(dinp, dout, inp);
    float sum[P::size] = {};
    if (c0 < width)
        for (int n = row_chunk_begin(k, chunks, N) + threadIdx.y; n < end; n += TILE_ROWS) {
            const unsigned first = (unsigned)n * width + c0;  // N·OC < 2^32 (the launcher checks)
            if (packed) {
                const P g = *reinterpret_cast<const P*>(dout + first), x = *reinterpret_cast<const P*>(inp + first);
                P d;
                for (int e = 0; e < P::size; e++) {
                    d.v[e] = gelu_input_grad(g.v[e], x.v[e]);
                    sum[e] += to_float(d.v[e]);
                }
                *reinterpret_cast<P*>(dinp + first) = d;
            } else {
                for (unsigned e = 0; e < (unsigned)P::size && c0 + e < width; e++) {
                    dinp[first + e] = gelu_input_grad(dout[first + e], inp[first + e]);
                    sum[e] += to_float(dinp[first + e]);
                }
            }
        }
    for (int e = 0; e < P::size; e++) {
        const float column = sum_over_tile_rows(sum[e], shared);
        if (threadIdx.y == 0 && c0 + e < width) partial[(size_t)k * OC + c0 + e] = column;
    }
}

// ---------------------------------------------------------------------------------------------
// Launchers

// pre (N,OC) += bias (OC);  out (N,OC) = GELU(pre): in 16-byte packs where OC is a multiple of
// Pack16<T>::size and out, pre and bias are 16-byte aligned, else element by element (the same
// results, bit for bit).
template <typename T>
void bias_gelu_forward(T* out, T* pre, const T* bias, int N, int OC, cudaStream_t stream) {
    const size_t n = (size_t)N * OC;
    if (n == 0) return;
    auto launch = [&](auto pack, auto index) {
        constexpr int K = decltype(pack)::value;
        using I = decltype(index);
        bias_gelu_forward_kernel<K, T, I><<<ceil_div(ceil_div(n, K), 256), 256, 0, stream>>>(out, pre, bias, (I)n,
                                                                                              (I)OC);
    };
    with_row_packs<Pack16<T>::size>(n, OC, launch, out, pre, bias);
    cudaCheck(cudaGetLastError());
}

// Traffic of bias_gelu_forward: pre and bias read, pre and out written, about 11 FLOPs per
// element.
template <typename T>
Traffic bias_gelu_forward_traffic(int N, int OC) {
    const double n = (double)N * OC;
    return {"bias_gelu_forward_kernel", (n + OC) * sizeof(T), 2 * n * sizeof(T), 11.0 * n};
}

// pre (N,OC) = inp (N,IC)·wᵀ + bias;  out (N,OC) = GELU(pre): the product, then one pass for
// bias and GELU together.
template <typename T>
void matmul_bias_gelu_forward(cublasHandle_t handle, T* out, T* pre, const T* inp, const T* w, const T* bias, int N,
                              int IC, int OC, cudaStream_t stream) {
    matmul_forward(handle, pre, inp, w, (const T*)nullptr, N, IC, OC, stream);
    bias_gelu_forward(out, pre, bias, N, OC, stream);
}

// Traffic of matmul_bias_gelu_forward: the product, then the bias + GELU pass.
template <typename T>
Launches matmul_bias_gelu_forward_traffic(int N, int IC, int OC) {
    Launches out = matmul_forward_traffic<T>(N, IC, OC, false);
    out.push_back(bias_gelu_forward_traffic<T>(N, OC));
    return out;
}

// dinp (N,OC) = dout·GELU'(inp) (written);  dbias (OC) += Σ_n dinp (fp32): GELU's backward
// and the bias part of the fc layer's matmul_backward (which then gets a null dbias) in one
// pass over the rows, then the second stage of the column sum. `partial` is scratch of
// MAX_ROW_CHUNKS·OC floats.
template <typename T>
void gelu_bias_backward(T* dinp, float* dbias, const T* dout, const T* inp, int N, int OC, float* partial,
                        cudaStream_t stream) {
    if (N == 0 || OC == 0) return;
    require_32bit_indices("gelu_bias_backward", (size_t)N * OC);
    const int chunks = row_chunks(N);
    const dim3 grid((unsigned)ceil_div(OC, (size_t)TILE_COLS * Pack16<T>::size), (unsigned)chunks);
    gelu_bias_backward_kernel<T><<<grid, dim3(TILE_COLS, TILE_ROWS), 0, stream>>>(dinp, partial, dout, inp, N, OC);
    cudaCheck(cudaGetLastError());
    add_column_partials(dbias, partial, chunks, OC, OC, stream);
}

// Traffic of gelu_bias_backward: dout and inp read, dinp and the partials written, about 21
// FLOPs per element; then the second stage of the bias gradient.
template <typename T>
Launches gelu_bias_backward_traffic(int N, int OC) {
    const double n = (double)N * OC;
    const int chunks = row_chunks(N);
    return {{"gelu_bias_backward_kernel", 2.0 * n * sizeof(T), n * sizeof(T) + 4.0 * chunks * OC, 21.0 * n},
            add_column_partials_traffic(chunks, OC)};
}

}  // namespace gpu
