// residual.cuh — the residual add of one step, scaled by Δt (docs/model.md §1):
//
//   residual forward:   out = x + Δt·f                 (n elements)
//   residual backward:  dx += dout;  df += Δt·dout
// Elements are T (float or bf16), the arithmetic fp32. The backward adds (+=) into its
// gradients, as the CPU reference does.
#pragma once
#include "cuda_common.cuh"

namespace gpu {

// ---------------------------------------------------------------------------------------------
// Kernels

// out = x + Δt·f, one thread per element.
template <typename T>
__global__ void residual_forward_kernel(T* out, const T* x, const T* f, float dt, size_t n) {
    const size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = from_float<T>(to_float(x[i]) + dt * to_float(f[i]));
}

// dx += dout; df += Δt·dout, one thread per element.
template <typename T>
__global__ void residual_backward_kernel(T* dx, T* df, const T* dout, float dt, size_t n) {
    const size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    const float d = to_float(dout[i]);
    dx[i] = from_float<T>(to_float(dx[i]) + d);
    df[i] = from_float<T>(to_float(df[i]) + dt * d);
}

// ---------------------------------------------------------------------------------------------
// Launchers

// out = x + Δt·f over n elements.
template <typename T>
void residual_forward(T* out, const T* x, const T* f, float dt, size_t n, cudaStream_t stream) {
    residual_forward_kernel<T><<<ceil_div(n, 256), 256, 0, stream>>>(out, x, f, dt, n);
    cudaCheck(cudaGetLastError());
}

// Traffic of residual_forward: x and f read, out written.
template <typename T>
Traffic residual_forward_traffic(size_t n) {
    return {"residual_forward_kernel", 2.0 * n * sizeof(T), (double)n * sizeof(T), 2.0 * n};
}

// dx += dout; df += Δt·dout over n elements.
template <typename T>
void residual_backward(T* dx, T* df, const T* dout, float dt, size_t n, cudaStream_t stream) {
    residual_backward_kernel<T><<<ceil_div(n, 256), 256, 0, stream>>>(dx, df, dout, dt, n);
    cudaCheck(cudaGetLastError());
}

// Traffic of residual_backward: dout, dx and df read, dx and df written.
template <typename T>
Traffic residual_backward_traffic(size_t n) {
    return {"residual_backward_kernel", 3.0 * n * sizeof(T), 2.0 * n * sizeof(T), 3.0 * n};
}

}  // namespace gpu
