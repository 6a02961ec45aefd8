// residual.cuh — the residual add of one step, scaled by Δt (docs/model.md §1):
//
//   residual forward:   out = x + Δt·f                 (n elements)
// The stream x, out is of type S and the module's output f of type F (float or bf16; in bf16
// mode S is float: the add happens, and is stored, in fp32). The arithmetic is fp32.
// In the training step the add is fused with the LayerNorm that reads its sum
// (residual_layernorm_forward, layernorm.cuh); this kernel computes a sum nothing normalises
// (the model's run_* diagnostics). The backward has no kernel: its identity term dx = ds is
// the stream gradient kept in place, and df = Δt·ds is written by the LayerNorm backward that
// finishes ds (layernorm_backward_residual; docs/block.md §2, line 4).
//
// Access pattern: where every buffer is aligned to its pack, each thread handles
// E = pack_width<S, F>() consecutive elements (4 for an fp32 stream) with one load or store
// per buffer: 16 bytes of S and E·sizeof F bytes of F (8 for bf16); otherwise one thread per
// element. Indices are 32-bit where n allows (with_index_type, cuda_common.cuh).
#pragma once
#include "cuda_common.cuh"

namespace gpu {

// One element of the sum, in fp32.
__device__ inline float residual_sum(float x, float f, float dt) { return x + dt * f; }

// ---------------------------------------------------------------------------------------------
// Kernels. With `packed`, thread k handles elements [k·E, k·E + E) (the last thread fewer);
// without, element k. I is the index type (with_index_type).

// out = x + Δt·f.
template <int E, typename S, typename F, typename I>
__global__ void residual_forward_kernel(S* out, const S* x, const F* f, float dt, I n, bool packed) {
    const I k = (I)blockIdx.x * blockDim.x + threadIdx.x;
    if (!packed) {
        if (k < n) out[k] = from_float<S>(residual_sum(to_float(x[k]), to_float(f[k]), dt));
        return;
    }
    const I first = k * E;
    if (first >= n) return;
    if (first + E <= n) {
        float xs[E], fs[E];
        load_pack(xs, x + first);
        load_pack(fs, f + first);
        for (int e = 0; e < E; e++) xs[e] = residual_sum(xs[e], fs[e], dt);
        store_pack(out + first, xs);
        return;
    }
    for (I i = first; i < n; i++) out[i] = from_float<S>(residual_sum(to_float(x[i]), to_float(f[i]), dt));
}

// ---------------------------------------------------------------------------------------------
// Launchers

// out = x + Δt·f over n elements: packed where out, x and f are aligned to their packs.
template <typename S, typename F>
void residual_forward(S* out, const S* x, const F* f, float dt, size_t n, cudaStream_t stream) {
    constexpr int E = pack_width<S, F>();
    const bool packed = aligned_to_packs<E>(out, x, f);
    const size_t threads = packed ? ceil_div(n, (size_t)E) : n;
    with_index_type(n, [&](auto index) {
        using I = decltype(index);
        residual_forward_kernel<E, S, F, I><<<ceil_div(threads, 256), 256, 0, stream>>>(out, x, f, dt, (I)n, packed);
    });
    cudaCheck(cudaGetLastError());
}

// Traffic of residual_forward: x (S) and f (F) read, out (S) written.
template <typename S, typename F>
Traffic residual_forward_traffic(size_t n) {
    return {"residual_forward_kernel", (double)n * (sizeof(S) + sizeof(F)), (double)n * sizeof(S), 2.0 * n};
}

}  // namespace gpu
