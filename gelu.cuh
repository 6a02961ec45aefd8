// gelu.cuh — GELU, tanh approximation (GPT-2's), elementwise over n = B·T·4C elements:
//
//   forward:  y = ½·x·(1 + tanh(u)),  u = √(2/π)·(x + 0.044715·x³)
//   backward: dinp += dout·(½·(1 + tanh(u)) + ½·x·(1 − tanh²(u))·√(2/π)·(1 + 3·0.044715·x²))
//
//   fused with the bias of the matrix product before it (the MLP's fc layer):
//             pre (N,OC) = inp·wᵀ + bias;  out = GELU(pre), pre kept for the backward
//
// Elements are T (float or bf16), arithmetic in fp32.
#pragma once
#include "cuda_common.cuh"
#include "matmul.cuh"

namespace gpu {

constexpr float GELU_SCALE = 0.7978845608028654f;  // √(2/π)
constexpr float GELU_CUBIC = 0.044715f;

// ---------------------------------------------------------------------------------------------
// Kernels

// One thread per element.
template <typename T>
__global__ void gelu_forward_kernel(T* out, const T* inp, size_t n) {
    const size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    const float x = to_float(inp[i]);
    out[i] = from_float<T>(0.5f * x * (1.0f + tanhf(GELU_SCALE * (x + GELU_CUBIC * x * x * x))));
}

// pre[n, o] += bias[o], then out = GELU(pre) of the stored (rounded) pre, so the result is the
// same as the bias pass followed by gelu_forward_kernel; one thread per element of (N,OC).
template <typename T>
__global__ void bias_gelu_forward_kernel(T* out, T* pre, const T* bias, int N, int OC) {
    const unsigned i = blockIdx.x * blockDim.x + threadIdx.x;  // N·OC < 2^32 (the launcher checks)
    if (i >= (unsigned)N * (unsigned)OC) return;
    const T p = from_float<T>(to_float(pre[i]) + to_float(bias[i % (unsigned)OC]));
    pre[i] = p;
    const float x = to_float(p);
    out[i] = from_float<T>(0.5f * x * (1.0f + tanhf(GELU_SCALE * (x + GELU_CUBIC * x * x * x))));
}

// One thread per element; adds into dinp.
template <typename T>
__global__ void gelu_backward_kernel(T* dinp, const T* dout, const T* inp, size_t n) {
    const size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    const float x = to_float(inp[i]);
    const float th = tanhf(GELU_SCALE * (x + GELU_CUBIC * x * x * x));
    const float du = GELU_SCALE * (1.0f + 3.0f * GELU_CUBIC * x * x);
    const float dydx = 0.5f * (1.0f + th) + 0.5f * x * (1.0f - th * th) * du;
    dinp[i] = from_float<T>(to_float(dinp[i]) + to_float(dout[i]) * dydx);
}

// ---------------------------------------------------------------------------------------------
// Launchers

// out = GELU(inp), n elements.
template <typename T>
void gelu_forward(T* out, const T* inp, size_t n, cudaStream_t stream) {
    gelu_forward_kernel<T><<<ceil_div(n, 256), 256, 0, stream>>>(out, inp, n);
    cudaCheck(cudaGetLastError());
}

// Traffic of gelu_forward: inp read, out written, about 10 FLOPs per element.
template <typename T>
Traffic gelu_forward_traffic(size_t n) {
    return {"gelu_forward_kernel", (double)n * sizeof(T), (double)n * sizeof(T), 10.0 * n};
}

// dinp += dout·GELU'(inp), n elements.
template <typename T>
void gelu_backward(T* dinp, const T* dout, const T* inp, size_t n, cudaStream_t stream) {
    gelu_backward_kernel<T><<<ceil_div(n, 256), 256, 0, stream>>>(dinp, dout, inp, n);
    cudaCheck(cudaGetLastError());
}

// pre (N,OC) = inp (N,IC)·wᵀ + bias;  out (N,OC) = GELU(pre): the product, then one pass for
// bias and GELU together.
template <typename T>
void matmul_bias_gelu_forward(cublasHandle_t handle, T* out, T* pre, const T* inp, const T* w, const T* bias, int N,
                              int IC, int OC, cudaStream_t stream) {
    matmul_forward(handle, pre, inp, w, (const T*)nullptr, N, IC, OC, stream);
    const size_t n = (size_t)N * OC;
    if (n >= (size_t)1 << 32) {
        std::fprintf(stderr, "matmul_bias_gelu_forward: N·OC = %zu needs 64-bit indices\n", n);
        std::exit(EXIT_FAILURE);
    }
    bias_gelu_forward_kernel<T><<<ceil_div(n, 256), 256, 0, stream>>>(out, pre, bias, N, OC);
    cudaCheck(cudaGetLastError());
}

// Traffic of matmul_bias_gelu_forward: the product, then pre and bias read, pre and out written.
template <typename T>
Launches matmul_bias_gelu_forward_traffic(int N, int IC, int OC) {
    Launches out = matmul_forward_traffic<T>(N, IC, OC, false);
    const double n = (double)N * OC;
    out.push_back({"bias_gelu_forward_kernel", (n + OC) * sizeof(T), 2 * n * sizeof(T), 11.0 * n});
    return out;
}

// Traffic of gelu_backward: dout, inp and dinp read, dinp written, about 20 FLOPs per element.
template <typename T>
Traffic gelu_backward_traffic(size_t n) {
    return {"gelu_backward_kernel", 3.0 * n * sizeof(T), (double)n * sizeof(T), 20.0 * n};
}

}  // namespace gpu
