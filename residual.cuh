// residual.cuh — the residual add of one step, scaled by Δt (docs/model.md §1):
//
//   residual forward:   out = x + Δt·f                 (n elements)
//   residual backward:  df += Δt·dout                  (= with GradOut::Write)
// The backward's identity term, dx += dout, is no launch: the model keeps the stream's gradient
// in one buffer, which the module's path then adds into (docs/block.md §2, line 4).
// The stream x, out, dout is of type S and the module's output f, df of type F (float or
// bf16; in bf16 mode S is float: the add happens, and is stored, in fp32). The arithmetic is
// fp32. The backward adds (+=) into its gradient, or stores it, as the CPU reference does.
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

// df += Δt·dout (= when `add` is false), one thread per element.
template <typename S, typename F>
__global__ void residual_backward_kernel(F* df, const S* dout, float dt, size_t n, bool add) {
    const size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    const float g = dt * to_float(dout[i]);
    df[i] = from_float<F>(add ? to_float(df[i]) + g : g);
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

// df += Δt·dout over n elements (= with GradOut::Write).
template <typename S, typename F>
void residual_backward(F* df, const S* dout, float dt, size_t n, cudaStream_t stream, GradOut out = GradOut::Add) {
    residual_backward_kernel<S, F><<<ceil_div(n, 256), 256, 0, stream>>>(df, dout, dt, n, out == GradOut::Add);
    cudaCheck(cudaGetLastError());
}

// Traffic of residual_backward: dout (S) read, df (F) read too when added into, df written.
template <typename S, typename F>
Traffic residual_backward_traffic(size_t n, GradOut out = GradOut::Add) {
    const double read = sizeof(S) + (out == GradOut::Add ? sizeof(F) : 0);
    return {"residual_backward_kernel", (double)n * read, (double)n * sizeof(F), (out == GradOut::Add ? 2.0 : 1.0) * n};
}

}  // namespace gpu
