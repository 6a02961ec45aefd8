// residual.cuh — the residual add of one step alone, scaled by Δt (docs/model.md §1):
//
//   residual forward:   out = x + Δt·f                 (n elements)
// The stream x, out is of type S and the module's output f of type F (float or bf16; in bf16 mode
// S is float: the add happens, and is stored, in fp32). The arithmetic is fp32.
// In a training step this kernel does not run: the model (gpt2.h) calls the add with the
// LayerNorm that reads its sum as one op (residual_layernorm_forward, layernorm.cuh), and the
// backward's df = Δt·ds with the LayerNorm backward that finishes ds (layernorm_backward_residual;
// its other term, dx = ds, needs no kernel: the model keeps the stream gradient in place,
// docs/block.md §2). CudaOps::residual_forward forms the last sum of run_blocks_from, which no
// LayerNorm reads there.
//
// Access pattern: where every buffer is aligned to its pack, each thread handles
// E = pack_width<S, F>() consecutive elements (4 for an fp32 stream) with one load or store
// per buffer: 16 bytes of S and E·sizeof F bytes of F (8 for bf16); otherwise one thread per
// element. Indices are 32-bit where n allows (narrow_index, cuda/cuda_common.cuh).
// The op that launches it: CudaOps::residual_forward (cuda_ops.cuh).
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

}  // namespace gpu
