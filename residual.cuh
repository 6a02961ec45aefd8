// residual.cuh — the residual add of one step, scaled by Δt (docs/model.md §1), and its backward:
//
//   residual forward:   out = x + Δt·f                 (n elements)
//   residual backward:  df = Δt·ds (or df += Δt·ds)    (n elements)
// The stream x, out, ds is of type S and the module's output f and its gradient df of type F
// (float or bf16; in bf16 mode S is float: the add happens, and is stored, in fp32). The
// arithmetic is fp32. The backward's other term, dx = ds, has no kernel: the model keeps the
// stream gradient in place (docs/block.md §2, line 4).
// In a training step neither kernel runs: the model (gpt2.h) calls the add with the LayerNorm
// that reads its sum as one op (residual_layernorm_forward, layernorm.cuh) and df = Δt·ds with
// the LayerNorm backward that finishes ds (layernorm_backward_residual: layernorm_backward with
// its dres). residual_forward forms the last sum of run_blocks_from, which no LayerNorm reads
// there; residual_backward is in no pass of the model (the tests compare the fused op with it).
//
// Access pattern: where every buffer is aligned to its pack, each thread handles
// E = pack_width<S, F>() consecutive elements (4 for an fp32 stream) with one load or store
// per buffer: 16 bytes of S and E·sizeof F bytes of F (8 for bf16); otherwise one thread per
// element. Indices are 32-bit where n allows (narrow_index, cuda/cuda_common.cuh).
#pragma once
#include "cuda/cuda_common.cuh"
#include "model.h"

namespace gpu {

// One element of the sum, in fp32.
__device__ inline float residual_sum(float x, float f, float dt) { return x + dt * f; }

// ---------------------------------------------------------------------------------------------
// Kernels. With `packed`, thread k handles elements [k·E, k·E + E) (the last thread fewer);
// without, element k. I is the index type (narrow_index).

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

// df = Δt·ds, or df += Δt·ds when `add`.
template <int E, typename F, typename S, typename I>
__global__ void residual_backward_kernel(F* df, const S* ds, float dt, I n, bool add, bool packed) {
    const I k = (I)blockIdx.x * blockDim.x + threadIdx.x;
    auto one = [&](I i) { df[i] = from_float<F>(add ? dt * to_float(ds[i]) + to_float(df[i]) : dt * to_float(ds[i])); };
    if (!packed) {
        if (k < n) one(k);
        return;
    }
    const I first = k * E;
    if (first >= n) return;
    if (first + E <= n) {
        float d[E], f[E];
        load_pack(d, ds + first);
        if (add) load_pack(f, df + first);
        for (int e = 0; e < E; e++) d[e] = add ? dt * d[e] + f[e] : dt * d[e];
        store_pack(df + first, d);
        return;
    }
    for (I i = first; i < n; i++) one(i);
}

// ---------------------------------------------------------------------------------------------
// Launchers

// out = x + Δt·f over n elements: packed where out, x and f are aligned to their packs.
template <typename S, typename F>
void residual_forward(S* out, const S* x, const F* f, float dt, size_t n, cudaStream_t stream) {
    constexpr int E = pack_width<S, F>();
    const bool packed = aligned_to_packs<E>(out, x, f);
    const size_t threads = packed ? ceil_div(n, (size_t)E) : n;
    if (narrow_index(n))
        residual_forward_kernel<E, S, F, unsigned><<<ceil_div(threads, 256), 256, 0, stream>>>(out, x, f, dt,
                                                                                             (unsigned)n, packed);
    else
        residual_forward_kernel<E, S, F, size_t><<<ceil_div(threads, 256), 256, 0, stream>>>(out, x, f, dt, n, packed);
    cudaCheck(cudaGetLastError());
}

// df (F) = Δt·ds (S) over n elements (GradOut::Write), or added into df (GradOut::Add):
// packed where df and ds are aligned to their packs.
template <typename F, typename S>
void residual_backward(F* df, const S* ds, float dt, size_t n, GradOut df_out, cudaStream_t stream) {
    constexpr int E = pack_width<S, F>();
    const bool packed = aligned_to_packs<E>(df, ds);
    const size_t threads = packed ? ceil_div(n, (size_t)E) : n;
    const bool add = df_out == GradOut::Add;
    if (narrow_index(n))
        residual_backward_kernel<E, F, S, unsigned><<<ceil_div(threads, 256), 256, 0, stream>>>(df, ds, dt, (unsigned)n,
                                                                                              add, packed);
    else
        residual_backward_kernel<E, F, S, size_t><<<ceil_div(threads, 256), 256, 0, stream>>>(df, ds, dt, n, add,
                                                                                            packed);
    cudaCheck(cudaGetLastError());
}

}  // namespace gpu
