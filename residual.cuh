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
// Access pattern: where n < 2^31 and every buffer is aligned to its pack, each thread handles
// E = 16 / max(sizeof S, sizeof F) consecutive elements (4 for an fp32 stream) with one load or
// store per buffer: 16 bytes of S and E·sizeof F bytes of F (8 for bf16), 32-bit indices.
// Otherwise (a misaligned pointer, or n ≥ 2^31 with 64-bit indices) one thread per element.
#pragma once
#include <cstdint>
#include <initializer_list>

#include "cuda_common.cuh"

namespace gpu {

// Elements per thread of the packed path: 16 bytes of the wider of S and F.
template <typename S, typename F>
__host__ __device__ constexpr int residual_pack_size() {
    return 16 / (sizeof(S) > sizeof(F) ? sizeof(S) : sizeof(F));
}

// One element of the sum, in fp32.
__device__ inline float residual_sum(float x, float f, float dt) { return x + dt * f; }

// ---------------------------------------------------------------------------------------------
// Kernels. With `packed`, thread k handles elements [k·E, k·E + E) (the last thread fewer);
// without, element k. I is the index type: unsigned when n < 2^31, else size_t.

// out = x + Δt·f.
template <typename S, typename F, typename I>
__global__ void residual_forward_kernel(S* out, const S* x, const F* f, float dt, I n, bool packed) {
    constexpr int E = residual_pack_size<S, F>();
    const I k = (I)blockIdx.x * blockDim.x + threadIdx.x;
    if (!packed) {
        if (k < n) out[k] = from_float<S>(residual_sum(to_float(x[k]), to_float(f[k]), dt));
        return;
    }
    const I first = k * E;
    if (first >= n) return;
    if (first + E <= n) {
        const Pack<S, E> xs = *reinterpret_cast<const Pack<S, E>*>(x + first);
        const Pack<F, E> fs = *reinterpret_cast<const Pack<F, E>*>(f + first);
        Pack<S, E> o;
        for (int e = 0; e < E; e++) o.v[e] = from_float<S>(residual_sum(to_float(xs.v[e]), to_float(fs.v[e]), dt));
        *reinterpret_cast<Pack<S, E>*>(out + first) = o;
        return;
    }
    for (I i = first; i < n; i++) out[i] = from_float<S>(residual_sum(to_float(x[i]), to_float(f[i]), dt));
}

// ---------------------------------------------------------------------------------------------
// Launchers

// Whether n elements fit 32-bit indices with room for a pack past the last one.
inline bool residual_index32(size_t n) { return n < ((size_t)1 << 31); }

// Whether the stream buffers s and the module buffers f are all aligned to their packs.
template <typename S, typename F>
bool residual_aligned(std::initializer_list<const S*> s, std::initializer_list<const F*> f) {
    constexpr int E = residual_pack_size<S, F>();
    for (const S* p : s)
        if (reinterpret_cast<uintptr_t>(p) % (E * sizeof(S)) != 0) return false;
    for (const F* p : f)
        if (reinterpret_cast<uintptr_t>(p) % (E * sizeof(F)) != 0) return false;
    return true;
}

// Blocks of 256 threads that cover n elements, E per thread when packed.
template <typename S, typename F>
size_t residual_blocks(size_t n, bool packed) {
    return ceil_div(packed ? ceil_div(n, (size_t)residual_pack_size<S, F>()) : n, 256);
}

// out = x + Δt·f over n elements.
template <typename S, typename F>
void residual_forward(S* out, const S* x, const F* f, float dt, size_t n, cudaStream_t stream) {
    if (residual_index32(n)) {
        const bool packed = residual_aligned<S, F>({out, x}, {f});
        residual_forward_kernel<S, F, unsigned><<<residual_blocks<S, F>(n, packed), 256, 0, stream>>>(
            out, x, f, dt, (unsigned)n, packed);
    } else {
        residual_forward_kernel<S, F, size_t><<<residual_blocks<S, F>(n, false), 256, 0, stream>>>(out, x, f, dt, n,
                                                                                                  false);
    }
    cudaCheck(cudaGetLastError());
}

// Traffic of residual_forward: x (S) and f (F) read, out (S) written.
template <typename S, typename F>
Traffic residual_forward_traffic(size_t n) {
    return {"residual_forward_kernel", (double)n * (sizeof(S) + sizeof(F)), (double)n * sizeof(S), 2.0 * n};
}

}  // namespace gpu
