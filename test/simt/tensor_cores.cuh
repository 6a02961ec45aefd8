// The SIMT emulation's stand-in for cuda/tensor_cores.cuh (in the repository), which wraps PTX that
// a CPU cannot run: the emulated build compiles this file in its place (the Makefile copies it
// over build/emu/src/cuda/tensor_cores.cuh). The same functions, implemented in tensor_cores.cpp from
// the PTX ISA's semantics and documented fragment layouts (cuda/tensor_cores.cuh and docs/simt.md,
// "Tensor-core instructions"): each is a warp operation over all 32 lanes, the last lane to
// arrive computes the whole warp's result, and misuse is a KernelError.
#pragma once
#include <cstdint>

namespace simt {
// d += a·b for the calling lane's fragments (mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32).
void mma_m16n8k16_bf16(float* d, const std::uint32_t* a, const std::uint32_t* b);
// r[0 .. count) = the lane's fragments of `count` 8×8 matrices whose rows the lanes address
// (ldmatrix.sync.aligned.m8n8.x{count}[.trans].shared.b16). count must be 1, 2 or 4 and the rows
// used must be 16-byte aligned and in the block's shared memory.
void ldmatrix(std::uint32_t* r, int count, bool transpose, const void* row);
}  // namespace simt

__device__ inline void mma_m16n8k16_bf16(float (&d)[4], const uint32_t (&a)[4], const uint32_t (&b)[2]) {
    simt::mma_m16n8k16_bf16(d, a, b);
}

template <int N>
__device__ inline void ldmatrix(uint32_t (&r)[N], const void* row) {
    static_assert(N == 1 || N == 2 || N == 4, "ldmatrix loads 1, 2 or 4 matrices (.x1, .x2, .x4)");
    simt::ldmatrix(r, N, false, row);
}

template <int N>
__device__ inline void ldmatrix_trans(uint32_t (&r)[N], const void* row) {
    static_assert(N == 1 || N == 2 || N == 4, "ldmatrix loads 1, 2 or 4 matrices (.x1, .x2, .x4)");
    simt::ldmatrix(r, N, true, row);
}
