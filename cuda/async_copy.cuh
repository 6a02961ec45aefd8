// cuda/async_copy.cuh — copies from device memory into shared memory that run while the thread goes
// on, as device functions over their PTX (PTX ISA, "Data Movement and Conversion Instructions:
// cp.async", "cp.async.commit_group", "cp.async.wait_group"); sm_80 or newer:
//
//   cp_async<BYTES>(dst, src)   starts copying BYTES (4, 8 or 16) bytes from device memory at src
//                               to shared memory at dst, both aligned to BYTES:
//                               cp.async.cg.shared.global for 16 bytes (cached in L2 only),
//                               cp.async.ca.shared.global for 4 and 8
//   cp_async_commit()           closes the copies this thread started since its last commit into
//                               one group (cp.async.commit_group; no copies: an empty group)
//   cp_async_wait<N>()          waits until at most the N most recent groups of this thread are
//                               still in flight (cp.async.wait_group N): 0 waits for all
//
// Until the wait that completes its group, a copy's destination holds anything (reading it, or
// changing its source, is undefined); after it, the copied bytes are visible to the waiting
// thread only, and to the other threads of the block after a __syncthreads() that follows.
//
// On the CPU (the SIMT emulation, docs/simt.md) test/simt/async_copy.cuh stands in for this file.
#pragma once
#include <cstdint>

template <int BYTES>
__device__ inline void cp_async(void* dst, const void* src) {
    static_assert(BYTES == 4 || BYTES == 8 || BYTES == 16, "cp.async copies 4, 8 or 16 bytes");
    const uint32_t to = (uint32_t)__cvta_generic_to_shared(dst);
    const size_t from = __cvta_generic_to_global(src);
    if constexpr (BYTES == 16)
        asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" : : "r"(to), "l"(from) : "memory");
    else
        asm volatile("cp.async.ca.shared.global [%0], [%1], %2;\n" : : "r"(to), "l"(from), "n"(BYTES) : "memory");
}

__device__ inline void cp_async_commit() { asm volatile("cp.async.commit_group;\n" : : : "memory"); }

template <int N>
__device__ inline void cp_async_wait() {
    asm volatile("cp.async.wait_group %0;\n" : : "n"(N) : "memory");
}
