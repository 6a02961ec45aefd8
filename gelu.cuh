// gelu.cuh — GELU, tanh approximation (GPT-2's), elementwise over n = B·T·4C elements:
//
//   forward, fused with the fc layer's product and bias (the MLP's fc layer):
//             pre (N,OC) = inp·wᵀ + bias;  out = GELU(pre) = ½·pre·(1 + tanh(u)),
//             u = √(2/π)·(pre + 0.044715·pre³); pre is kept for the backward
//   backward, fused with the product of the layer after it (fcproj, whose input is GELU(pre)):
//             dpre (N,IC) = (dout·w)·GELU'(pre) (written), where
//             GELU'(x) = ½·(1 + tanh(u)) + ½·x·(1 − tanh²(u))·√(2/π)·(1 + 3·0.044715·x²)
//
// In bf16 both are epilogues of cuBLASLt products (matmul.cuh) where it has an algorithm for
// them; in fp32, and where cuBLASLt refuses, the product runs alone and one of the kernels below
// makes a pass over its result. fp32 mode computes what the CPU reference computes, and
// cuBLASLt does not document which GELU its epilogues compute, so fp32 never uses them
// (docs/cuda.md §3). Elements are T (float or bf16), arithmetic in fp32. The kernels move 16 bytes per load and
// store (4 floats or 8 bf16) where OC is a multiple of the pack and the buffers are 16-byte
// aligned, else one element at a time, with 32-bit indices where the sizes allow.
// The ops that launch these kernels: CudaOps::matmul_gelu_forward and matmul_gelu_backward
// (cuda_ops.cuh).
#pragma once
#include <type_traits>

#include "cuda/cuda_common.cuh"
#include "matmul.cuh"

namespace gpu {

constexpr float GELU_SCALE = 0.7978845608028654f;  // √(2/π)
constexpr float GELU_CUBIC = 0.044715f;

// True where GELU and its derivative may be cuBLASLt epilogues: in bf16 only (above).
template <typename T>
constexpr bool gelu_epilogue_allowed() {
    return std::is_same<T, bf16>::value;
}

// GELU(x) and its derivative.
__device__ inline float gelu(float x) { return 0.5f * x * (1.0f + tanhf(GELU_SCALE * (x + GELU_CUBIC * x * x * x))); }
__device__ inline float gelu_derivative(float x) {
    const float th = tanhf(GELU_SCALE * (x + GELU_CUBIC * x * x * x));
    const float du = GELU_SCALE * (1.0f + 3.0f * GELU_CUBIC * x * x);
    return 0.5f * (1.0f + th) + 0.5f * x * (1.0f - th * th) * du;
}

// ---------------------------------------------------------------------------------------------
// Kernels

// pre[n, o] += bias[o], then out = GELU(pre) of the stored (rounded) pre, so the result is the
// same as a bias pass followed by a GELU pass. Thread k handles the K elements [k·K, k·K + K)
// of the n = N·OC elements, which lie in one row (K divides OC), with one access per buffer:
// K = Pack16<T>::size (16 bytes) where its op found the rows aligned, else K = 1. I is
// the index type (narrow_index).
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

// d[e] *= GELU'(pre[e]) over the n elements of d, each product rounded to T as it is stored:
// the pass of GELU's backward over a product's result. Thread k handles the K elements
// [k·K, k·K + K) with one access per buffer: K = Pack16<T>::size where its op found the
// buffers aligned, else K = 1. I is the index type (narrow_index).
template <int K, typename T, typename I>
__global__ void gelu_backward_inplace_kernel(T* d, const T* pre, I n) {
    const I first = ((I)blockIdx.x * blockDim.x + threadIdx.x) * K;
    if (first >= n) return;
    float g[K], x[K];
    load_pack(g, d + first);
    load_pack(x, pre + first);
    for (int e = 0; e < K; e++) g[e] *= gelu_derivative(x[e]);
    store_pack(d + first, g);
}

}  // namespace gpu
