// residual.cuh — the residual add of one step, scaled by Δt (docs/model.md §1):
//
//   residual forward:   out = x + Δt·f                 (n elements)
//   residual backward:  dx += dout;  df += Δt·dout     (both = with GradOut::Write)
// The stream x, out, dx, dout is of type S and the module's output f, df of type F (float or
// bf16; in bf16 mode S is float: the add happens, and is stored, in fp32). The arithmetic is
// fp32. The backward adds (+=) into its gradients, or stores them, as the CPU reference does.
#pragma once
#include "cuda_common.cuh"

namespace gpu {

// ---------------------------------------------------------------------------------------------
// Kernels

// out = x + Δt·f, one thread per element.
template <typename S, typename F>
__global__ void residual_forward_kernel(S* out, const S* x, const F* f, float dt, size_t n) {
    const size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = from_float<S>(to_float(x[i]) + dt * to_float(f[i]));
}

// dx += dout; df += Δt·dout (= when `add` is false), one thread per element.
template <typename S, typename F>
__global__ void residual_backward_kernel(S* dx, F* df, const S* dout, float dt, size_t n, bool add) {
    const size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    const float d = to_float(dout[i]);
    dx[i] = from_float<S>(add ? to_float(dx[i]) + d : d);
    df[i] = from_float<F>(add ? to_float(df[i]) + dt * d : dt * d);
}

// ---------------------------------------------------------------------------------------------
// Launchers

// out = x + Δt·f over n elements.
template <typename S, typename F>
void residual_forward(S* out, const S* x, const F* f, float dt, size_t n, cudaStream_t stream) {
    residual_forward_kernel<S, F><<<ceil_div(n, 256), 256, 0, stream>>>(out, x, f, dt, n);
    cudaCheck(cudaGetLastError());
}

// Traffic of residual_forward: x (S) and f (F) read, out (S) written.
template <typename S, typename F>
Traffic residual_forward_traffic(size_t n) {
    return {"residual_forward_kernel", (double)n * (sizeof(S) + sizeof(F)), (double)n * sizeof(S), 2.0 * n};
}

// dx += dout; df += Δt·dout over n elements (both = with GradOut::Write).
template <typename S, typename F>
void residual_backward(S* dx, F* df, const S* dout, float dt, size_t n, cudaStream_t stream,
                       GradOut out = GradOut::Add) {
    residual_backward_kernel<S, F><<<ceil_div(n, 256), 256, 0, stream>>>(dx, df, dout, dt, n, out == GradOut::Add);
    cudaCheck(cudaGetLastError());
}

// Traffic of residual_backward: dout (S) read, dx (S) and df (F) read too when added into,
// dx and df written.
template <typename S, typename F>
Traffic residual_backward_traffic(size_t n, GradOut out = GradOut::Add) {
    const double read = sizeof(S) + (out == GradOut::Add ? sizeof(S) + sizeof(F) : 0);
    return {"residual_backward_kernel", (double)n * read, (double)n * (sizeof(S) + sizeof(F)), 3.0 * n};
}

}  // namespace gpu
