// residual.cuh — the residual add of one step, scaled by Δt (docs/model.md §1):
//
//   residual forward:   out = x + Δt·f                 (n elements)
//   residual backward:  df += Δt·dout                  (= with GradOut::Write)
// The backward's identity term, dx += dout, is no launch: the model keeps the stream's gradient
// in one buffer, which the module's path then adds into (docs/block.md §2, line 4).
// The stream x, out, dout is of type S and the module's output f, df of type F (float or
// bf16; in bf16 mode S is float: the add happens, and is stored, in fp32). The arithmetic is
// fp32. The backward adds (+=) into its gradient, or stores it, as the CPU reference does.
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

// E elements of T, loaded and stored as one access of E·sizeof(T) bytes.
template <typename T, int E>
struct alignas(E * sizeof(T)) ResidualPack {
    T v[E];
};

// Elements per thread of the packed path: 16 bytes of the wider of S and F.
template <typename S, typename F>
__host__ __device__ constexpr int residual_pack_size() {
    return 16 / (sizeof(S) > sizeof(F) ? sizeof(S) : sizeof(F));
}

// The one element of each op, in fp32.
__device__ inline float residual_sum(float x, float f, float dt) { return x + dt * f; }
__device__ inline float residual_grad(float df, float dout, float dt, bool add) {
    return add ? df + dt * dout : dt * dout;
}

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
        const ResidualPack<S, E> xs = *reinterpret_cast<const ResidualPack<S, E>*>(x + first);
        const ResidualPack<F, E> fs = *reinterpret_cast<const ResidualPack<F, E>*>(f + first);
        ResidualPack<S, E> o;
        for (int e = 0; e < E; e++) o.v[e] = from_float<S>(residual_sum(to_float(xs.v[e]), to_float(fs.v[e]), dt));
        *reinterpret_cast<ResidualPack<S, E>*>(out + first) = o;
        return;
    }
    for (I i = first; i < n; i++) out[i] = from_float<S>(residual_sum(to_float(x[i]), to_float(f[i]), dt));
}

// df += Δt·dout (= when `add` is false: df is not read).
template <typename S, typename F, typename I>
__global__ void residual_backward_kernel(F* df, const S* dout, float dt, I n, bool add, bool packed) {
    constexpr int E = residual_pack_size<S, F>();
    const I k = (I)blockIdx.x * blockDim.x + threadIdx.x;
    if (!packed) {
        if (k < n) df[k] = from_float<F>(residual_grad(add ? to_float(df[k]) : 0.0f, to_float(dout[k]), dt, add));
        return;
    }
    const I first = k * E;
    if (first >= n) return;
    if (first + E <= n) {
        const ResidualPack<S, E> ds = *reinterpret_cast<const ResidualPack<S, E>*>(dout + first);
        ResidualPack<F, E> g;
        if (add) g = *reinterpret_cast<const ResidualPack<F, E>*>(df + first);
        for (int e = 0; e < E; e++)
            g.v[e] = from_float<F>(residual_grad(add ? to_float(g.v[e]) : 0.0f, to_float(ds.v[e]), dt, add));
        *reinterpret_cast<ResidualPack<F, E>*>(df + first) = g;
        return;
    }
    for (I i = first; i < n; i++)
        df[i] = from_float<F>(residual_grad(add ? to_float(df[i]) : 0.0f, to_float(dout[i]), dt, add));
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

// df += Δt·dout over n elements (= with GradOut::Write).
template <typename S, typename F>
void residual_backward(F* df, const S* dout, float dt, size_t n, cudaStream_t stream, GradOut out = GradOut::Add) {
    const bool add = out == GradOut::Add;
    if (residual_index32(n)) {
        const bool packed = residual_aligned<S, F>({dout}, {df});
        residual_backward_kernel<S, F, unsigned><<<residual_blocks<S, F>(n, packed), 256, 0, stream>>>(
            df, dout, dt, (unsigned)n, add, packed);
    } else {
        residual_backward_kernel<S, F, size_t><<<residual_blocks<S, F>(n, false), 256, 0, stream>>>(df, dout, dt, n,
                                                                                                   add, false);
    }
    cudaCheck(cudaGetLastError());
}

// Traffic of residual_backward: dout (S) read, df (F) read too when added into, df written.
template <typename S, typename F>
Traffic residual_backward_traffic(size_t n, GradOut out = GradOut::Add) {
    const double read = sizeof(S) + (out == GradOut::Add ? sizeof(F) : 0);
    return {"residual_backward_kernel", (double)n * read, (double)n * sizeof(F), (out == GradOut::Add ? 2.0 : 1.0) * n};
}

}  // namespace gpu
