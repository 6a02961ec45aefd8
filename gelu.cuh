// gelu.cuh — GELU, tanh approximation (GPT-2's), elementwise over n = B·T·4C elements:
//
//   forward:  y = ½·x·(1 + tanh(u)),  u = √(2/π)·(x + 0.044715·x³)
//   backward: dinp += dout·(½·(1 + tanh(u)) + ½·x·(1 − tanh²(u))·√(2/π)·(1 + 3·0.044715·x²))
//
// Elements are T (float or bf16), arithmetic in fp32.
#pragma once
#include "cuda_common.cuh"

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

// Traffic of gelu_backward: dout, inp and dinp read, dinp written, about 20 FLOPs per element.
template <typename T>
Traffic gelu_backward_traffic(size_t n) {
    return {"gelu_backward_kernel", 3.0 * n * sizeof(T), (double)n * sizeof(T), 20.0 * n};
}

}  // namespace gpu
